"""Writer behaviour that does not need a kernel: containment, naming rules, typed errors.

There is one writer (cgfile.CgroupWriter) for v1 and v2, the plugin and the OCI hook; the
container's CgroupPaths decide which rules apply. Plain files store exactly what is
written, so read-back of a fake tree is an identity; the kernel's normalisations are
covered by test_readback.py and test_real_cgroups.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from nri_plugin.enforce.cgfile import CgroupWrite, CgroupWriter, WriteResult
from nri_plugin.enforce.cgpaths import UNIFIED, CgroupPaths
from nri_plugin.enforce.cgroupdetect import detect_cgroup_facts
from nri_plugin.enforce.errors import CgroupWriteError
from nri_plugin.errors import REFUSED, SlaFailure
from tests.support.cgroups import CgroupTree


def v2_writer(d: Path, cls: type[CgroupWriter] = CgroupWriter) -> CgroupWriter:
    """The writer for one v2 container dir, without detecting a node."""
    return cls(CgroupPaths(str(d), 2, {UNIFIED: str(d)}, {UNIFIED: str(d.parent)}))


@pytest.fixture
def v2_dir(tmp_path: Path) -> Path:
    d = tmp_path / "ctr.scope"
    d.mkdir()
    for name in ("memory.max", "memory.high", "cpu.max", "io.max", "cgroup.procs"):
        (d / name).write_text("")
    return d


def test_v2_write_and_read_back(v2_dir: Path) -> None:
    writes = [CgroupWrite("memory", "memory.max", "8192"), CgroupWrite("cpu", "cpu.max", "max")]
    results = v2_writer(v2_dir).apply(writes)
    assert [r.ok for r in results] == [True, True]
    assert all(isinstance(r, WriteResult) and r.error is None for r in results)
    assert [r.write for r in results] == writes
    assert results[0].read_back == "8192" and results[0].path == str(v2_dir / "memory.max")
    assert (v2_dir / "memory.max").read_text() == "8192"
    assert (v2_dir / "cpu.max").read_text() == "max"


def test_write_is_a_tuple_with_names() -> None:
    w = CgroupWrite("memory", "memory.max", "1")
    assert (w.controller, w.file, w.value) == ("memory", "memory.max", "1")
    assert w == ("memory", "memory.max", "1") and tuple(w) == ("memory", "memory.max", "1")
    assert repr(w) == "CgroupWrite('memory', 'memory.max', '1')"
    assert {w: 1}[CgroupWrite("memory", "memory.max", "1")] == 1


def test_v2_refuses_non_resource_files(v2_dir: Path) -> None:
    (result,) = v2_writer(v2_dir).apply([CgroupWrite("cgroup", "cgroup.procs", "1")])
    assert not result.ok
    assert isinstance(result.error, CgroupWriteError)
    assert "allowed prefixes" in str(result.error)
    assert (v2_dir / "cgroup.procs").read_text() == ""


@pytest.mark.parametrize("name", ["../memory.max", "a/b", "", "..", "memory.max\0"])
def test_bad_file_names(v2_dir: Path, name: str) -> None:
    (result,) = v2_writer(v2_dir).apply([CgroupWrite("memory", name, "1")])
    assert not result.ok and "plain file name" in str(result.error)


def test_symlinked_file_is_refused(v2_dir: Path, tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep")
    (v2_dir / "memory.low").symlink_to(victim)
    (result,) = v2_writer(v2_dir).apply([CgroupWrite("memory", "memory.low", "1")])
    assert not result.ok and "outside" in str(result.error)
    assert victim.read_text() == "keep"


def test_missing_dir_and_file_are_typed(tmp_path: Path, v2_dir: Path) -> None:
    (r1,) = v2_writer(tmp_path / "gone").apply([CgroupWrite("memory", "memory.max", "1")])
    assert not r1.ok and "does not exist" in str(r1.error)
    # A missing file (O_WRONLY without O_CREAT) -> ENOENT, explained, never a raw OSError.
    (r2,) = v2_writer(v2_dir).apply([CgroupWrite("memory", "memory.swap.max", "0")])
    assert not r2.ok and "controller or feature is missing" in str(r2.error)
    assert r2.error is not None and str(r2.error.path) == str(v2_dir / "memory.swap.max")
    # A failed write is an SlaFailure the kernel refused (hard mode refuses the container).
    assert isinstance(r2.error, SlaFailure) and r2.error.kind == REFUSED
    with pytest.raises(CgroupWriteError, match=r"memory\.swap\.max"):
        raise r2.error


def test_write_error_reason_is_the_metric_label(v2_dir: Path) -> None:
    # The detail text must not hide the class's metric label (a refusal's metric would
    # then raise MetricsError before the runtime got its answer).
    (r,) = v2_writer(v2_dir).apply([CgroupWrite("memory", "memory.swap.max", "0")])
    assert r.error is not None and r.error.reason == "cgroup"
    assert r.error.detail in str(r.error)


def test_mismatch_is_reported(tmp_path: Path) -> None:
    d = tmp_path / "c"
    d.mkdir()
    (d / "cpuset.cpus").write_text("")

    class Lying(CgroupWriter):
        def _read(self, controller: str, path: str) -> str:
            return "0-1\n"

    (result,) = v2_writer(d, Lying).apply([CgroupWrite("cpuset", "cpuset.cpus", "3")])
    assert not result.ok and result.read_back == "0-1"
    assert "does not match" in str(result.error)
    assert (d / "cpuset.cpus").read_text() == "3"  # written, then found wrong


def test_v1_writer_on_fake_tree(v1_tree: CgroupTree, fake_proc: Path) -> None:
    root, info = v1_tree.root, v1_tree.mountinfo
    facts = detect_cgroup_facts(root, mountinfo=info, proc=fake_proc)
    paths = facts.container_paths("/kubepods/pod1/ctr")
    for controller in ("cpu", "memory"):
        Path(paths.dir(controller)).mkdir(parents=True)
    cpu, memory = Path(paths.dir("cpu")), Path(paths.dir("memory"))
    (cpu / "cpu.cfs_quota_us").write_text("-1\n")
    (memory / "memory.limit_in_bytes").write_text("")
    writer = CgroupWriter(paths)
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
    assert (cpu / "cpu.cfs_quota_us").read_text() == "50000"
    assert (memory / "memory.limit_in_bytes").read_text() == "8192"
    assert results[1].path == str(memory / "memory.limit_in_bytes")
    assert "does not belong to controller 'memory'" in str(results[2].error)
    assert "not mounted" in str(results[3].error)
    assert "does not exist" in str(results[4].error)


def test_paths_version_decides_the_rules(
    v1_tree: CgroupTree, fake_proc: Path, v2_dir: Path
) -> None:
    """One writer: v1 paths get v1's rules (a file must carry its controller's prefix, and
    that controller must be mounted), v2 paths v2's (resource files only, one dir)."""
    root, info = v1_tree.root, v1_tree.mountinfo
    paths = detect_cgroup_facts(root, mountinfo=info, proc=fake_proc).container_paths("/x")
    Path(paths.dir("memory")).mkdir()
    Path(paths.dir("memory"), "memory.max").write_text("")
    v1 = CgroupWriter(paths)
    (r,) = v1.apply([CgroupWrite("memory", "memory.max", "8192")])  # no such file on v1...
    assert r.ok  # ... but a file with the controller's prefix is the kernel's to refuse
    (r,) = v1.apply([CgroupWrite(UNIFIED, "memory.max", "1")])
    assert not r.ok and "does not belong to controller 'unified'" in str(r.error)
    (r,) = v1.apply([CgroupWrite("memory", "cgroup.procs", "1")])
    assert not r.ok and "does not belong to controller 'memory'" in str(r.error)
    # v2: the controller names no dir; the file name alone decides.
    (r,) = v2_writer(v2_dir).apply([CgroupWrite("blkio", "memory.max", "4096")])
    assert r.ok and (v2_dir / "memory.max").read_text() == "4096"
    (r,) = v2_writer(v2_dir).apply([CgroupWrite("memory", "tasks", "1")])
    assert not r.ok and "not a resource control file" in str(r.error)


def test_container_paths_systemd_v2(v2_tree: CgroupTree, fake_proc: Path) -> None:
    root, info = v2_tree.root, v2_tree.mountinfo
    facts = detect_cgroup_facts(root, mountinfo=info, proc=fake_proc)
    scope = root / "kubepods.slice" / "kubepods-pod1.slice" / "cri-containerd-abc.scope"
    scope.mkdir(parents=True)
    (scope / "io.max").write_text("")
    paths = facts.container_paths("kubepods-pod1.slice:cri-containerd:abc")
    (result,) = CgroupWriter(paths).apply([CgroupWrite("io", "io.max", "8:0 rbps=1")])
    assert result.ok and result.path == str(scope / "io.max")
    assert (scope / "io.max").read_text() == "8:0 rbps=1"


def test_drift_reads_back_without_writing(
    v1_tree: CgroupTree, fake_proc: Path, v2_dir: Path
) -> None:
    (v2_dir / "memory.max").write_text("8192\n")
    (v2_dir / "cpu.max").write_text("max 100000\n")
    (v2_dir / "io.max").write_text("8:0 rbps=2 wbps=max riops=max wiops=max\n")
    writer = v2_writer(v2_dir)
    assert writer.drift([]) == []
    assert (
        writer.drift(
            [CgroupWrite("memory", "memory.max", "8192"), CgroupWrite("cpu", "cpu.max", "max")]
        )
        == []
    )  # normalised: holds
    problems = writer.drift(
        [
            CgroupWrite("io", "io.max", "8:0 rbps=1"),
            CgroupWrite("memory", "memory.high", "1"),
            CgroupWrite("memory", "memory.swap.max", "0"),
        ]
    )
    assert (
        problems[0] == f"{v2_dir / 'io.max'}: expected '8:0 rbps=1', found "
        "'8:0 rbps=2 wbps=max riops=max wiops=max'"
    )
    assert problems[1] == f"{v2_dir / 'memory.high'}: expected '1', found ''"
    assert problems[2].startswith("memory/memory.swap.max: cannot read (")
    assert len(problems) == 3
    assert (v2_dir / "io.max").read_text().startswith("8:0 rbps=2")  # nothing written
    assert not (v2_dir / "memory.swap.max").exists()
    # v1: read through each controller's own dir; an unmounted controller cannot hold.
    root, info = v1_tree.root, v1_tree.mountinfo
    paths = detect_cgroup_facts(root, mountinfo=info, proc=fake_proc).container_paths("/c")
    cpu = Path(paths.dir("cpu"))
    cpu.mkdir()
    (cpu / "cpu.cfs_quota_us").write_text("50000\n")
    v1 = CgroupWriter(paths)
    assert v1.drift([CgroupWrite("cpu", "cpu.cfs_quota_us", "50000")]) == []
    assert v1.drift([CgroupWrite("cpu", "cpu.cfs_quota_us", "1")]) == [
        f"{cpu / 'cpu.cfs_quota_us'}: expected '1', found '50000'"
    ]
    (problem,) = v1.drift([CgroupWrite("hugetlb", "hugetlb.2MB.limit_in_bytes", "0")])
    assert problem.startswith("hugetlb/hugetlb.2MB.limit_in_bytes: cannot read (")
    assert "controller 'hugetlb' is not mounted" in problem
