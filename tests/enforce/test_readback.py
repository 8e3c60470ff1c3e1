"""Semantic read-back comparison: the kernel's normalisations are not failures."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nri_plugin.enforce.readback import restore_value, values_match
from nri_plugin.topology.cpulist import parse_cpulist
from nri_plugin.topology.errors import CpuListError


@pytest.mark.parametrize(
    ("file", "written", "read", "ok"),
    [
        ("memory.limit_in_bytes", "1000000", "999424\n", True),  # rounded down to pages
        ("memory.limit_in_bytes", "1000000", "1000000\n", False),
        ("memory.soft_limit_in_bytes", "-1", "9223372036854771712\n", True),
        ("memory.max", "max", "max\n", True),
        ("memory.high", "8589934592", "8589934592\n", True),
        ("memory.high", "8589934592", "max\n", False),
        ("cpuset.cpus", "0,1,2,5", "0-2,5\n", True),
        ("cpuset.cpus", "0-3", "0-2\n", False),
        ("cpuset.mems", "0", "\n", False),
        ("blkio.throttle.read_bps_device", "254:0 1048576", "254:0 1048576\n7:0 5\n", True),
        ("blkio.throttle.read_bps_device", "254:0 1048576", "254:0 2048\n", False),
        ("blkio.throttle.write_iops_device", "254:0 0", "", True),  # 0 removes the rule
        ("blkio.throttle.write_iops_device", "254:0 0", "254:0 10\n", False),
        ("blkio.bfq.weight", "500", "500\n", True),  # v1 bare number
        ("blkio.bfq.weight_device", "7:0 300", "default 500\n7:0 300\n", True),
        ("io.weight", "default 300", "default 300\n", True),
        ("io.weight", "300", "default 300\n8:0 50\n", True),
        ("io.weight", "8:0 50", "default 300\n8:0 50\n", True),
        ("io.bfq.weight", "default 90", "default 100\n", False),
        ("io.max", "8:0 rbps=1000 wiops=20", "8:0 rbps=1000 wbps=max riops=max wiops=20\n", True),
        ("io.max", "8:0 rbps=1000", "8:0 rbps=999 wbps=max riops=max wiops=max\n", False),
        ("io.max", "8:0 rbps=max", "", True),  # all-max devices have no line
        ("cpu.max", "50000 100000", "50000 100000\n", True),
        ("cpu.max", "max", "max 100000\n", True),
        ("cpu.max", "50000 100000", "max 100000\n", False),
        ("cpu.cfs_quota_us", "50000", "50000\n", True),
        ("cpu.rt_runtime_us", "5000", "0\n", False),
    ],
)
def test_values_match(file: str, written: str, read: str, ok: bool) -> None:
    assert values_match(file, written, read) is ok


def test_cpu_list_errors() -> None:
    with pytest.raises(CpuListError, match="reversed"):
        parse_cpulist("3-1")
    with pytest.raises(CpuListError, match="not a number"):
        parse_cpulist("a")
    with pytest.raises(CpuListError, match="from 0 to 63"):
        parse_cpulist("0-999999999", limit=63)  # refused before the range is expanded
    with pytest.raises(CpuListError, match="too large"):
        parse_cpulist("9" * 5000)  # never reaches int() (Python refuses > 4300 digits)
    with pytest.raises(CpuListError, match="twice"):
        parse_cpulist("0-3,2", distinct=True)
    assert parse_cpulist("0-3,2") == {0, 1, 2, 3}


def _canonical(cpus: set[int]) -> str:
    out, run = [], []
    for c in sorted(cpus):
        if run and c == run[-1] + 1:
            run.append(c)
        else:
            if run:
                out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
            run = [c]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(out)


@settings(max_examples=80, deadline=None)
@given(st.sets(st.integers(0, 255), min_size=1, max_size=40))
def test_cpuset_any_spelling_matches_canonical(cpus: set[int]) -> None:
    written = ",".join(str(c) for c in sorted(cpus, reverse=True))
    assert parse_cpulist(_canonical(cpus)) == cpus
    assert values_match("cpuset.cpus", written, _canonical(cpus) + "\n")


@settings(max_examples=80, deadline=None)
@given(st.integers(0, 1 << 44))
def test_memory_page_rounding(n: int) -> None:
    assert values_match("memory.limit_in_bytes", str(n), str(n // 4096 * 4096))
    if n % 4096:
        assert not values_match("memory.limit_in_bytes", str(n), str(n))


@pytest.mark.parametrize(
    ("file", "written", "before", "undo"),
    [
        ("cpu.cfs_quota_us", "50000", "-1\n", "-1"),
        ("cpu.max", "50000 100000", "max 100000\n", "max 100000"),
        ("cpuset.cpus", "2-3", "0-7\n", "0-7"),
        ("memory.limit_in_bytes", "67108864", "9223372036854771712\n", "-1"),  # v1 unlimited
        ("memory.max", "67108864", "max\n", "max"),
        ("memory.soft_limit_in_bytes", "1048576", "4096\n", "4096"),
        # per-device files: only the written device's line goes back
        ("blkio.throttle.read_bps_device", "259:0 1000", "", "259:0 0"),
        ("blkio.throttle.read_bps_device", "259:0 1000", "8:0 5\n259:0 7\n", "259:0 7"),
        (
            "io.max",
            "259:0 rbps=1000",
            "8:0 rbps=5 wbps=max riops=max wiops=max\n",
            "259:0 rbps=max wbps=max riops=max wiops=max",
        ),
        (
            "io.max",
            "259:0 rbps=1000",
            "259:0 rbps=5 wbps=max riops=max wiops=max\n",
            "259:0 rbps=5 wbps=max riops=max wiops=max",
        ),
        ("io.weight", "500", "default 100\n", "100"),
        ("io.weight", "259:0 500", "default 100\n", "259:0 default"),
        ("io.weight", "259:0 500", "default 100\n259:0 300\n", "259:0 300"),
        ("blkio.bfq.weight", "500", "100\n", "100"),
    ],
)
def test_restore_value_undoes_the_write(file: str, written: str, before: str, undo: str) -> None:
    assert restore_value(file, written, before) == undo
