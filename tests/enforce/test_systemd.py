"""systemd driver: slice expansion by dashes and the slice:prefix:name form."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nri_plugin.enforce.cgpaths import expand_slice, is_systemd_form, systemd_cgroup_path
from nri_plugin.enforce.errors import CgroupPathError


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (
            "kubepods-burstable-pod1_2.slice:cri-containerd:abc",
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1_2.slice/"
            "cri-containerd-abc.scope",
        ),
        ("kubepods.slice:crio:abc", "/kubepods.slice/crio-abc.scope"),
        (":docker:abc", "/system.slice/docker-abc.scope"),  # empty slice = system.slice
        ("-.slice:p:n", "/p-n.scope"),  # root slice
        ("-:p:n", "/p-n.scope"),
        ("user-1000.slice:x:my.slice", "/user.slice/user-1000.slice/my.slice"),  # name is a slice
    ],
)
def test_expansion(path: str, expected: str) -> None:
    assert systemd_cgroup_path(path) == expected


def test_forms() -> None:
    assert is_systemd_form("a.slice:b:c")
    assert not is_systemd_form("/kubepods/a:b:c")
    assert not is_systemd_form("a.slice:b")
    with pytest.raises(CgroupPathError, match="slice:prefix:name"):
        systemd_cgroup_path("/kubepods/pod")


@pytest.mark.parametrize("bad", ["-a.slice", "a-.slice", "a--b.slice", ".slice", "a.scope"])
def test_bad_slices(bad: str) -> None:
    with pytest.raises(CgroupPathError, match=re.escape(repr(bad))):
        expand_slice(f"{bad}:p:n", bad)


_component = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_", min_size=1, max_size=6)


@settings(max_examples=60, deadline=None)
@given(st.lists(_component, min_size=1, max_size=5))
def test_expansion_nests_each_prefix(parts: list[str]) -> None:
    name = "-".join(parts) + ".slice"
    expanded = expand_slice(name, name).strip("/").split("/")
    assert len(expanded) == len(parts)
    assert expanded[-1] == name
    for i, comp in enumerate(expanded):
        assert comp == "-".join(parts[: i + 1]) + ".slice"
