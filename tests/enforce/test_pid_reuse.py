"""container_cgroup_of: the cgroup /proc/<pid>/cgroup shows is held to the container's own
linux.cgroupsPath, so a pid reused by another container's process never leads the hook to
that container's cgroup (the hook's end-to-end case is in tests/hook/test_cache.py)."""

from __future__ import annotations

import pytest

from nri_plugin.enforce.cgpaths import CgroupPaths, container_cgroup_of
from nri_plugin.enforce.errors import CgroupPathError

ROOTS = {"cpu": "/sys/fs/cgroup/cpu", "memory": "/sys/fs/cgroup/memory"}


def found(rel: str) -> CgroupPaths:
    return CgroupPaths("/proc/7/cgroup", 1, {c: r + rel for c, r in ROOTS.items()}, dict(ROOTS))


@pytest.mark.parametrize(
    ("cgroups_path", "proc_rel", "expected_rel"),
    [
        (
            "/kubepods/burstable/pod1/ctr",
            "/kubepods/burstable/pod1/ctr",
            "/kubepods/burstable/pod1/ctr",
        ),
        (
            "kubepods-burstable-pod1.slice:cri-containerd:abc",
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1.slice/"
            "cri-containerd-abc.scope",
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1.slice/"
            "cri-containerd-abc.scope",
        ),
        ("pod1/ctr", "/runtime/pod1/ctr", "/runtime/pod1/ctr"),  # relative: below runc's cgroup
        ("/../../kubepods/ctr", "/kubepods/ctr", "/kubepods/ctr"),  # cleaned as runc cleans it
        ("/kubepods/ctr", "/kubepods/ctr/init.scope", "/kubepods/ctr"),  # its own sub-cgroup
    ],
)
def test_the_containers_own_cgroup(cgroups_path, proc_rel, expected_rel) -> None:
    paths = container_cgroup_of(found(proc_rel), cgroups_path, 7)
    assert paths.dirs == {c: r + expected_rel for c, r in ROOTS.items()}
    assert paths.roots == ROOTS


@pytest.mark.parametrize(
    ("cgroups_path", "proc_rel"),
    [
        ("/kubepods/burstable/pod1/ctr", "/kubepods/burstable/pod2/other"),  # another tenant's
        ("/kubepods/burstable/pod1/ctr", "/kubepods/burstable/pod1/ctr2"),  # a sibling (prefix)
        ("/kubepods/burstable/pod1/ctr", "/kubepods/burstable/pod1"),  # its pod's
        (
            "kubepods-pod1.slice:cri-containerd:abc",
            "/kubepods.slice/kubepods-pod1.slice/cri-containerd-abd.scope",
        ),
    ],
)
def test_a_reused_pid_is_refused(cgroups_path, proc_rel) -> None:
    with pytest.raises(CgroupPathError, match=r"pid was reused\?"):
        container_cgroup_of(found(proc_rel), cgroups_path, 7)
