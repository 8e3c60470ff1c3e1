"""read_compliance over fake cgroup files in the kernels' formats (v1 and v2): what is
there is read, what is missing or malformed is left out, never an error."""

from __future__ import annotations

from pathlib import Path

from nri_plugin.enforce.cgpaths import UNIFIED, CgroupPaths
from nri_plugin.enforce.compliance import Compliance, CpuThrottling, Pressure, read_compliance


def v1_paths(tmp_path: Path) -> tuple[CgroupPaths, dict[str, Path]]:
    dirs = {c: tmp_path / c / "ctr" for c in ("cpu", "memory")}
    for d in dirs.values():
        d.mkdir(parents=True)
    return CgroupPaths(
        "/ctr", 1, {c: str(d) for c, d in dirs.items()}, {c: str(tmp_path / c) for c in dirs}
    ), dirs


def test_v1_throttling_failcnt_and_oom_kills(tmp_path):
    paths, dirs = v1_paths(tmp_path)
    # cgroup v1 cpu.stat counts throttled time in ns
    (dirs["cpu"] / "cpu.stat").write_text(
        "nr_periods 2000\nnr_throttled 500\nthrottled_time 2500000000\nnr_bursts 0\nburst_time 0\n"
    )
    (dirs["memory"] / "memory.failcnt").write_text("42\n")
    (dirs["memory"] / "memory.oom_control").write_text(
        "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n"
    )
    got = read_compliance(paths)
    assert got == Compliance(CpuThrottling(2000, 500, 2.5), (("max", 42), ("oom_kill", 3)))
    assert got.cpu is not None and got.cpu.ratio == 0.25


def test_v1_without_the_files_reports_nothing(tmp_path):
    paths, _ = v1_paths(tmp_path)
    assert read_compliance(paths) == Compliance()
    assert CpuThrottling(0, 0, 0.0).ratio == 0.0


def test_v2_events_and_pressure(tmp_path):
    d = tmp_path / "ctr"
    d.mkdir()
    (d / "cpu.stat").write_text(
        "usage_usec 10\nnr_periods 10\nnr_throttled 1\nthrottled_usec 1500\n"
    )
    (d / "memory.events").write_text("low 0\nhigh 17\nmax 2\noom 1\noom_kill 1\noom_group_kill 0\n")
    (d / "memory.pressure").write_text(
        "some avg10=50.00 avg60=1.00 avg300=0.00 total=3000000\n"
        "full avg10=25.00 avg60=1.00 avg300=0.00 total=1000\n"
    )
    (d / "io.pressure").write_text("some avg10=nan total=5\nbogus\n")  # malformed: left out
    paths = CgroupPaths("/ctr", 2, {UNIFIED: str(d)}, {UNIFIED: str(tmp_path)})
    got = read_compliance(paths)
    assert got.cpu == CpuThrottling(10, 1, 0.0015)
    assert got.memory_events == (("high", 17), ("max", 2), ("oom", 1), ("oom_kill", 1))
    assert got.pressure == (
        Pressure("memory", "some", 0.5, 3.0),
        Pressure("memory", "full", 0.25, 0.001),
    )
