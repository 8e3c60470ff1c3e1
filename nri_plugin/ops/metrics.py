"""The plugin's Prometheus series and the sink the plugin reports to.

`Metrics` owns its own `CollectorRegistry` (not prometheus_client's global one) so that
several instances can live in one process (tests, the simulator) without clashing;
nri_plugin.ops.metrics_http serves it. `MetricsSink` is what the plugin reports through;
`NullMetrics` is the sink that keeps nothing, for a plugin run without metrics (the demo,
tests). `ServiceMetrics` adds what `nri-sla run`'s service reports (its connection and
registration); `RegistrationOnly` is that service's sink when it serves no metrics endpoint.

Label values are checked against short fixed vocabularies: a free-form label (an error
message, a pod name) would create one time series per value and blow up the registry.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from time import perf_counter
from typing import TYPE_CHECKING, Any, Protocol

from nri_plugin import __version__
from nri_plugin.errors import InvalidInput

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry, Counter, Gauge

NAMESPACE = "nri_sla"

# What happened to a container's SLA (see docs/operations.md).
OUTCOMES = ("enforced", "refused", "warned")
# Why, in one word: "ok" for a clean enforcement; the others name the failing stage.
# The `reason` of nri_plugin.errors.SlaFailure and its subclasses (a plan's shortfalls,
# "invalid" for bad input, "cgroup" for a write the kernel refused, "internal").
REASONS = (
    "ok",
    "policy",
    "limit",
    "invalid",
    "unsupported",
    "placement",
    "device",
    "budget",
    "conflict",
    "cgroup",
    "internal",
)
# Why Synchronize did not take a container's `applied` record (nri_plugin.plan.record,
# nri_plugin.core.nodestate): not written by nri-sla for that container, malformed,
# granting what the node config does not allow, or claiming what an earlier one holds.
RECORD_PROBLEMS = ("unauthenticated", "invalid", "conflict")
# What drifted (the drift watch, nri_plugin.plugin.watch): the cgroup controller of the
# setting, v1 blkio counted as io; and what became of a repair.
DRIFT_KINDS = ("cpu", "cpuset", "memory", "io")
REPAIR_OUTCOMES = ("repaired", "failed")
# Kubernetes Events (nri_plugin.ops.kube_sender): each result's series and its reasons.
# sent: created or patched (a repeat's count); failed: a request the API server did not
# take (no connection, no answer in time, a 4xx or 5xx, no token to read); dropped: an
# event that never reached it (the queue full, over the per-pod rate, its request failed).
EVENT_REASONS = {
    "sent": ("created", "patched"),
    "failed": ("unreachable", "timeout", "client_error", "server_error", "token"),
    "dropped": ("queue_full", "rate_limited", "failed"),
}
# nri_sla_gpu_healthy's value per GPU health state (alert on < 1); the states of
# nri_plugin.topology.gpu_health (tests/ops/test_metrics.py holds the two equal).
HEALTH_VALUES = {"healthy": 1, "unhealthy": 0, "unknown": -1}
_GPU_RE = re.compile(r"^[A-Za-z0-9:.\-]{1,80}$")
# Event labels are RPC / stage names such as CreateContainer or hook.
_EVENT_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,63}$")

# Latency buckets (seconds) around the runtime's 2 s request timeout: the interesting
# range is sub-millisecond to a few hundred ms.
REQUEST_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0)


class MetricsError(InvalidInput, ValueError):
    """A label value or server address that the metrics layer does not accept (an
    address is the operator's: exit status 2)."""


class GpuHealthState(Protocol):
    @property
    def state(self) -> str: ...


class ListedGpu(Protocol):
    """What nri_sla_gpu_healthy shows of a GPU (a nri_plugin.topology.gpus.Gpu)."""

    @property
    def ref(self) -> str: ...
    @property
    def index(self) -> int: ...
    @property
    def health(self) -> GpuHealthState: ...


class MetricsSink(Protocol):
    """What the plugin reports: `Metrics` keeps it as Prometheus series, `NullMetrics`
    drops it."""

    def record_decision(self, outcome: str, reason: str = "ok") -> None: ...
    def record_rejected(self, problem: str) -> None: ...
    def record_out_of_policy(self) -> None: ...
    def record_drift(self, kind: str) -> None: ...
    def record_repair(self, kind: str, outcome: str) -> None: ...
    def count_unenforced(self, containers: int = 1) -> None: ...
    def record_event(self, result: str, reason: str) -> None: ...
    def observe(self, event: str, seconds: float) -> None: ...
    def time(self, event: str) -> AbstractContextManager[None]: ...
    def set_gpus_in_use(self, n: int) -> None: ...
    def set_gpus_shared(self, n: int) -> None: ...
    def set_gpus_missing(self, n: int) -> None: ...
    def set_gpu_health(self, gpus: Iterable[ListedGpu]) -> None: ...
    def set_exclusive_cpus_in_use(self, n: int) -> None: ...


class NullMetrics:
    """The sink for a plugin without metrics: every report is dropped."""

    def record_decision(self, outcome: str, reason: str = "ok") -> None:
        pass

    def record_rejected(self, problem: str) -> None:
        pass

    def record_out_of_policy(self) -> None:
        pass

    def record_drift(self, kind: str) -> None:
        pass

    def record_repair(self, kind: str, outcome: str) -> None:
        pass

    def count_unenforced(self, containers: int = 1) -> None:
        pass

    def record_event(self, result: str, reason: str) -> None:
        pass

    def observe(self, event: str, seconds: float) -> None:
        pass

    def time(self, event: str) -> AbstractContextManager[None]:
        return nullcontext()

    def set_gpus_in_use(self, n: int) -> None:
        pass

    def set_gpus_shared(self, n: int) -> None:
        pass

    def set_gpus_missing(self, n: int) -> None:
        pass

    def set_gpu_health(self, gpus: Iterable[ListedGpu]) -> None:
        pass

    def set_exclusive_cpus_in_use(self, n: int) -> None:
        pass


# The sink of a plugin run without metrics.
NO_METRICS = NullMetrics()


class ServiceMetrics(MetricsSink, Protocol):
    """What `nri-sla run`'s service reports besides the plugin's sink: its connection to
    the runtime, and whether it is registered (the probe listener's /readyz)."""

    def set_connected(self, value: bool) -> None: ...
    def set_registered(self, value: bool) -> None: ...
    def inc_connect_attempts(self) -> None: ...
    def inc_reconnects(self) -> None: ...
    @property
    def is_registered(self) -> bool: ...


class RegistrationOnly(NullMetrics):
    """The service's sink when `nri-sla run` serves no metrics endpoint: no series (none
    could be read), so prometheus_client is never imported (4.3 MiB of the plugin's memory
    with what its package imports: http.server, urllib, ssl; docs/benchmarks.md "Plugin
    memory"); only the registration state the probe listener's /readyz reads."""

    def __init__(self) -> None:
        self._registered = False

    def set_connected(self, value: bool) -> None:
        if not value:  # as in Metrics: registration does not outlive its connection
            self._registered = False

    def set_registered(self, value: bool) -> None:
        self._registered = bool(value)

    def inc_connect_attempts(self) -> None:
        pass

    def inc_reconnects(self) -> None:
        pass

    @property
    def is_registered(self) -> bool:
        return self._registered


class Metrics:
    """The plugin's metrics, in a registry of their own (a `MetricsSink`)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        # prometheus_client is imported by the methods that make series: a plugin that
        # reports to NullMetrics (the demo, tests) never loads it.
        from prometheus_client import CollectorRegistry

        self.registry = registry if registry is not None else CollectorRegistry()
        self._decision_series()
        self._holding_series()
        self._connection_series()
        self._record_series()
        self._drift_series()
        self._event_series()
        self.build_info = self._gauge(
            "build_info", "Always 1; the version label says which nri-sla runs", ["version"]
        )
        self.build_info.labels(version=__version__).set(1)

    def _counter(self, name: str, help_text: str, labels: Iterable[str] = ()) -> Counter:
        from prometheus_client import Counter

        return Counter(name, help_text, labels, namespace=NAMESPACE, registry=self.registry)

    def _gauge(self, name: str, help_text: str, labels: Iterable[str] = ()) -> Gauge:
        from prometheus_client import Gauge

        return Gauge(name, help_text, labels, namespace=NAMESPACE, registry=self.registry)

    def _decision_series(self) -> None:
        from prometheus_client import Histogram

        self.decisions = self._counter(
            "decisions", "SLA decisions per container, by outcome and reason", ["outcome", "reason"]
        )
        self.request_seconds = Histogram(
            "request_seconds",
            "Time spent handling one runtime request or hook run",
            ["event"],
            namespace=NAMESPACE,
            registry=self.registry,
            buckets=REQUEST_BUCKETS,
        )
        # Label children by their label values: prometheus_client's labels() validates
        # and locks on every call, which costs the CreateContainer path a few µs each.
        self._decision_children: dict[tuple[str, str], Any] = {}
        self._latency_children: dict[str, Any] = {}
        # Pre-create the label sets of the usual outcomes so that dashboards and
        # `rate()` see zeros instead of missing series before the first decision.
        for outcome, reason in (
            ("enforced", "ok"),
            ("refused", "policy"),
            ("refused", "invalid"),
            ("warned", "unsupported"),
        ):
            self.decisions.labels(outcome=outcome, reason=reason)

    def _holding_series(self) -> None:
        self.gpus_in_use = self._gauge(
            "gpus_in_use", "GPUs that live containers were granted (every holder counts)"
        )
        self.gpus_shared = self._gauge(
            "gpus_shared",
            "GPUs (and MIG devices) that two or more live containers can "
            "open, replicas shared by design (time-slicing, MPS) left out: the kubelet's "
            "or an old record's doing, never nri-sla's",
        )
        self.gpus_missing = self._gauge(
            "gpus_missing",
            "GPUs containers hold that the inventory no longer lists "
            "(fallen off the bus, driver gone): never handed out again while held",
        )
        self.gpu_healthy = self._gauge(
            "gpu_healthy",
            "Each GPU's health: 1 healthy, 0 unhealthy (lost, critical XID), "
            "-1 unknown (NVML could not read it); only healthy GPUs go to new containers",
            ["gpu", "index"],
        )
        self._gpu_labels: set[tuple[str, str]] = set()  # the GPU series set last time
        self.exclusive_cpus_in_use = self._gauge(
            "exclusive_cpus_in_use", "CPUs currently given exclusively to containers"
        )

    def _connection_series(self) -> None:
        self.connected = self._gauge("connected", "1 while connected to the runtime's NRI socket")
        self.registered = self._gauge("registered", "1 while registered with the runtime (ready)")
        self._registered = False  # what /readyz answers from
        self.connect_attempts = self._counter(
            "connect_attempts",
            "Attempts to connect to the runtime's NRI socket (each "
            "retry counts; growing while `registered` is 0: the runtime is unreachable)",
        )
        self.reconnects = self._counter(
            "reconnects", "Connections to the runtime made after the first one"
        )

    def _record_series(self) -> None:
        self.records_rejected = self._counter(
            "records_rejected", "applied records Synchronize ignored, by problem", ["problem"]
        )
        for problem in RECORD_PROBLEMS:
            self.records_rejected.labels(problem=problem)
        self.records_out_of_policy = self._counter(
            "records_out_of_policy",
            "applied records Synchronize took although the node "
            "config no longer allows what they grant (the pod should be drained)",
        )
        self.unenforced = self._counter(
            "unenforced_containers",
            "Containers found at Synchronize that asked an SLA but "
            "were created while nri-sla was not registered (each counted once)",
        )

    def _drift_series(self) -> None:
        self.drift_detected = self._counter(
            "drift_detected",
            "Enforced values found changed behind nri-sla's back, once "
            "per change, by cgroup controller",
            ["kind"],
        )
        self.drift_repairs = self._counter(
            "drift_repairs",
            "Repairs of drifted values (hard mode), by controller and outcome",
            ["kind", "outcome"],
        )
        for kind in DRIFT_KINDS:
            self.drift_detected.labels(kind=kind)
            for outcome in REPAIR_OUTCOMES:
                self.drift_repairs.labels(kind=kind, outcome=outcome)

    def _event_series(self) -> None:
        label = {"sent": "verb", "failed": "reason", "dropped": "reason"}
        helps = {
            "sent": "Kubernetes Events the API server took, by verb (created, or a "
            "repeat's count patched)",
            "failed": "Requests for Kubernetes Events the API server did not take, by reason",
            "dropped": "Kubernetes Events never sent, by reason (queue full, over the "
            "per-pod rate, request failed)",
        }
        self.events = {
            result: self._counter(f"events_{result}", helps[result], [label[result]])
            for result in EVENT_REASONS
        }
        for result, reasons in EVENT_REASONS.items():
            for reason in reasons:
                self.events[result].labels(reason)

    # -- decisions and latency ---------------------------------------------------------
    def record_decision(self, outcome: str, reason: str = "ok") -> None:
        """Count one container decision. Raises MetricsError on an unknown label."""
        if outcome not in OUTCOMES:
            raise MetricsError(f"decision outcome {outcome!r} is not one of {', '.join(OUTCOMES)}")
        if reason not in REASONS:
            raise MetricsError(f"decision reason {reason!r} is not one of {', '.join(REASONS)}")
        child = self._decision_children.get((outcome, reason))
        if child is None:
            child = self._decision_children[outcome, reason] = self.decisions.labels(
                outcome=outcome, reason=reason
            )
        child.inc()

    def record_rejected(self, problem: str) -> None:
        """Count one ignored record. Raises MetricsError on an unknown problem."""
        if problem not in RECORD_PROBLEMS:
            raise MetricsError(
                f"record problem {problem!r} is not one of {', '.join(RECORD_PROBLEMS)}"
            )
        self.records_rejected.labels(problem=problem).inc()

    def record_out_of_policy(self) -> None:
        self.records_out_of_policy.inc()

    def record_drift(self, kind: str) -> None:
        """Count one drifted value. Raises MetricsError on an unknown kind."""
        _check(kind, DRIFT_KINDS, "drift kind")
        self.drift_detected.labels(kind=kind).inc()

    def record_repair(self, kind: str, outcome: str) -> None:
        """Count one repair of a drifted value (`repaired` or `failed`)."""
        _check(kind, DRIFT_KINDS, "drift kind")
        _check(outcome, REPAIR_OUTCOMES, "repair outcome")
        self.drift_repairs.labels(kind=kind, outcome=outcome).inc()

    def count_unenforced(self, containers: int = 1) -> None:
        """More containers found created without nri-sla's enforcement."""
        self.unenforced.inc(containers)

    def record_event(self, result: str, reason: str) -> None:
        """Count one Kubernetes Event sent, request failed or event dropped (called from
        the events thread: prometheus_client's counters lock)."""
        _check(result, tuple(EVENT_REASONS), "event result")
        _check(reason, EVENT_REASONS[result], f"event {result} reason")
        self.events[result].labels(reason).inc()

    def observe(self, event: str, seconds: float) -> None:
        """Record how long handling `event` (e.g. "CreateContainer") took."""
        if seconds < 0:
            raise MetricsError(f"duration for {event} is negative: {seconds}")
        child = self._latency_children.get(event)
        if child is None:  # a label value seen before was checked then
            _check_event(event)
            child = self._latency_children[event] = self.request_seconds.labels(event=event)
        child.observe(seconds)

    @contextmanager
    def time(self, event: str) -> Iterator[None]:
        """`with metrics.time("CreateContainer"): ...` observes the block's duration,
        also when it raises (a refused container still cost time)."""
        if event not in self._latency_children:
            _check_event(event)  # fail before running the block, not after it
        start = perf_counter()
        try:
            yield
        finally:
            self.observe(event, perf_counter() - start)

    # -- state ---------------------------------------------------------------------------
    def set_connected(self, value: bool) -> None:
        self.connected.set(1 if value else 0)
        if not value:
            # Registration does not outlive the connection it was made on.
            self.set_registered(False)

    def set_registered(self, value: bool) -> None:
        self._registered = bool(value)
        self.registered.set(1 if value else 0)

    def inc_connect_attempts(self) -> None:
        self.connect_attempts.inc()

    def inc_reconnects(self) -> None:
        self.reconnects.inc()

    def set_gpus_in_use(self, n: int) -> None:
        self.gpus_in_use.set(_count(n, "gpus_in_use"))

    def set_gpus_shared(self, n: int) -> None:
        self.gpus_shared.set(_count(n, "gpus_shared"))

    def set_gpus_missing(self, n: int) -> None:
        self.gpus_missing.set(_count(n, "gpus_missing"))

    def set_gpu_health(self, gpus: Iterable[ListedGpu]) -> None:
        """One nri_sla_gpu_healthy series per listed GPU (labels: its UUID, else its bus
        id; its index); series of GPUs no longer listed are removed."""
        labels = set()
        for g in gpus:
            key = (_gpu_label(g.ref), str(g.index))
            labels.add(key)
            self.gpu_healthy.labels(*key).set(HEALTH_VALUES[g.health.state])
        for gone in self._gpu_labels - labels:
            self.gpu_healthy.remove(*gone)
        self._gpu_labels = labels

    def set_exclusive_cpus_in_use(self, n: int) -> None:
        self.exclusive_cpus_in_use.set(_count(n, "exclusive_cpus_in_use"))

    @property
    def is_registered(self) -> bool:
        return self._registered

    def value(self, name: str, **labels: str) -> float | None:
        """A sample's current value, e.g. value("nri_sla_decisions_total",
        outcome="enforced", reason="ok"); None when the series does not exist."""
        return self.registry.get_sample_value(name, labels or None)


def _check(value: str, allowed: tuple[str, ...], what: str) -> None:
    if value not in allowed:
        raise MetricsError(f"{what} {value!r} is not one of {', '.join(allowed)}")


def _gpu_label(ref: str) -> str:
    # NVML's own strings, but still bounded: a label value is one time series
    if not _GPU_RE.match(ref):
        raise MetricsError(f"GPU label {ref!r} must be a UUID, PCI bus id or index")
    return ref


def _check_event(event: str) -> None:
    if not isinstance(event, str) or not _EVENT_RE.match(event):
        raise MetricsError(
            f"event label {event!r} must be an identifier like CreateContainer "
            "(letters, digits, _; at most 64)"
        )


def _count(n: int, what: str) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise MetricsError(f"{what} must be a non-negative integer, got {n!r}")
    return n
