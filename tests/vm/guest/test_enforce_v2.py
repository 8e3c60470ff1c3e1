"""nri_plugin.enforce's one cgroup writer (cgfile.CgroupWriter) on a real cgroup v2
hierarchy: detection, path expansion (cgroupfs and systemd forms), writes with read-back,
and how a refusal by the kernel comes back (a failed WriteResult naming the file, never an
exception escaping).
"""

import uuid
from pathlib import Path

import pytest

from nri_plugin.enforce.blockdev import bfq_active, resolve_block_device
from nri_plugin.enforce.cgfile import CgroupWriter
from nri_plugin.enforce.cgroupdetect import detect_cgroup_facts
from nri_plugin.enforce.errors import CgroupWriteError, DeviceError
from nri_plugin.enforce.mapping import v2_cpu_writes, v2_io_writes, v2_memory_writes
from nri_plugin.plan.model import IoLimit

MIB = 1 << 20


def apply(cgroups_path, writes, facts):
    """The container's dirs from its OCI cgroupsPath, then the writes: as the hook does."""
    return CgroupWriter(facts.container_paths(cgroups_path)).apply(writes)


@pytest.fixture
def facts():
    return detect_cgroup_facts()


@pytest.fixture
def pod():
    return f"pod{uuid.uuid4().hex[:8]}"


def test_detects_a_unified_cgroupfs_node(facts):
    assert facts.version == 2
    assert facts.driver == "cgroupfs"  # no systemd as PID 1, no kubepods yet


def test_cgroupfs_path_writes_and_reads_back(facts, pod, cgroup_tree, virtio_disk):
    ctr = cgroup_tree(f"kubepods/burstable/{pod}/ctr1")
    rule = IoLimit(virtio_disk.major, virtio_disk.minor, read_bps=MIB, write_iops=300)
    writes = (
        v2_cpu_writes(quota_us=25000, period_us=50000, cpus="0", mems="0")
        + v2_memory_writes(high=100000, max_bytes=64 * MIB)  # high: not page aligned
        + v2_io_writes(500, [rule], bfq=False)
    )
    results = apply(f"/kubepods/burstable/{pod}/ctr1", writes, facts)
    failed = [(r.write, r.error) for r in results if not r.ok]
    assert not failed
    assert all(r.error is None for r in results)
    assert ctr.read("cpu.max") == "25000 50000"
    assert ctr.read("cpuset.cpus") == "0"
    assert ctr.read("memory.high") == "98304"  # the page-rounded value counts as applied
    assert ctr.read("memory.max") == str(64 * MIB)
    assert ctr.read("io.weight") == "default 500"
    assert ctr.read("io.max") == f"{virtio_disk.majmin} rbps={MIB} wbps=max riops=max wiops=300"
    assert {Path(r.path).parent for r in results} == {ctr.path}


def test_systemd_path_form_on_v2(facts, pod, cgroup_tree):
    slice_pod = f"kubepods-burstable-{pod}.slice"
    ctr = cgroup_tree(
        f"kubepods.slice/kubepods-burstable.slice/{slice_pod}/cri-containerd-abc123.scope"
    )
    results = apply(
        f"{slice_pod}:cri-containerd:abc123", v2_memory_writes(max_bytes=32 * MIB), facts
    )
    assert [r.ok for r in results] == [True]
    assert ctr.read("memory.max") == str(32 * MIB)


def test_kernel_refusal_is_a_failed_result(facts, pod, cgroup_tree):
    ctr = cgroup_tree(f"kubepods/{pod}/ctr")
    results = apply(f"/kubepods/{pod}/ctr", v2_cpu_writes(cpus="99"), facts)
    (result,) = results
    assert not result.ok
    assert isinstance(result.error, CgroupWriteError)
    assert result.path == str(ctr.path / "cpuset.cpus")
    assert str(result.error.path) == result.path
    assert "'99'" in str(result.error)
    assert result.error.kind == "refused"  # hard mode refuses the container


def test_bfq_weight_when_bfq_schedules_the_disk(facts, pod, cgroup_tree, virtio_disk):
    sched = Path("/sys/block/vda/queue/scheduler")
    before = sched.read_text().split("[")[1].split("]")[0]
    sched.write_text("bfq")
    try:
        assert bfq_active(virtio_disk.major, virtio_disk.minor)
        ctr = cgroup_tree(f"kubepods/{pod}/ctr")
        results = apply(f"/kubepods/{pod}/ctr", v2_io_writes(500, [], bfq=True), facts)
        assert [r.ok for r in results] == [True], results
        assert ctr.read("io.bfq.weight").startswith("default ")
    finally:
        sched.write_text(before)


def test_partition_is_refused_or_mapped_to_its_disk(virtio_disk, virtio_partition):
    # The kernel refuses a partition in io.max (test_io_v2); the resolver says so first.
    with pytest.raises(DeviceError, match="vda"):
        resolve_block_device(str(virtio_partition.path))
    assert resolve_block_device(str(virtio_partition.path), partition_to_disk=True) == (
        virtio_disk.major,
        virtio_disk.minor,
    )
    assert resolve_block_device(virtio_disk.majmin) == (virtio_disk.major, virtio_disk.minor)
