"""Per-container series from the drift watch's last pass, labelled namespace, pod and
container: what the SLA enforces, whether the kernel still holds it, and how the workload
fares under it (CPU throttling, memory limit events, pressure).

Collected during the watch's pass, exposed on scrape: a scrape never reads cgroupfs (any
client that can reach the metrics port could otherwise make the plugin read thousands of
files on demand), the cost is one pass per interval whatever the scrape rate, and the
throttling ratio covers exactly one interval. The series exist only for the containers
of the last pass, so a container that goes away takes its series with it at the next
pass. PSI goes out as the stall-time counters (rate() over any window is the pressure),
not as avg10 sampled once per interval (`nri-sla status` shows avg10). At most `limit`
containers are exported (the rest are counted in `nri_sla_containers_unexported` and
still shown by `nri-sla status`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from nri_plugin.plugin.report import ContainerReport, NodeReport, cpu_limit, gpu_refs, memory_high
from nri_plugin.topology.cpulist import parse_cpulist

P = "nri_sla_container_"
LABELS = ("namespace", "pod", "container")


class ContainerCollector:
    """A prometheus_client collector over `source()`, the watch's last NodeReport."""

    def __init__(self, source: Callable[[], NodeReport], limit: int) -> None:
        self.source = source
        self.limit = limit

    def describe(self) -> list[Metric]:
        return [*_families().values(), _unexported(0)]

    def collect(self) -> Iterator[Metric]:
        report = self.source()
        families = _families()
        shown = report.containers[:self.limit]
        for c in shown:
            _add(families, c)
        yield from families.values()
        yield _unexported(len(report.containers) - len(shown))


def _unexported(count: int) -> GaugeMetricFamily:
    return GaugeMetricFamily(
        "nri_sla_containers_unexported", "SLA containers beyond watch.metrics-containers "
        "(no per-container series; nri-sla status shows them)", value=count)


def _families() -> dict[str, Metric]:
    def gauge(name: str, doc: str, *extra: str) -> GaugeMetricFamily:
        return GaugeMetricFamily(P + name, doc, labels=[*LABELS, *extra])

    def counter(name: str, doc: str, *extra: str) -> CounterMetricFamily:
        return CounterMetricFamily(P + name, doc, labels=[*LABELS, *extra])

    return {f.name: f for f in (
        counter("cpu_periods", "CPU bandwidth periods the container ran in (cpu.stat "
                "nr_periods)"),
        counter("cpu_throttled_periods", "Periods in which the container hit its CPU "
                "quota (cpu.stat nr_throttled)"),
        counter("cpu_throttled_seconds", "Time the container was throttled"),
        gauge("cpu_throttled_ratio", "Throttled periods / periods over the last watch "
              "interval"),
        counter("memory_events", "Memory limit events: high (reclaimed above "
                "memory.high), max (hit memory.max; v1 memory.failcnt), oom, oom_kill",
                "event"),
        counter("pressure_stalled_seconds", "PSI: time some (or all) of the container's "
                "tasks stalled on the resource (cgroup v2; rate() is the pressure)",
                "resource", "kind"),
        gauge("cpu_limit_cores", "CPU bandwidth the SLA enforces (quota / period)"),
        gauge("memory_max_bytes", "memory.max the SLA enforces"),
        gauge("memory_high_bytes", "memory.high the SLA enforces (v1: the soft limit)"),
        gauge("cpuset_cpus", "CPUs in the cpuset the container should have"),
        gauge("gpus", "GPUs nri-sla placed the container on"),
        gauge("drifted_settings", "Enforced values the kernel does not hold at the last "
              "watch pass"),
    )}


def _add(families: dict[str, Metric], c: ContainerReport) -> None:
    who = [c.namespace, c.pod, c.container]

    def put(name: str, value: float | None, *extra: str) -> None:
        if value is not None:
            families[P + name].add_metric([*who, *extra], value)

    compliance = c.compliance
    if compliance is not None and compliance.cpu is not None:
        put("cpu_periods", compliance.cpu.periods)
        put("cpu_throttled_periods", compliance.cpu.throttled)
        put("cpu_throttled_seconds", compliance.cpu.throttled_seconds)
    put("cpu_throttled_ratio", c.throttled_ratio)
    if compliance is not None:
        for event, count in compliance.memory_events:
            put("memory_events", count, event)
        for p in compliance.pressure:
            put("pressure_stalled_seconds", p.stalled_seconds, p.resource, p.kind)
    plan = c.plan
    put("cpu_limit_cores", cpu_limit(plan))
    put("memory_max_bytes", plan.memory_max)
    put("memory_high_bytes", memory_high(plan))
    if c.cpus:
        put("cpuset_cpus", len(parse_cpulist(c.cpus)))
    gpus = gpu_refs(plan)
    if gpus:
        put("gpus", len(gpus))
    if c.settings:
        put("drifted_settings", c.drifted)
