"""Per-container series from the drift watch's last pass, labelled namespace, pod and
container: what the SLA enforces, whether the kernel still holds it, and how the workload
fares under it (CPU throttling, memory limit events, pressure).

Collected during the watch's pass, exposed on scrape: a scrape never reads cgroupfs (any
client that can reach the metrics port could otherwise make the plugin read thousands of
files on demand), the cost is one pass per interval whatever the scrape rate, and the
throttling ratio covers exactly one interval. The series exist only for the containers
of the last pass, so a container that goes away takes its series with it at the next
pass. PSI goes out as the stall-time counters (rate() over any window is the pressure),
not as avg10 sampled once per interval (`nri-sla status` shows avg10).

At most `limit` containers are exported, shared fairly between namespaces (`fair_quota`:
round-robin, one container per namespace per round, so one namespace with thousands of
containers cannot silence the others' series and alerts). The rest are counted in
`nri_sla_containers_unexported` (all) and `nri_sla_namespace_containers_unexported`
(per namespace), logged once when the cap starts leaving containers out, and still shown
by `nri-sla status`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Sequence

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from nri_plugin.ops.logsetup import log_event
from nri_plugin.plugin.report import ContainerReport, NodeReport, cpu_limit, gpu_refs, memory_high
from nri_plugin.topology.cpulist import parse_cpulist

log = logging.getLogger("nri_sla.metrics")

P = "nri_sla_container_"
LABELS = ("namespace", "pod", "container")


class ContainerCollector:
    """A prometheus_client collector over `source()`, the watch's last NodeReport."""

    def __init__(self, source: Callable[[], NodeReport], limit: int) -> None:
        self.source = source
        self.limit = limit
        self._lock = threading.Lock()  # scrapes run in the HTTP server's threads
        self._leaving_out = False  # the cap left containers out at the last scrape

    def describe(self) -> list[Metric]:
        return [*_families().values(), _unexported(0), _unexported_by_namespace({}, 0)]

    def collect(self) -> Iterator[Metric]:
        shown, left_out = exported(self.source().containers, self.limit)
        families = _families()
        for c in shown:
            _add(families, c)
        yield from families.values()
        yield _unexported(sum(left_out.values()))
        yield _unexported_by_namespace(left_out, self.limit)
        self._note(len(shown), left_out)

    def _note(self, shown: int, left_out: dict[str, int]) -> None:
        with self._lock:
            starts = bool(left_out) and not self._leaving_out
            self._leaving_out = bool(left_out)
        if starts:
            log_event(
                log,
                logging.WARNING,
                "per-container series capped",
                limit=self.limit,
                exported=shown,
                unexported=sum(left_out.values()),
                namespaces=len(left_out),
                largest=max(left_out, key=left_out.__getitem__),
                hint="raise watch.metrics-containers or use nri-sla status",
            )


def fair_quota(counts: dict[str, int], limit: int) -> dict[str, int]:
    """How many containers of each namespace are exported when `limit` are shared
    round-robin: a namespace with at most the fair share exports all of its containers;
    the others split what is left evenly, the first in name order one more when it does
    not divide. Deterministic; the quotas sum to min(limit, all containers)."""
    quota: dict[str, int] = {}
    remaining = max(0, limit)
    order = sorted(counts, key=lambda ns: (counts[ns], ns))  # smallest first
    for i, ns in enumerate(order):
        left = len(order) - i
        if counts[ns] * left <= remaining:  # fits within an even share of what is left
            quota[ns] = counts[ns]
            remaining -= counts[ns]
            continue
        # this one and every larger one are capped at the even share
        share, extra = divmod(remaining, left)
        for j, capped in enumerate(sorted(order[i:])):
            quota[capped] = share + int(j < extra)
        break
    return quota


def exported(
    containers: Sequence[ContainerReport], limit: int
) -> tuple[list[ContainerReport], dict[str, int]]:
    """The containers given series (each namespace's first by pod and container name, as
    many as fair_quota allows) and the number left out per namespace (those > 0)."""
    by_namespace: dict[str, list[ContainerReport]] = {}
    for c in sorted(containers, key=lambda c: (c.namespace, c.pod, c.container)):
        by_namespace.setdefault(c.namespace, []).append(c)
    quota = fair_quota({ns: len(cs) for ns, cs in by_namespace.items()}, limit)
    shown = [c for ns, cs in by_namespace.items() for c in cs[: quota[ns]]]
    left_out = {ns: len(cs) - quota[ns] for ns, cs in by_namespace.items() if len(cs) > quota[ns]}
    return shown, left_out


def _unexported(count: int) -> GaugeMetricFamily:
    return GaugeMetricFamily(
        "nri_sla_containers_unexported",
        "SLA containers beyond watch.metrics-containers "
        "(no per-container series; nri-sla status shows them)",
        value=count,
    )


def _unexported_by_namespace(left_out: dict[str, int], limit: int) -> GaugeMetricFamily:
    # At most `limit` series (the namespaces missing the most first): the total above is
    # exact whatever the number of namespaces.
    family = GaugeMetricFamily(
        "nri_sla_namespace_containers_unexported",
        "SLA containers of the namespace left "
        "without per-container series by the fair share of watch.metrics-containers",
        labels=["namespace"],
    )
    for ns in sorted(left_out, key=lambda ns: (-left_out[ns], ns))[: max(0, limit)]:
        family.add_metric([ns], left_out[ns])
    return family


def _families() -> dict[str, GaugeMetricFamily | CounterMetricFamily]:
    def gauge(name: str, doc: str, *extra: str) -> GaugeMetricFamily:
        return GaugeMetricFamily(P + name, doc, labels=[*LABELS, *extra])

    def counter(name: str, doc: str, *extra: str) -> CounterMetricFamily:
        return CounterMetricFamily(P + name, doc, labels=[*LABELS, *extra])

    return {
        f.name: f
        for f in (
            counter(
                "cpu_periods", "CPU bandwidth periods the container ran in (cpu.stat nr_periods)"
            ),
            counter(
                "cpu_throttled_periods",
                "Periods in which the container hit its CPU quota (cpu.stat nr_throttled)",
            ),
            counter("cpu_throttled_seconds", "Time the container was throttled"),
            gauge(
                "cpu_throttled_ratio", "Throttled periods / periods over the last watch interval"
            ),
            counter(
                "memory_events",
                "Memory limit events: high (reclaimed above "
                "memory.high), max (hit memory.max; v1 memory.failcnt), oom, oom_kill",
                "event",
            ),
            counter(
                "pressure_stalled_seconds",
                "PSI: time some (or all) of the container's "
                "tasks stalled on the resource (cgroup v2; rate() is the pressure)",
                "resource",
                "kind",
            ),
            gauge("cpu_limit_cores", "CPU bandwidth the SLA enforces (quota / period)"),
            gauge("memory_max_bytes", "memory.max the SLA enforces"),
            gauge("memory_high_bytes", "memory.high the SLA enforces (v1: the soft limit)"),
            gauge("cpuset_cpus", "CPUs in the cpuset the container should have"),
            gauge("gpus", "GPUs nri-sla placed the container on"),
            gauge(
                "drifted_settings",
                "Enforced values the kernel does not hold at the last watch pass",
            ),
        )
    }


def _add(families: dict[str, GaugeMetricFamily | CounterMetricFamily], c: ContainerReport) -> None:
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
