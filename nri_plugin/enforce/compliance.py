"""How a container fares under its SLA, read from its cgroup: CPU throttling, memory
limit events and pressure stall information (PSI).

* CPU bandwidth (v1 `cpu.stat` in the cpu hierarchy, v2 `cpu.stat`): `nr_periods`,
  `nr_throttled`, and the time spent throttled (v1 `throttled_time` in ns, v2
  `throttled_usec`). Throttled periods / periods is the share of enforcement periods in
  which the container hit its quota.
* Memory (v2 `memory.events`: `high` = times reclaim was forced above memory.high, `max`
  = times usage reached memory.max, `oom`, `oom_kill`; v1 has no memory.high: `max` is
  `memory.failcnt` (times usage hit the limit) and `oom_kill` comes from
  `memory.oom_control` where the kernel reports it).
* PSI (v2 only: cgroup v1 has no per-cgroup pressure files): `cpu.pressure`,
  `memory.pressure`, `io.pressure`, lines `some|full avg10=.. avg60=.. avg300=..
  total=<µs>`.

Every file is optional (a controller not enabled, an older kernel): what is missing is
left out, never an error. Values are kernel-written, parsed leniently and bounded.
"""

from __future__ import annotations

from dataclasses import dataclass

from nri_plugin.enforce.cgfile import read_value
from nri_plugin.enforce.cgpaths import UNIFIED, CgroupPaths

PRESSURE_RESOURCES = ("cpu", "memory", "io")
PRESSURE_KINDS = ("some", "full")
MEMORY_EVENTS = ("high", "max", "oom", "oom_kill")
_READ_LIMIT = 4096  # these files are a few lines


@dataclass(frozen=True, slots=True)
class CpuThrottling:
    periods: int  # enforcement periods in which the container ran
    throttled: int  # of those, periods in which it hit its quota
    throttled_seconds: float

    @property
    def ratio(self) -> float:
        """Throttled periods / periods since the cgroup was made (0 with no periods)."""
        return self.throttled / self.periods if self.periods else 0.0


@dataclass(frozen=True, slots=True)
class Pressure:
    resource: str  # cpu | memory | io
    kind: str  # some | full
    avg10: float  # share of the last 10 s some (or all) tasks stalled, 0..1
    stalled_seconds: float  # total stall time since the cgroup was made


@dataclass(frozen=True, slots=True)
class Compliance:
    cpu: CpuThrottling | None = None
    memory_events: tuple[tuple[str, int], ...] = ()  # (event in MEMORY_EVENTS, count)
    pressure: tuple[Pressure, ...] = ()


def _read(directory: str | None, name: str) -> str | None:
    if directory is None:
        return None
    try:
        return read_value(f"{directory}/{name}", _READ_LIMIT)
    except OSError:
        return None


def _keyed(text: str | None) -> dict[str, int]:
    """ "key value" lines (cpu.stat, memory.events, memory.oom_control) as numbers."""
    values: dict[str, int] = {}
    for line in (text or "").splitlines():
        key, _, value = line.partition(" ")
        value = value.strip()
        if value.isdigit():
            values[key] = int(value)
    return values


def _throttling(text: str | None, version: int) -> CpuThrottling | None:
    stat = _keyed(text)
    if "nr_periods" not in stat or "nr_throttled" not in stat:
        return None
    seconds = (
        stat.get("throttled_time", 0) / 1e9 if version == 1 else stat.get("throttled_usec", 0) / 1e6
    )
    return CpuThrottling(stat["nr_periods"], stat["nr_throttled"], seconds)


def _pressure(resource: str, text: str | None) -> list[Pressure]:
    """ "some avg10=1.00 avg60=0.50 avg300=0.10 total=123" lines (the kernel's fixed
    order: avg10 first, total last)."""
    found = []
    for line in (text or "").splitlines():
        fields = line.split()
        if len(fields) < 3 or fields[0] not in PRESSURE_KINDS:
            continue
        avg, total = fields[1], fields[-1]
        if not (avg.startswith("avg10=") and total.startswith("total=") and total[6:].isdigit()):
            continue
        try:
            avg10 = float(avg[6:])
        except ValueError:
            continue
        if 0 <= avg10 <= 100:  # a percentage (not nan, not inf)
            found.append(Pressure(resource, fields[0], avg10 / 100, int(total[6:]) / 1e6))
    return found


def read_compliance(paths: CgroupPaths) -> Compliance:
    """The container's signals, from the files its kernel has."""
    if paths.version == 2:
        directory = paths.dirs.get(UNIFIED)
        events = _keyed(_read(directory, "memory.events"))
        pressure = [
            p
            for resource in PRESSURE_RESOURCES
            for p in _pressure(resource, _read(directory, f"{resource}.pressure"))
        ]
        return Compliance(
            _throttling(_read(directory, "cpu.stat"), 2),
            tuple((e, events[e]) for e in MEMORY_EVENTS if e in events),
            tuple(pressure),
        )
    memory = paths.dirs.get("memory")
    v1_events = {}
    failcnt = _read(memory, "memory.failcnt")
    if failcnt is not None and failcnt.strip().isdigit():
        v1_events["max"] = int(failcnt)
    oom = _keyed(_read(memory, "memory.oom_control"))
    if "oom_kill" in oom:
        v1_events["oom_kill"] = oom["oom_kill"]
    return Compliance(
        _throttling(_read(paths.dirs.get("cpu"), "cpu.stat"), 1),
        tuple((e, v1_events[e]) for e in MEMORY_EVENTS if e in v1_events),
    )
