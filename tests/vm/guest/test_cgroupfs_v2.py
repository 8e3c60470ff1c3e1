"""The cgroup v2 interface files nri-sla writes, on a real v2 kernel: what a write is read
back as, which writes the kernel refuses (and with which errno), and that the limits act.

These facts are what the cgroup writer (nri_plugin/enforce/cgfile.py) relies on for v2
read-back checks (nri_plugin/enforce/readback.py).
"""

import errno
import time

import pytest


def test_root_enables_every_controller_nri_sla_uses(scratch_cgroup):
    available = set(scratch_cgroup.read("cgroup.controllers").split())
    assert {"cpu", "cpuset", "memory", "io", "pids"} <= available


@pytest.mark.parametrize(
    ("written", "read_back"),
    [
        ("50000 100000", "50000 100000"),
        ("250000 100000", "250000 100000"),  # 2.5 CPUs
        ("max 100000", "max 100000"),
        ("20000", "20000 100000"),  # period defaults to 100ms
        ("max 1000000", "max 1000000"),
    ],
)
def test_cpu_max_round_trip(scratch_cgroup, written, read_back):
    scratch_cgroup.write("cpu.max", written)
    assert scratch_cgroup.read("cpu.max") == read_back


@pytest.mark.parametrize("bad", ["bogus", "1000 100", "1000 2000000"])
def test_cpu_max_refuses_bad_values(scratch_cgroup, bad):
    # Quota below 1ms, period outside 1ms..1s, non-numbers: all EINVAL.
    with pytest.raises(OSError) as exc:
        scratch_cgroup.write("cpu.max", bad)
    assert exc.value.errno == errno.EINVAL
    assert scratch_cgroup.read("cpu.max") == "max 100000"


def test_cpu_max_throttles_a_busy_loop(scratch_cgroup):
    scratch_cgroup.write("cpu.max", "10000 100000")  # 10% of one CPU
    proc = scratch_cgroup.spawn(["sh", "-c", "while :; do :; done"])
    started = time.monotonic()
    time.sleep(1.5)
    proc.kill()
    proc.wait()
    wall_us = (time.monotonic() - started) * 1e6
    stat = scratch_cgroup.keyed("cpu.stat")
    assert stat["nr_throttled"] >= 3, stat
    assert stat["usage_usec"] < 0.5 * wall_us, stat


def test_no_rt_runtime_on_v2(scratch_cgroup):
    # The design's "rt-runtime is not available on v2" rests on this.
    names = {p.name for p in scratch_cgroup.path.iterdir()}
    assert "cpu.max" in names
    assert not [n for n in names if n.startswith("cpu.rt_")]
    assert not (scratch_cgroup.path.parent / "cpu.rt_runtime_us").exists()


def test_cpuset_round_trip(scratch_cgroup):
    assert scratch_cgroup.read("cpuset.cpus") == ""  # empty = inherit the parent's
    scratch_cgroup.write("cpuset.cpus", "0")
    scratch_cgroup.write("cpuset.mems", "0")
    assert scratch_cgroup.read("cpuset.cpus") == "0"
    assert scratch_cgroup.read("cpuset.mems") == "0"
    assert scratch_cgroup.read("cpuset.cpus.effective") == "0"
    scratch_cgroup.write("cpuset.cpus", "0,1")
    assert scratch_cgroup.read("cpuset.cpus") == "0-1"  # the kernel normalises lists


def test_cpuset_refuses_a_cpu_the_machine_lacks(scratch_cgroup):
    with pytest.raises(OSError) as exc:
        scratch_cgroup.write("cpuset.cpus", "99")
    assert exc.value.errno == errno.ERANGE


@pytest.mark.parametrize("name", ["memory.high", "memory.max"])
@pytest.mark.parametrize(
    ("written", "read_back"),
    [
        ("67108864", "67108864"),
        ("100000", "98304"),  # rounded down to whole pages: read-back must compare aligned
        ("max", "max"),
    ],
)
def test_memory_limit_round_trip(scratch_cgroup, name, written, read_back):
    scratch_cgroup.write(name, written)
    assert scratch_cgroup.read(name) == read_back


def test_memory_refuses_negative(scratch_cgroup):
    with pytest.raises(OSError) as exc:
        scratch_cgroup.write("memory.max", "-5")
    assert exc.value.errno == errno.EINVAL


def test_memory_max_oom_kills_inside_the_cgroup(scratch_cgroup):
    scratch_cgroup.write("memory.max", str(32 << 20))
    scratch_cgroup.write("memory.swap.max", "0")
    # Touch 96 MiB (bytes * n fills the pages), well over the limit.
    proc = scratch_cgroup.spawn(["python3", "-S", "-c", "b = b'x' * (96 << 20)"])
    proc.communicate(timeout=60)
    assert proc.returncode == -9
    assert scratch_cgroup.keyed("memory.events")["oom_kill"] >= 1


def test_pids_max_round_trip(scratch_cgroup):
    scratch_cgroup.write("pids.max", "64")
    assert scratch_cgroup.read("pids.max") == "64"
