"""SLA values -> direct cgroup writes (pure functions)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nri_plugin.enforce.cgfile import CgroupWrite
from nri_plugin.enforce.mapping import (
    io_weight_to_bfq,
    io_weight_to_cfq,
    v1_cpu_writes,
    v1_io_writes,
    v1_memory_writes,
    v2_cpu_writes,
    v2_io_max_line,
    v2_io_writes,
    v2_memory_writes,
)
from nri_plugin.errors import ProgrammingError
from nri_plugin.plan.model import IoLimit

RULE = IoLimit(254, 0, read_bps=524288000, write_bps=209715200, read_iops=20000)


def test_weight_anchors() -> None:
    assert [io_weight_to_bfq(w) for w in (1, 100, 10000)] == [1, 100, 1000]
    assert [io_weight_to_cfq(w) for w in (1, 100, 10000)] == [10, 500, 1000]
    assert io_weight_to_bfq(500) == 136  # 100 + 400*900/9900 = 136.4
    with pytest.raises(ProgrammingError, match=r"1\.\.10000"):
        io_weight_to_bfq(0)
    with pytest.raises(ProgrammingError, match=r"1\.\.10000"):
        io_weight_to_cfq(10001)


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 9999))
def test_weight_scaling_is_monotonic_and_in_range(w: int) -> None:
    assert 1 <= io_weight_to_bfq(w) <= io_weight_to_bfq(w + 1) <= 1000
    assert 10 <= io_weight_to_cfq(w) <= io_weight_to_cfq(w + 1) <= 1000


def test_v1_io_writes_bfq_and_cfq() -> None:
    writes = v1_io_writes(500, [RULE], bfq=True)
    assert writes == [
        CgroupWrite("blkio", "blkio.bfq.weight", "136"),
        CgroupWrite("blkio", "blkio.throttle.read_bps_device", "254:0 524288000"),
        CgroupWrite("blkio", "blkio.throttle.write_bps_device", "254:0 209715200"),
        CgroupWrite("blkio", "blkio.throttle.read_iops_device", "254:0 20000"),
    ]
    assert v1_io_writes(100, (), bfq=False) == [CgroupWrite("blkio", "blkio.weight", "500")]
    assert v1_io_writes(None, (), bfq=True) == []


def test_v2_io_writes() -> None:
    assert v2_io_writes(500, [RULE], bfq=False) == [
        CgroupWrite("io", "io.weight", "default 500"),
        CgroupWrite("io", "io.max", "254:0 rbps=524288000 wbps=209715200 riops=20000"),
    ]
    assert v2_io_writes(500, (), bfq=True) == [CgroupWrite("io", "io.bfq.weight", "default 136")]
    assert v2_io_max_line(IoLimit(8, 0)) is None
    assert v2_io_writes(None, [IoLimit(8, 0)], bfq=False) == []
    with pytest.raises(ProgrammingError, match=r"io\.weight 0 outside"):
        v2_io_writes(0, (), bfq=False)


def test_memory_writes() -> None:
    assert v1_memory_writes(high=8 << 30, max_bytes=10 << 30) == [
        CgroupWrite("memory", "memory.limit_in_bytes", str(10 << 30)),
        CgroupWrite("memory", "memory.soft_limit_in_bytes", str(8 << 30)),
    ]
    assert v2_memory_writes(high=1, max_bytes=None) == [CgroupWrite("memory", "memory.high", "1")]


def test_cpu_writes_order() -> None:
    files = [w.file for w in v1_cpu_writes(250000, 100000, "2-3", "0", 5000, 1000000)]
    assert files == [
        "cpu.cfs_period_us",
        "cpu.cfs_quota_us",
        "cpu.rt_period_us",
        "cpu.rt_runtime_us",
        "cpuset.mems",
        "cpuset.cpus",
    ]
    assert v2_cpu_writes(250000, 100000) == [CgroupWrite("cpu", "cpu.max", "250000 100000")]
    assert v2_cpu_writes(None, 100000, cpus="1") == [
        CgroupWrite("cpu", "cpu.max", "max 100000"),
        CgroupWrite("cpuset", "cpuset.cpus", "1"),
    ]
