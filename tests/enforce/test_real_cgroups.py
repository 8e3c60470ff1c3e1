"""Real cgroup v1 writes on this host: scratch cgroups below our own, read back from the kernel.

Needs root and a v1/hybrid host (skipped otherwise, with the reason). Every scratch cgroup is
removed by the fixtures, leaves first.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nri_plugin.enforce.blockdev import resolve_block_device
from nri_plugin.enforce.cgfile import CgroupWrite, CgroupWriter
from nri_plugin.enforce.cgpaths import UNIFIED, CgroupPaths
from nri_plugin.enforce.errors import DeviceError, RtBudgetError
from nri_plugin.enforce.mapping import v1_cpu_writes, v1_io_writes, v1_memory_writes
from nri_plugin.enforce.rt import make_rt_room, raise_rt_ancestors, release_rt_ancestors
from nri_plugin.enforce.rt_ledger import RtLedger
from nri_plugin.plan.model import IoLimit

pytestmark = pytest.mark.root


def _paths(scratch, *controllers: str) -> CgroupPaths:
    """The scratch container's CgroupPaths, as facts.container_paths would give them: each
    controller's dir, and the hierarchy (mount) it stays under."""
    missing = [c for c in controllers if c not in scratch.ctr]
    if missing:
        pytest.skip(f"cgroup v1 controller(s) {missing} not mounted on this host")
    return CgroupPaths(
        "scratch",
        1,
        {c: str(d) for c, d in scratch.ctr.items()},
        {c: scratch.facts.hierarchy(c).path for c in scratch.ctr},
    )


def _writer(scratch, *controllers: str) -> CgroupWriter:
    return CgroupWriter(_paths(scratch, *controllers))


def _read(path: Path) -> str:
    return path.read_text().strip()


def test_cpu_bandwidth(scratch_v1) -> None:
    w = _writer(scratch_v1, "cpu")
    results = w.apply(v1_cpu_writes(quota_us=250_000, period_us=100_000))
    assert [r.ok for r in results] == [True, True], [str(r.error) for r in results]
    assert _read(scratch_v1.ctr["cpu"] / "cpu.cfs_quota_us") == "250000"
    assert _read(scratch_v1.ctr["cpu"] / "cpu.cfs_period_us") == "100000"
    # The kernel refuses a quota under 1ms: a typed error naming file and value, no OSError.
    (bad,) = w.apply([CgroupWrite("cpu", "cpu.cfs_quota_us", "500")])
    assert not bad.ok and bad.error is not None
    assert bad.path == str(scratch_v1.ctr["cpu"] / "cpu.cfs_quota_us")
    assert str(bad.error.path) == bad.path
    assert "Invalid argument" in str(bad.error) and "'500'" in str(bad.error)


def test_cpuset_normalised_and_refused(scratch_v1) -> None:
    w = _writer(scratch_v1, "cpuset")
    parent_cpus = _read(scratch_v1.pod["cpuset"] / "cpuset.cpus")
    spelled = ",".join(str(c) for c in sorted(_cpus(parent_cpus)))  # "0,1" -> kernel "0-1"
    results = w.apply(v1_cpu_writes(cpus=spelled, mems="0"))
    assert all(r.ok for r in results), [str(r.error) for r in results]
    assert results[-1].read_back == parent_cpus
    (bad,) = w.apply([CgroupWrite("cpuset", "cpuset.cpus", "4095")])  # no such CPU here
    assert not bad.ok and bad.error is not None
    assert "out of range" in str(bad.error) or "Invalid argument" in str(bad.error)


def _cpus(text: str) -> set[int]:
    from nri_plugin.topology.cpulist import parse_cpulist

    return parse_cpulist(text)


def test_memory_rounding_and_soft_limit(scratch_v1) -> None:
    w = _writer(scratch_v1, "memory")
    page = os.sysconf("SC_PAGE_SIZE")
    limit = 256 * 1024 * 1024 + 123  # not page aligned: the kernel rounds down
    results = w.apply(v1_memory_writes(high=128 * 1024 * 1024 + 1, max_bytes=limit))
    assert all(r.ok for r in results), [str(r.error) for r in results]
    assert int(_read(scratch_v1.ctr["memory"] / "memory.limit_in_bytes")) == limit // page * page
    assert results[0].read_back == str(limit // page * page)
    (unlimited,) = w.apply([CgroupWrite("memory", "memory.soft_limit_in_bytes", "-1")])
    assert unlimited.ok and int(unlimited.read_back or 0) >= 1 << 62


# Hard mode's all-or-none against the kernel: the SLA's cpu and memory values, then a
# cpuset the kernel refuses (no such CPU: EINVAL/ERANGE for real).
_HARD_WRITES = [
    CgroupWrite("cpu", "cpu.cfs_quota_us", "250000"),
    CgroupWrite("cpu", "cpu.cfs_period_us", "50000"),
    CgroupWrite("memory", "memory.limit_in_bytes", str(64 << 20)),
    CgroupWrite("cpuset", "cpuset.cpus", "4095"),
]
_HARD_FILES = [
    ("cpu", "cpu.cfs_quota_us"),
    ("cpu", "cpu.cfs_period_us"),
    ("memory", "memory.limit_in_bytes"),
]


def test_hard_mode_undoes_earlier_writes_when_the_kernel_refuses_one(scratch_v1) -> None:
    w = _writer(scratch_v1, "cpu", "cpuset", "memory")
    before = {f: _read(scratch_v1.ctr[c] / f) for c, f in _HARD_FILES}
    results = w.apply(_HARD_WRITES, undo_on_failure=True)
    assert [r.ok for r in results] == [True, True, True, False]
    message = str(results[-1].error)
    assert "cpuset.cpus" in message and ("Invalid argument" in message or "out of range" in message)
    assert "undone: memory.limit_in_bytes, cpu.cfs_period_us, cpu.cfs_quota_us" in message
    assert {f: _read(scratch_v1.ctr[c] / f) for c, f in _HARD_FILES} == before
    # Soft mode keeps what the kernel took.
    results = w.apply(_HARD_WRITES)
    assert [r.ok for r in results] == [True, True, True, False]
    assert _read(scratch_v1.ctr["cpu"] / "cpu.cfs_quota_us") == "250000"


def test_hard_mode_with_a_cgroup_removed_before_the_writes(scratch_v1) -> None:
    """The container's memory cgroup removed between create and start (rmdir, for real):
    the cpu writes before it are undone."""
    w = _writer(scratch_v1, "cpu", "memory")
    before = _read(scratch_v1.ctr["cpu"] / "cpu.cfs_quota_us")
    scratch_v1.ctr["memory"].rmdir()
    results = w.apply(_HARD_WRITES[:3], undo_on_failure=True)
    assert [r.ok for r in results] == [True, True, False]
    assert "cgroup directory does not exist" in str(results[-1].error)
    assert _read(scratch_v1.ctr["cpu"] / "cpu.cfs_quota_us") == before


def _real_disk() -> tuple[int, int]:
    for entry in sorted(Path("/sys/block").iterdir()):
        if entry.name.startswith(("loop", "ram", "zram")):
            continue
        maj, mnr = (int(x) for x in (entry / "dev").read_text().split(":"))
        return maj, mnr
    pytest.skip("no real whole disk under /sys/block (need one for blkio.throttle)")


def test_blkio_throttle_on_real_disk(scratch_v1) -> None:
    w = _writer(scratch_v1, "blkio")
    maj, mnr = _real_disk()
    rule = IoLimit(
        maj, mnr, read_bps=500 << 20, write_bps=200 << 20, read_iops=20000, write_iops=10000
    )
    results = w.apply(v1_io_writes(None, [rule], bfq=False))
    assert [r.ok for r in results] == [True] * 4, [str(r.error) for r in results]
    ctr = scratch_v1.ctr["blkio"]
    assert _read(ctr / "blkio.throttle.read_bps_device") == f"{maj}:{mnr} {500 << 20}"
    assert _read(ctr / "blkio.throttle.write_iops_device") == f"{maj}:{mnr} 10000"
    # 0 removes a rule; read-back treats the vanished line as success.
    (cleared,) = w.apply([CgroupWrite("blkio", "blkio.throttle.read_bps_device", f"{maj}:{mnr} 0")])
    assert cleared.ok and _read(ctr / "blkio.throttle.read_bps_device") == ""
    if not (ctr / "blkio.weight").exists():
        # CFQ left the kernel in 5.0: no blkio.weight. A clear error, not cgroupfs's EACCES.
        (cfq,) = w.apply(v1_io_writes(100, [], bfq=False))
        assert not cfq.ok and cfq.error is not None
        assert "controller or feature is missing" in str(cfq.error)


def test_blkio_partition_is_enodev_and_bfq_weight(scratch_v1, loop_disk) -> None:
    w = _writer(scratch_v1, "blkio")
    ctr = scratch_v1.ctr["blkio"]
    if loop_disk.part_major is not None:
        part = f"{loop_disk.part_major}:{loop_disk.part_minor}"
        # What the kernel says about partitions (documented in docs/cgroups.md) ...
        (bad,) = w.apply([CgroupWrite("blkio", "blkio.throttle.read_bps_device", f"{part} 1")])
        assert not bad.ok and bad.error is not None and "No such device" in str(bad.error)
        # ... so resolve_block_device refuses it up front, naming the disk.
        with pytest.raises(DeviceError, match=f"{loop_disk.major}:{loop_disk.minor}"):
            resolve_block_device(part)
    assert resolve_block_device(str(loop_disk.path)) == (loop_disk.major, loop_disk.minor)
    if not (ctr / "blkio.bfq.weight").exists():
        pytest.skip("kernel without BFQ cgroup support (no blkio.bfq.weight)")
    results = w.apply(v1_io_writes(500, [], bfq=True))
    assert results[0].ok and results[0].read_back == "136", str(results[0].error)
    dev = f"{loop_disk.major}:{loop_disk.minor}"
    (per_dev,) = w.apply([CgroupWrite("blkio", "blkio.bfq.weight_device", f"{dev} 300")])
    assert per_dev.ok, str(per_dev.error)
    assert f"{dev} 300" in (ctr / "blkio.bfq.weight_device").read_text()
    (bad_weight,) = w.apply([CgroupWrite("blkio", "blkio.bfq.weight", "5000")])
    assert not bad_weight.ok  # BFQ weights stop at 1000 (ERANGE)


def test_rt_budget_propagation(scratch_v1) -> None:
    paths = _paths(scratch_v1, "cpu")
    w = CgroupWriter(paths)
    ctr = scratch_v1.ctr["cpu"]
    if not (ctr / "cpu.rt_runtime_us").exists():
        pytest.skip("kernel without CONFIG_RT_GROUP_SCHED (no cpu.rt_runtime_us)")
    root = Path(scratch_v1.facts.hierarchy("cpu").path)
    want = [CgroupWrite("cpu", "cpu.rt_runtime_us", "5000")]
    # Without raising the ancestors the kernel refuses the container's budget (runc's case).
    (refused,) = w.apply(want)
    assert not refused.ok and "Invalid argument" in str(refused.error)
    # What both front-ends call: raise_rt_ancestors for the container's cpu dir and root.
    changes = make_rt_room(paths, 5000, 1_000_000)
    changed = [c.path for c in changes]
    assert scratch_v1.top["cpu"] in changed and scratch_v1.pod["cpu"] in changed
    assert int(_read(scratch_v1.pod["cpu"] / "cpu.rt_runtime_us")) >= 5000
    (accepted,) = w.apply(want)
    assert accepted.ok, str(accepted.error)
    # More than the node allows in total: a clear error, nothing left half-raised.
    before = _read(scratch_v1.top["cpu"] / "cpu.rt_runtime_us")
    with pytest.raises(RtBudgetError, match="budget"):
        raise_rt_ancestors(scratch_v1.pod["cpu"] / "big", 999_000, 1_000_000, root)
    assert _read(scratch_v1.top["cpu"] / "cpu.rt_runtime_us") == before
    # Release: the container's own budget still needs the ancestors, so they stay; once the
    # container gives it back, they can be lowered again.
    assert release_rt_ancestors(changes) == []
    (ctr / "cpu.rt_runtime_us").write_text("0")
    assert len(release_rt_ancestors(changes)) == len(changes)
    assert _read(scratch_v1.top["cpu"] / "cpu.rt_runtime_us") == "0"


def test_rt_budget_given_back(scratch_v1, tmp_path: Path) -> None:
    """The kernel's view of the give-back: RT containers created then removed leave their
    ancestors where they were; with one left, the ancestors keep exactly its budget (the
    kernel would refuse a microsecond less); a restarted plugin with no RT container gives
    back what the one before it raised."""
    paths = _paths(scratch_v1, "cpu")
    ctr = scratch_v1.ctr["cpu"]
    if not (ctr / "cpu.rt_runtime_us").exists():
        pytest.skip("kernel without CONFIG_RT_GROUP_SCHED (no cpu.rt_runtime_us)")
    root = Path(scratch_v1.facts.hierarchy("cpu").path)
    top, pod = scratch_v1.top["cpu"], scratch_v1.pod["cpu"]
    before = {d: _read(d / "cpu.rt_runtime_us") for d in (top, pod)}
    ledger_file = tmp_path / "rt-raises.json"
    ledger = RtLedger(ledger_file)
    ledger.note(make_rt_room(paths, 5000, 1_000_000))
    (ctr / "cpu.rt_runtime_us").write_text("5000")
    sibling = pod / "sibling"
    sibling.mkdir()
    ledger.note(raise_rt_ancestors(sibling, 3000, 1_000_000, root))
    (sibling / "cpu.rt_runtime_us").write_text("3000")
    assert _read(top / "cpu.rt_runtime_us") == "8000"
    assert ledger.give_back(root, {}) == []  # both live: all still needed
    ctr.rmdir()  # runc delete
    ledger.give_back(root, {})
    assert _read(pod / "cpu.rt_runtime_us") == _read(top / "cpu.rt_runtime_us") == "3000"
    with pytest.raises(OSError):  # exactly what it needs: the kernel takes no less
        (pod / "cpu.rt_runtime_us").write_text("2999")
    sibling_granted = RtLedger(ledger_file)  # a plugin restart, the sibling still live
    assert sibling_granted.give_back(root, {}) == []
    (sibling / "cpu.rt_runtime_us").write_text("0")
    sibling.rmdir()
    restarted = RtLedger(ledger_file)  # a restart with no RT container left
    assert restarted.give_back(root, {})
    assert {d: _read(d / "cpu.rt_runtime_us") for d in (top, pod)} == before
    assert restarted.raises == {}


def test_v2_writes(scratch_v2: Path) -> None:
    from nri_plugin.enforce.mapping import v2_cpu_writes, v2_memory_writes

    d = str(scratch_v2)
    w = CgroupWriter(CgroupPaths(d, 2, {UNIFIED: d}, {UNIFIED: str(scratch_v2.parent)}))
    writes = v2_memory_writes(high=(64 << 20) + 1, max_bytes=128 << 20)
    if (scratch_v2 / "cpu.max").exists():
        writes += v2_cpu_writes(quota_us=50_000, period_us=100_000)
    results = w.apply(writes)
    assert all(r.ok for r in results), [str(r.error) for r in results]
    assert _read(scratch_v2 / "memory.max") == str(128 << 20)
    (bad,) = w.apply([CgroupWrite("memory", "memory.max", "lots")])
    assert not bad.ok and "Invalid argument" in str(bad.error)
