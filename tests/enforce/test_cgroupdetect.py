"""Cgroup version/driver detection (cgroupdetect) and container path resolution
(CgroupFacts.container_paths) on fake trees."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nri_plugin.enforce.cgpaths import CgroupFacts, Hierarchy, parse_proc_cgroup, safe_join
from nri_plugin.enforce.cgroupdetect import detect_cgroup_facts
from nri_plugin.enforce.errors import CgroupFactsError, CgroupPathError
from nri_plugin.enforce.mountinfo import parse_mountinfo
from nri_plugin.errors import DamagedState
from tests.support.cgroups import CgroupTree, make_v1_tree

SYSTEMD_PATH = "kubepods-burstable-pod0a1b_2c3d.slice:cri-containerd:4f5e6d"
SYSTEMD_EXPANDED = (
    "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0a1b_2c3d.slice/"
    "cri-containerd-4f5e6d.scope"
)

# A real hybrid host's lines (Debian 12 style), including an escaped space in a mount point.
HYBRID_SAMPLE = """\
25 30 0:23 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
31 25 0:28 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755
32 31 0:29 / /sys/fs/cgroup/unified rw,nosuid shared:10 - cgroup2 cgroup2 rw,nsdelegate
33 31 0:30 / /sys/fs/cgroup/systemd rw,nosuid shared:11 - cgroup cgroup rw,xattr,name=systemd
34 31 0:31 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid shared:12 - cgroup cgroup rw,cpu,cpuacct
35 31 0:32 /kubepods/pod1 /sys/fs/cgroup/memory rw shared:13 - cgroup cgroup rw,memory
36 31 0:33 / /mnt/with\\040space rw - cgroup cgroup rw,blkio
"""


def test_parse_mountinfo_sample() -> None:
    mounts = parse_mountinfo(HYBRID_SAMPLE)
    assert [m.fstype for m in mounts] == ["cgroup2", "cgroup", "cgroup", "cgroup", "cgroup"]
    assert mounts[1].controllers == ("name=systemd",)
    assert mounts[2].controllers == ("cpu", "cpuacct")
    assert mounts[2].mount_point == "/sys/fs/cgroup/cpu,cpuacct"
    assert mounts[3].root == "/kubepods/pod1"
    assert mounts[4].mount_point == "/mnt/with space"


def test_parse_mountinfo_rejects_garbage() -> None:
    with pytest.raises(CgroupFactsError, match="line 1"):
        parse_mountinfo("not a mountinfo line\n")


def test_parse_proc_cgroup() -> None:
    entries = parse_proc_cgroup("4:memory:/a/b\n1:cpu,cpuacct:/\n0::/x:y\n", "cg")
    assert entries == [(4, ("memory",), "/a/b"), (1, ("cpu", "cpuacct"), "/"), (0, (), "/x:y")]
    with pytest.raises(CgroupFactsError, match="cg line 1: malformed"):
        parse_proc_cgroup("x:y\n", "cg")


def test_a_root_given_as_a_string_is_normalised(v1_tree: CgroupTree, fake_proc: Path) -> None:
    root = v1_tree.root
    facts = detect_cgroup_facts(f"{root}//", mountinfo=str(v1_tree.mountinfo), proc=str(fake_proc))
    assert facts.root == str(root)
    assert facts.container_paths("/a").dir("cpu") == str((root / "cpu").resolve() / "a")


def test_detect_hybrid_is_v1(v1_tree: CgroupTree, fake_proc: Path) -> None:
    root, info = v1_tree.root, v1_tree.mountinfo
    facts = detect_cgroup_facts(root, mountinfo=info, proc=fake_proc)
    assert facts.version == 1
    assert facts.driver == "cgroupfs"  # no kubepods dirs, PID 1 is not systemd
    assert facts.hierarchy("cpu").path == str((root / "cpu").resolve())
    assert "name=systemd" in facts.hierarchies
    assert facts.root == str(root)
    assert all(type(h.path) is str for h in facts.hierarchies.values())
    with pytest.raises(CgroupFactsError, match="hugetlb"):
        facts.hierarchy("hugetlb")


def test_detect_v2(v2_tree: CgroupTree, fake_proc: Path) -> None:
    root, info = v2_tree.root, v2_tree.mountinfo
    facts = detect_cgroup_facts(root, mountinfo=info, proc=fake_proc)
    assert facts.version == 2
    assert facts.hierarchy().path == str(root.resolve())


def test_detect_v2_without_mountinfo_uses_cgroup_controllers(
    v2_tree: CgroupTree, tmp_path: Path, fake_proc: Path
) -> None:
    root, _ = v2_tree.root, v2_tree.mountinfo
    empty = tmp_path / "empty-mountinfo"
    empty.write_text("")
    assert detect_cgroup_facts(root, mountinfo=empty, proc=fake_proc).version == 2


def test_detect_comounted_cpu_cpuacct(tmp_path: Path, fake_proc: Path) -> None:
    tree = make_v1_tree(tmp_path / "cgroup", comount_cpu=True)
    root, info = tree.root, tree.mountinfo
    facts = detect_cgroup_facts(root, mountinfo=info, proc=fake_proc)
    assert facts.hierarchy("cpu").path == facts.hierarchy("cpuacct").path
    assert Path(facts.hierarchy("cpu").path).name == "cpu,cpuacct"
    paths = facts.container_paths("/kubepods/pod1/c1")
    assert paths.dir("cpu") == str(root / "cpu,cpuacct" / "kubepods" / "pod1" / "c1")


def test_detect_scan_fallback_without_mountinfo(tmp_path: Path, fake_proc: Path) -> None:
    root = make_v1_tree(tmp_path / "cgroup", comount_cpu=True).root
    empty = tmp_path / "empty"
    empty.write_text("")
    facts = detect_cgroup_facts(root, mountinfo=empty, proc=fake_proc)
    assert facts.version == 1
    assert Path(facts.hierarchy("cpuacct").path).name == "cpu,cpuacct"


@pytest.mark.parametrize(
    ("setup", "hint", "expected"),
    [
        (None, SYSTEMD_PATH, "systemd"),
        (None, "/kubepods/burstable/pod1/c", "cgroupfs"),
        ("kubepods.slice", None, "systemd"),
        ("kubepods", None, "cgroupfs"),
        ("pid1-systemd", None, "systemd"),
        (None, None, "cgroupfs"),
    ],
)
def test_driver_auto(
    v1_tree: CgroupTree,
    fake_proc: Path,
    setup: str | None,
    hint: str | None,
    expected: str,
) -> None:
    root, info = v1_tree.root, v1_tree.mountinfo
    if setup == "pid1-systemd":
        (fake_proc / "1" / "comm").write_text("systemd\n")
    elif setup:
        (root / "cpu" / setup).mkdir()
    facts = detect_cgroup_facts(root, mountinfo=info, proc=fake_proc, cgroups_path_hint=hint)
    assert facts.driver == expected


def test_explicit_settings_and_bad_values(v1_tree: CgroupTree, fake_proc: Path) -> None:
    root, info = v1_tree.root, v1_tree.mountinfo
    facts = detect_cgroup_facts(root, driver="systemd", version=1, mountinfo=info, proc=fake_proc)
    assert (facts.version, facts.driver) == (1, "systemd")
    with pytest.raises(CgroupFactsError, match="allowed values are auto, cgroupfs, systemd"):
        detect_cgroup_facts(root, driver="openrc", mountinfo=info)
    with pytest.raises(CgroupFactsError, match="allowed values are auto, 1, 2"):
        detect_cgroup_facts(root, version=3, mountinfo=info)
    with pytest.raises(CgroupFactsError, match="not a directory"):
        detect_cgroup_facts(root / "nope", mountinfo=info)


def test_cgroupfs_paths_v1(v1_tree: CgroupTree, fake_proc: Path) -> None:
    root, info = v1_tree.root, v1_tree.mountinfo
    facts = detect_cgroup_facts(root, mountinfo=info, proc=fake_proc)
    paths = facts.container_paths("/kubepods/burstable/pod-uid/ctr1")
    for controller in ("cpu", "cpuset", "memory", "blkio"):
        assert paths.dir(controller) == str(root / controller / "kubepods/burstable/pod-uid/ctr1")
    assert "name=systemd" not in paths.dirs
    assert paths.roots["memory"] == str(root / "memory")


def test_systemd_paths_v1_and_v2(v1_tree: CgroupTree, v2_tree: CgroupTree, fake_proc: Path) -> None:
    root1, info1 = v1_tree.root, v1_tree.mountinfo
    facts1 = detect_cgroup_facts(root1, mountinfo=info1, proc=fake_proc)
    assert facts1.container_paths(SYSTEMD_PATH).dir("memory") == str(
        root1 / "memory" / SYSTEMD_EXPANDED
    )
    root2, info2 = v2_tree.root, v2_tree.mountinfo
    facts2 = detect_cgroup_facts(root2, mountinfo=info2, proc=fake_proc)
    paths = facts2.container_paths(SYSTEMD_PATH)
    assert paths.dir() == str(root2 / SYSTEMD_EXPANDED)
    assert paths.dirs == {"unified": paths.dir()}
    assert paths.dir("memory") == paths.dir()  # v2: one dir for every controller


@pytest.mark.parametrize(
    ("cgroups_path", "message"),
    [
        ("/kubepods/../../etc", "'..'"),
        ("../escape", "'..'"),
        ("/kubepods/\0x", "NUL"),
        ("", "empty"),
        ("a:b", "neither"),
        ("kube/pods.slice:cri:x", "must not contain '/'"),
        ("kubepods--x.slice:cri:x", "dashes"),
        ("kubepods:cri:x", "must be '<name>.slice'"),
        ("kubepods.slice:cri:", "name part"),
        ("kubepods.slice:cri:..", "plain unit name"),
    ],
)
def test_bad_paths_are_typed_errors(
    v1_tree: CgroupTree, fake_proc: Path, cgroups_path: str, message: str
) -> None:
    root, info = v1_tree.root, v1_tree.mountinfo
    facts = detect_cgroup_facts(root, mountinfo=info, proc=fake_proc)
    with pytest.raises(CgroupPathError, match=message) as exc:
        facts.container_paths(cgroups_path)
    assert exc.value.cgroups_path == cgroups_path


def test_symlink_escape_refused(v1_tree: CgroupTree, fake_proc: Path, tmp_path: Path) -> None:
    root, info = v1_tree.root, v1_tree.mountinfo
    outside = tmp_path / "outside"
    outside.mkdir()
    (root / "memory" / "kubepods").symlink_to(outside)
    facts = detect_cgroup_facts(root, mountinfo=info, proc=fake_proc)
    with pytest.raises(CgroupPathError, match="symlink"):
        facts.container_paths("/kubepods/pod/ctr")


def test_dot_and_double_slash_are_normalised(v1_tree: CgroupTree, fake_proc: Path) -> None:
    root, info = v1_tree.root, v1_tree.mountinfo
    facts = detect_cgroup_facts(root, mountinfo=info, proc=fake_proc)
    paths = facts.container_paths("kubepods//./pod/ctr/")
    assert paths.dir("cpu") == str(root / "cpu" / "kubepods" / "pod" / "ctr")


def test_paths_from_proc_v1_with_mount_root(tmp_path: Path, fake_proc: Path) -> None:
    tree = make_v1_tree(tmp_path / "cgroup")
    root, info = tree.root, tree.mountinfo
    # The memory mount shows only /kubepods/pod1 (agent inside a pod's cgroup namespace view).
    text = info.read_text().replace(f"/ {root / 'memory'}", f"/kubepods/pod1 {root / 'memory'}")
    info.write_text(text)
    facts = detect_cgroup_facts(root, mountinfo=info, proc=fake_proc)
    pid_dir = fake_proc / "4242"
    pid_dir.mkdir()
    pid_dir.joinpath("cgroup").write_text(
        "9:name=systemd:/x\n5:memory:/kubepods/pod1/ctr\n3:cpu:/kubepods/pod1/ctr\n"
        "2:cpuacct:/kubepods/pod1/ctr\n0::/\n"
    )
    paths = facts.process_paths(4242, str(fake_proc))
    assert paths.dir("memory") == str(root / "memory" / "ctr")
    assert paths.dir("cpu") == str(root / "cpu" / "kubepods/pod1/ctr")
    assert paths.roots["memory"] == str(root / "memory")
    assert "name=systemd" not in paths.dirs
    pid_dir.joinpath("cgroup").write_text("5:memory:/elsewhere\n")
    with pytest.raises(CgroupPathError, match="outside the mounted subtree"):
        facts.process_paths(4242, str(fake_proc))


def test_paths_from_proc_v2_and_missing_pid(v2_tree: CgroupTree, fake_proc: Path) -> None:
    root, info = v2_tree.root, v2_tree.mountinfo
    facts = detect_cgroup_facts(root, mountinfo=info, proc=fake_proc)
    (fake_proc / "7").mkdir()
    (fake_proc / "7" / "cgroup").write_text("0::/kubepods.slice/x.scope\n")
    assert facts.process_paths(7, str(fake_proc)).dir() == str(root / "kubepods.slice" / "x.scope")
    with pytest.raises(CgroupFactsError, match="cannot read"):
        facts.process_paths(8, str(fake_proc))


def test_values_take_path_or_str_and_hold_str(tmp_path: Path) -> None:
    h = Hierarchy(tmp_path / "cpu", "/agent")
    assert h.path == str(tmp_path / "cpu") and type(h.path) is str
    assert h == Hierarchy(str(tmp_path / "cpu"), "/agent")
    assert h != Hierarchy(tmp_path / "cpu")  # mount root "/" by default
    facts = CgroupFacts(2, "systemd", tmp_path)
    assert facts.root == str(tmp_path) and type(facts.root) is str
    assert facts.hierarchies == {}
    assert facts == CgroupFacts(2, "systemd", str(tmp_path), {})


@pytest.mark.parametrize("version", [1, 2])
def test_facts_json_round_trip(
    v1_tree: CgroupTree, v2_tree: CgroupTree, fake_proc: Path, version: int
) -> None:
    tree = v1_tree if version == 1 else v2_tree
    root, info = tree.root, tree.mountinfo
    facts = detect_cgroup_facts(root, mountinfo=info, proc=fake_proc)
    doc = json.loads(json.dumps(facts.to_json()))  # what the hook's cache stores
    again = CgroupFacts.from_json(doc)
    assert again == facts
    assert again.controllers() == facts.controllers()
    assert again.container_paths(SYSTEMD_PATH) == facts.container_paths(SYSTEMD_PATH)
    assert again.container_paths("/kubepods/p/c") == facts.container_paths("/kubepods/p/c")


def test_facts_json_from_a_scanned_v1_tree(tmp_path: Path, fake_proc: Path) -> None:
    root = make_v1_tree(tmp_path / "cgroup").root
    facts = CgroupFacts(1, "cgroupfs", root)  # no hierarchies: looked up under root
    again = CgroupFacts.from_json(json.loads(json.dumps(facts.to_json())))
    assert again.hierarchy("memory") == facts.hierarchy("memory")
    assert again.container_paths("/a").dirs == facts.container_paths("/a").dirs


@pytest.mark.parametrize(
    "change, error",
    [
        ({"version": 3}, DamagedState),
        ({"version": "2"}, DamagedState),
        ({"root": None}, DamagedState),
        ({"driver": 1}, DamagedState),
        ({"hierarchies": [["unified", 1, "/"]]}, DamagedState),
        ({"hierarchies": [["unified", "/x"]]}, ValueError),  # unpacking two into three
        ({"hierarchies": None}, TypeError),
        ({"root": KeyError}, KeyError),
    ],
)
def test_facts_from_bad_json(change: dict, error: type[Exception]) -> None:
    doc: dict = {
        "version": 2,
        "driver": "cgroupfs",
        "root": "/sys/fs/cgroup",
        "hierarchies": [["unified", "/sys/fs/cgroup", "/"]],
    }
    assert CgroupFacts.from_json(doc).version == 2
    for key, value in change.items():
        if value is KeyError:
            del doc[key]
        else:
            doc[key] = value
    with pytest.raises(error):
        CgroupFacts.from_json(doc)


def test_real_host_detection() -> None:
    """This host (and any Linux CI) has some cgroup hierarchy; check what we detect is sane."""
    if not Path("/sys/fs/cgroup").is_dir():
        pytest.skip("no /sys/fs/cgroup on this machine")
    facts = detect_cgroup_facts()
    assert facts.version in (1, 2)
    own = facts.process_paths(os.getpid())
    for d in own.dirs.values():
        assert os.path.isdir(d), d
    if facts.version == 1:
        assert {"cpu", "memory"} <= set(own.dirs)


_segment = st.sampled_from(["..", ".", "", "a", "b.slice", "x..y", "...", "c:d", "~", "%2e%2e"])


@settings(max_examples=120, deadline=None)
@given(st.lists(_segment, max_size=8), st.booleans())
def test_safe_join_never_leaves_the_hierarchy(tmp_path_factory, segments, absolute) -> None:
    hierarchy = tmp_path_factory.mktemp("h")
    relative = ("/" if absolute else "") + "/".join(segments)
    try:
        path = safe_join(str(hierarchy), relative, relative)
    except CgroupPathError as e:
        assert ".." in segments or "NUL" in str(e)
        return
    assert ".." not in segments
    assert type(path) is str
    assert Path(path).resolve().is_relative_to(hierarchy.resolve())
