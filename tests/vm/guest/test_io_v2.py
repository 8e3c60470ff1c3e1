"""io.max and io.weight on a real block device (the guest's blank virtio disk /dev/vda).

io.max (blk-throttle) works on any device. io.weight is only a number in a file until a
weight-based controller runs the device: io.cost (enabled per device in the root's
io.cost.qos) or the bfq scheduler (which reads io.bfq.weight instead).
"""

import contextlib
import errno
import time
from pathlib import Path

import pytest

ROOT = Path("/sys/fs/cgroup")


@pytest.fixture
def iocost(virtio_disk):
    """io.cost enabled on the scratch disk for the test's duration."""
    qos = ROOT / "io.cost.qos"
    qos.write_text(f"{virtio_disk.majmin} enable=1")
    yield
    with contextlib.suppress(OSError):
        qos.write_text(f"{virtio_disk.majmin} enable=0")


@pytest.fixture
def bfq(virtio_disk):
    sched = Path("/sys/block/vda/queue/scheduler")
    before = sched.read_text().split("[")[1].split("]")[0]
    sched.write_text("bfq")
    yield
    sched.write_text(before)


def test_io_max_round_trip(scratch_cgroup, virtio_disk):
    dev = virtio_disk.majmin
    scratch_cgroup.write("io.max", f"{dev} rbps=524288000 wbps=209715200 riops=20000 wiops=10000")
    assert scratch_cgroup.read("io.max") == (
        f"{dev} rbps=524288000 wbps=209715200 riops=20000 wiops=10000"
    )


def test_io_max_partial_write_keeps_other_keys(scratch_cgroup, virtio_disk):
    dev = virtio_disk.majmin
    scratch_cgroup.write("io.max", f"{dev} wbps=1048576")
    assert scratch_cgroup.read("io.max") == f"{dev} rbps=max wbps=1048576 riops=max wiops=max"
    scratch_cgroup.write("io.max", f"{dev} riops=50")
    assert scratch_cgroup.read("io.max") == f"{dev} rbps=max wbps=1048576 riops=50 wiops=max"
    # All four back at max: the device's line disappears.
    scratch_cgroup.write("io.max", f"{dev} wbps=max riops=max")
    assert scratch_cgroup.read("io.max") == ""


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("{dev} foo=1", errno.EINVAL),
        ("{dev} rbps=-1", errno.EINVAL),
        ("9:9 rbps=1048576", errno.ENODEV),  # no such device: writers must resolve MAJ:MIN
    ],
)
def test_io_max_refusals(scratch_cgroup, virtio_disk, line, expected):
    with pytest.raises(OSError) as exc:
        scratch_cgroup.write("io.max", line.format(dev=virtio_disk.majmin))
    assert exc.value.errno == expected


def test_io_max_throttles_direct_writes(scratch_cgroup, virtio_disk):
    scratch_cgroup.write("io.max", f"{virtio_disk.majmin} wbps=1048576")  # 1 MiB/s
    started = time.monotonic()
    # 2 MiB at 8 MiB into the disk: the partition table in sector 0 stays intact.
    proc = scratch_cgroup.spawn(
        [
            "dd",
            "if=/dev/zero",
            f"of={virtio_disk.path}",
            "bs=64k",
            "seek=128",
            "count=32",
            "oflag=direct",
        ]
    )
    _, err = proc.communicate(timeout=60)
    elapsed = time.monotonic() - started
    assert proc.returncode == 0, err
    assert elapsed >= 1.5, f"2 MiB at 1 MiB/s took only {elapsed:.2f} s"
    stat = scratch_cgroup.read("io.stat")
    assert f"{virtio_disk.majmin} " in stat and "wbytes=2097152" in stat


def test_io_max_refuses_a_partition(scratch_cgroup, virtio_partition):
    # Per-cgroup block rules exist for whole disks only, on v2 as on v1: a partition
    # named in an SLA must be mapped to its disk (or refused) before writing.
    with pytest.raises(OSError) as exc:
        scratch_cgroup.write("io.max", f"{virtio_partition.majmin} wbps=1048576")
    assert exc.value.errno == errno.ENODEV


def test_disk_rule_throttles_io_to_its_partition(scratch_cgroup, virtio_disk, virtio_partition):
    scratch_cgroup.write("io.max", f"{virtio_disk.majmin} wbps=1048576")
    started = time.monotonic()
    proc = scratch_cgroup.spawn(
        ["dd", "if=/dev/zero", f"of={virtio_partition.path}", "bs=64k", "count=32", "oflag=direct"]
    )
    _, err = proc.communicate(timeout=60)
    elapsed = time.monotonic() - started
    assert proc.returncode == 0, err
    assert elapsed >= 1.5, f"2 MiB to the partition at 1 MiB/s took only {elapsed:.2f} s"
    # Accounted on the disk's line: the partition has none of its own.
    assert "wbytes=2097152" in scratch_cgroup.read("io.stat")


def test_io_weight_default_round_trip(scratch_cgroup):
    assert scratch_cgroup.read("io.weight") == "default 100"
    scratch_cgroup.write("io.weight", "default 500")
    assert scratch_cgroup.read("io.weight") == "default 500"
    scratch_cgroup.write("io.weight", "10000")  # a bare number sets the default too
    assert scratch_cgroup.read("io.weight") == "default 10000"


@pytest.mark.parametrize("bad", ["default 0", "default 10001"])
def test_io_weight_range(scratch_cgroup, bad):
    with pytest.raises(OSError) as exc:
        scratch_cgroup.write("io.weight", bad)
    assert exc.value.errno in (errno.EINVAL, errno.ERANGE)


def test_io_weight_per_device_needs_iocost(scratch_cgroup, virtio_disk):
    # Without io.cost on the device a per-device weight cannot even be stored.
    if virtio_disk.majmin in (ROOT / "io.cost.qos").read_text():
        pytest.skip("io.cost was already set up on the disk by an earlier test")
    with pytest.raises(OSError):
        scratch_cgroup.write("io.weight", f"{virtio_disk.majmin} 300")


def test_io_weight_per_device_with_iocost(scratch_cgroup, virtio_disk, iocost):
    qos = (ROOT / "io.cost.qos").read_text()
    assert f"{virtio_disk.majmin} enable=1" in qos
    scratch_cgroup.write("io.weight", f"{virtio_disk.majmin} 300")
    assert scratch_cgroup.read("io.weight").splitlines() == [
        "default 100",
        f"{virtio_disk.majmin} 300",
    ]


def test_io_bfq_weight(scratch_cgroup, virtio_disk, bfq):
    assert "[bfq]" in Path("/sys/block/vda/queue/scheduler").read_text()
    scratch_cgroup.write("io.bfq.weight", "500")
    assert scratch_cgroup.read("io.bfq.weight") == "default 500"
    with pytest.raises(OSError):
        scratch_cgroup.write("io.bfq.weight", "1001")  # bfq's range is 1..1000
