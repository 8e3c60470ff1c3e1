"""Writer behaviour that does not need a kernel: containment, naming rules, typed errors.

Plain files store exactly what is written, so read-back of a fake tree is an identity; the
kernel's normalisations are covered by test_readback.py and test_real_cgroups.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from nri_plugin.enforce import (
    CgroupV1Writer,
    CgroupV2Writer,
    CgroupWrite,
    CgroupWriteError,
    apply_to_container,
    container_cgroup_paths,
    detect_cgroup_facts,
    raise_for_failures,
    writer_for,
)


@pytest.fixture
def v2_dir(tmp_path: Path) -> Path:
    d = tmp_path / "ctr.scope"
    d.mkdir()
    for name in ("memory.max", "memory.high", "cpu.max", "io.max", "cgroup.procs"):
        (d / name).write_text("")
    return d


def test_v2_write_and_read_back(v2_dir: Path) -> None:
    results = CgroupV2Writer(v2_dir).apply(
        [CgroupWrite("memory", "memory.max", "8192"), CgroupWrite("cpu", "cpu.max", "max")]
    )
    assert [r.ok for r in results] == [True, True]
    assert results[0].read_back == "8192" and results[0].path == v2_dir / "memory.max"
    assert (v2_dir / "memory.max").read_text() == "8192"
    raise_for_failures(results)


def test_v2_refuses_non_resource_files(v2_dir: Path) -> None:
    (result,) = CgroupV2Writer(v2_dir).apply([CgroupWrite("cgroup", "cgroup.procs", "1")])
    assert not result.ok
    assert isinstance(result.error, CgroupWriteError)
    assert "allowed prefixes" in str(result.error)
    assert (v2_dir / "cgroup.procs").read_text() == ""


@pytest.mark.parametrize("name", ["../memory.max", "a/b", "", "..", "memory.max\0"])
def test_bad_file_names(v2_dir: Path, name: str) -> None:
    (result,) = CgroupV2Writer(v2_dir).apply([CgroupWrite("memory", name, "1")])
    assert not result.ok and "plain file name" in str(result.error)


def test_symlinked_file_is_refused(v2_dir: Path, tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep")
    (v2_dir / "memory.low").symlink_to(victim)
    (result,) = CgroupV2Writer(v2_dir).apply([CgroupWrite("memory", "memory.low", "1")])
    assert not result.ok and "outside" in str(result.error)
    assert victim.read_text() == "keep"


def test_missing_dir_and_file_are_typed(tmp_path: Path, v2_dir: Path) -> None:
    (r1,) = CgroupV2Writer(tmp_path / "gone").apply([CgroupWrite("memory", "memory.max", "1")])
    assert not r1.ok and "does not exist" in str(r1.error)
    # A missing file (O_WRONLY without O_CREAT) -> ENOENT, explained, never a raw OSError.
    (r2,) = CgroupV2Writer(v2_dir).apply([CgroupWrite("memory", "memory.swap.max", "0")])
    assert not r2.ok and "controller or feature is missing" in str(r2.error)
    assert r2.error is not None and r2.error.path == v2_dir / "memory.swap.max"
    with pytest.raises(CgroupWriteError, match=r"memory\.swap\.max"):
        raise_for_failures([r2])


def test_mismatch_is_reported(tmp_path: Path) -> None:
    d = tmp_path / "c"
    d.mkdir()
    (d / "cpuset.cpus").write_text("")

    class Lying(CgroupV2Writer):
        def _do_read(self, write: CgroupWrite, target: Path) -> str:
            return "0-1\n"

    (result,) = Lying(d).apply([CgroupWrite("cpuset", "cpuset.cpus", "3")])
    assert not result.ok and result.read_back == "0-1"
    assert "does not match" in str(result.error)


def test_v1_writer_on_fake_tree(v1_tree: tuple[Path, Path], fake_proc: Path) -> None:
    root, info = v1_tree
    facts = detect_cgroup_facts(root, mountinfo=info, proc=fake_proc)
    paths = container_cgroup_paths("/kubepods/pod1/ctr", facts)
    for controller in ("cpu", "memory"):
        paths.dir(controller).mkdir(parents=True)
    (paths.dir("cpu") / "cpu.cfs_quota_us").write_text("-1\n")
    (paths.dir("memory") / "memory.limit_in_bytes").write_text("")
    writer = writer_for(paths)
    assert isinstance(writer, CgroupV1Writer)
    results = writer.apply(
        [
            CgroupWrite("cpu", "cpu.cfs_quota_us", "50000"),
            CgroupWrite("memory", "memory.limit_in_bytes", "8192"),
            CgroupWrite("memory", "cpu.cfs_quota_us", "1"),  # wrong controller for the file
            CgroupWrite("hugetlb", "hugetlb.2MB.limit_in_bytes", "0"),  # not mounted
            CgroupWrite("blkio", "blkio.weight", "500"),  # dir not created
        ]
    )
    assert [r.ok for r in results] == [True, True, False, False, False]
    assert (paths.dir("cpu") / "cpu.cfs_quota_us").read_text() == "50000"
    assert "does not belong to controller 'memory'" in str(results[2].error)
    assert "not mounted" in str(results[3].error)
    assert "does not exist" in str(results[4].error)


def test_writer_version_checks(v1_tree: tuple[Path, Path], fake_proc: Path) -> None:
    root, info = v1_tree
    paths = container_cgroup_paths("/x", detect_cgroup_facts(root, mountinfo=info, proc=fake_proc))
    with pytest.raises(ValueError, match="v2"):
        CgroupV2Writer(paths)


def test_apply_to_container_systemd_v2(v2_tree: tuple[Path, Path], fake_proc: Path) -> None:
    root, info = v2_tree
    facts = detect_cgroup_facts(root, mountinfo=info, proc=fake_proc)
    scope = root / "kubepods.slice" / "kubepods-pod1.slice" / "cri-containerd-abc.scope"
    scope.mkdir(parents=True)
    (scope / "io.max").write_text("")
    (result,) = apply_to_container(
        "kubepods-pod1.slice:cri-containerd:abc", [CgroupWrite("io", "io.max", "8:0 rbps=1")], facts
    )
    assert result.ok and result.path == scope / "io.max"
    assert (scope / "io.max").read_text() == "8:0 rbps=1"
