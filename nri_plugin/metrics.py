"""Prometheus metrics and the health endpoints of the plugin service.

`Metrics` owns its own `CollectorRegistry` (not prometheus_client's global one) so that
several instances can live in one process (tests, the simulator) without clashing.
`start_http_server(metrics, address)` serves, from a daemon thread:

* `/metrics`  the registry in the Prometheus text format (or OpenMetrics when asked);
* `/healthz`  200 while the process serves HTTP (liveness);
* `/readyz`   200 once the plugin is registered with the runtime, else 503 (readiness).

Label values are checked against short fixed vocabularies: a free-form label (an error
message, a pod name) would create one time series per value and blow up the registry.

The server serves each connection in a thread, at most MAX_CONNECTIONS at once (one more
is answered 503 and closed at once), and ends any connection still open
CONNECTION_DEADLINE seconds after it was accepted, whatever it is doing: a client that
opens connections and sends nothing (or one byte at a time) holds a bounded number of
threads for a bounded time. That cap makes these /healthz and /readyz unfit for the
kubelet's probes (a client holding 16 connections makes them answer 503): probes go to
the probe listener, nri_plugin.health. A connection that fails by the peer's doing (a
reset before the answer) is counted into one rate-limited log line, never a traceback.
"""

from __future__ import annotations

import logging
import re
import socket
import sys
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from time import monotonic, perf_counter
from typing import Any, ClassVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import choose_encoder

from nri_plugin import __version__
from nri_plugin.peerlog import PeerErrorLog
from nri_plugin.topology.gpu_health import HEALTHY, UNHEALTHY, UNKNOWN
from nri_plugin.topology.gpus import Gpu

log = logging.getLogger("nri_sla.metrics")

NAMESPACE = "nri_sla"

# What happened to a container's SLA (see docs/operations.md).
OUTCOMES = ("enforced", "refused", "warned")
# Why, in one word: "ok" for a clean enforcement; the others name the failing stage.
# The `reason` of nri_plugin.errors.SlaFailure and its subclasses (a plan's shortfalls,
# "invalid" for bad input, "cgroup" for a write the kernel refused, "internal").
REASONS = ("ok", "policy", "limit", "invalid", "unsupported", "placement", "device",
           "budget", "conflict", "cgroup", "internal")
# Why Synchronize did not take a container's `applied` record (nri_plugin.plan.record,
# nri_plugin.core.nodestate): not written by nri-sla for that container, malformed,
# granting what the node config does not allow, or claiming what an earlier one holds.
RECORD_PROBLEMS = ("unauthenticated", "invalid", "conflict")
# What drifted (the drift watch, nri_plugin.plugin.watch): the cgroup controller of the
# setting, v1 blkio counted as io; and what became of a repair.
DRIFT_KINDS = ("cpu", "cpuset", "memory", "io")
REPAIR_OUTCOMES = ("repaired", "failed")
# nri_sla_gpu_healthy's value per GpuHealth state (alert on < 1).
HEALTH_VALUES = {HEALTHY: 1, UNHEALTHY: 0, UNKNOWN: -1}
_GPU_RE = re.compile(r"^[A-Za-z0-9:.\-]{1,80}$")
# Event labels are RPC / stage names such as CreateContainer or hook.
_EVENT_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,63}$")

# Latency buckets (seconds) around the runtime's 2 s request timeout: the interesting
# range is sub-millisecond to a few hundred ms.
REQUEST_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                   2.0, 5.0)

# HTTP connection bounds: a scrape or probe takes milliseconds and Prometheus and kubelet
# open a few connections at most, so these only ever bite on stuck or hostile clients.
MAX_CONNECTIONS = 16  # served at once (one thread each)
CONNECTION_DEADLINE = 10.0  # seconds from accept to close, request and answer included
IO_TIMEOUT = 5.0  # seconds one read or write may block
_BUSY_BODY = b"busy: too many connections; retry later\n"
_BUSY = (b"HTTP/1.0 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"
         b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(_BUSY_BODY), _BUSY_BODY))


class MetricsError(ValueError):
    """A label value or server address that the metrics layer does not accept."""


class Metrics:
    """The plugin's metrics, in a registry of their own."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        reg = self.registry
        self.decisions = Counter(
            "decisions", "SLA decisions per container, by outcome and reason",
            ["outcome", "reason"], namespace=NAMESPACE, registry=reg)
        self.request_seconds = Histogram(
            "request_seconds", "Time spent handling one runtime request or hook run",
            ["event"], namespace=NAMESPACE, registry=reg, buckets=REQUEST_BUCKETS)
        self.gpus_in_use = Gauge(
            "gpus_in_use", "GPUs that live containers were granted (every holder counts)",
            namespace=NAMESPACE, registry=reg)
        self.gpus_shared = Gauge(
            "gpus_shared", "GPUs (and MIG devices) that two or more live containers can "
            "open: the kubelet's or an old record's doing, never nri-sla's",
            namespace=NAMESPACE, registry=reg)
        self.gpus_missing = Gauge(
            "gpus_missing", "GPUs containers hold that the inventory no longer lists "
            "(fallen off the bus, driver gone): never handed out again while held",
            namespace=NAMESPACE, registry=reg)
        self.gpu_healthy = Gauge(
            "gpu_healthy", "Each GPU's health: 1 healthy, 0 unhealthy (lost, critical XID), "
            "-1 unknown (NVML could not read it); only healthy GPUs go to new containers",
            ["gpu", "index"], namespace=NAMESPACE, registry=reg)
        self._gpu_labels: set[tuple[str, str]] = set()  # the GPU series set last time
        self.exclusive_cpus_in_use = Gauge(
            "exclusive_cpus_in_use", "CPUs currently given exclusively to containers",
            namespace=NAMESPACE, registry=reg)
        self.connected = Gauge(
            "connected", "1 while connected to the runtime's NRI socket",
            namespace=NAMESPACE, registry=reg)
        self.registered = Gauge(
            "registered", "1 while registered with the runtime (ready)",
            namespace=NAMESPACE, registry=reg)
        self.connect_attempts = Counter(
            "connect_attempts", "Attempts to connect to the runtime's NRI socket (each "
            "retry counts; growing while `registered` is 0: the runtime is unreachable)",
            namespace=NAMESPACE, registry=reg)
        self.reconnects = Counter(
            "reconnects", "Connections to the runtime made after the first one",
            namespace=NAMESPACE, registry=reg)
        self.records_rejected = Counter(
            "records_rejected", "applied records Synchronize ignored, by problem",
            ["problem"], namespace=NAMESPACE, registry=reg)
        self.records_out_of_policy = Counter(
            "records_out_of_policy", "applied records Synchronize took although the node "
            "config no longer allows what they grant (the pod should be drained)",
            namespace=NAMESPACE, registry=reg)
        self.drift_detected = Counter(
            "drift_detected", "Enforced values found changed behind nri-sla's back, once "
            "per change, by cgroup controller", ["kind"], namespace=NAMESPACE, registry=reg)
        self.drift_repairs = Counter(
            "drift_repairs", "Repairs of drifted values (hard mode), by controller and "
            "outcome", ["kind", "outcome"], namespace=NAMESPACE, registry=reg)
        self.unenforced = Counter(
            "unenforced_containers", "Containers found at Synchronize that asked an SLA but "
            "were created while nri-sla was not registered (each counted once)",
            namespace=NAMESPACE, registry=reg)
        self.build_info = Gauge(
            "build_info", "Always 1; the version label says which nri-sla runs",
            ["version"], namespace=NAMESPACE, registry=reg)
        self.build_info.labels(version=__version__).set(1)
        self._registered = False  # what /readyz answers from
        # Label children by their label values: prometheus_client's labels() validates
        # and locks on every call, which costs the CreateContainer path a few µs each.
        self._decision_children: dict[tuple[str, str], Any] = {}
        self._latency_children: dict[str, Any] = {}
        # Pre-create the label sets of the usual outcomes so that dashboards and
        # `rate()` see zeros instead of missing series before the first decision.
        for outcome, reason in (("enforced", "ok"), ("refused", "policy"),
                                ("refused", "invalid"), ("warned", "unsupported")):
            self.decisions.labels(outcome=outcome, reason=reason)
        for problem in RECORD_PROBLEMS:
            self.records_rejected.labels(problem=problem)
        for kind in DRIFT_KINDS:
            self.drift_detected.labels(kind=kind)
            for outcome in REPAIR_OUTCOMES:
                self.drift_repairs.labels(kind=kind, outcome=outcome)

    # -- decisions and latency ---------------------------------------------------------
    def record_decision(self, outcome: str, reason: str = "ok") -> None:
        """Count one container decision. Raises MetricsError on an unknown label."""
        if outcome not in OUTCOMES:
            raise MetricsError(
                f"decision outcome {outcome!r} is not one of {', '.join(OUTCOMES)}")
        if reason not in REASONS:
            raise MetricsError(
                f"decision reason {reason!r} is not one of {', '.join(REASONS)}")
        child = self._decision_children.get((outcome, reason))
        if child is None:
            child = self._decision_children[outcome, reason] = self.decisions.labels(
                outcome=outcome, reason=reason)
        child.inc()

    def record_rejected(self, problem: str) -> None:
        """Count one ignored record. Raises MetricsError on an unknown problem."""
        if problem not in RECORD_PROBLEMS:
            raise MetricsError(
                f"record problem {problem!r} is not one of {', '.join(RECORD_PROBLEMS)}")
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

    def set_gpu_health(self, gpus: Iterable[Gpu]) -> None:
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
            "(letters, digits, _; at most 64)")


def _count(n: int, what: str) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise MetricsError(f"{what} must be a non-negative integer, got {n!r}")
    return n


# -- HTTP ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class ListenAddress:
    host: str
    port: int


def parse_address(address: str, what: str = "metrics address") -> ListenAddress | None:
    """Parse a listen address (`what` names it in errors): "HOST:PORT", ":PORT" (all
    interfaces), "[::1]:PORT". "" disables the server (None). Port 0 picks a free port
    (tests)."""
    address = address.strip()
    if not address:
        return None
    host, sep, port_text = address.rpartition(":")
    if not sep:
        raise MetricsError(
            f"{what} {address!r} must be HOST:PORT, :PORT or [IPv6]:PORT "
            "(\"\" disables the server)")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise MetricsError(f"{what} {address!r}: put an IPv6 host in brackets, "
                           "e.g. [::1]:9477")
    if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise MetricsError(f"{what} {address!r}: port must be 0..65535")
    return ListenAddress(host=host or "0.0.0.0", port=int(port_text))


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    # Connections past the cap queue in the kernel (no thread, no memory of ours) until
    # accepted and answered 503; socketserver's default of 5 would drop their SYNs.
    request_queue_size = 64

    def __init__(self, listen: ListenAddress, metrics: Metrics, *,
                 max_connections: int = MAX_CONNECTIONS,
                 deadline: float = CONNECTION_DEADLINE) -> None:
        if ":" in listen.host:
            self.address_family = socket.AF_INET6
        self.metrics = metrics
        self.max_connections = max_connections
        self.deadline = deadline
        self._lock = threading.Lock()
        self._open: dict[socket.socket, float] = {}  # served connection -> its deadline
        self.peer_errors = PeerErrorLog(log, "metrics")
        super().__init__((listen.host, listen.port), _Handler)

    def handle_error(self, request, client_address) -> None:  # type: ignore[override]
        # socketserver's default prints a traceback to stderr for every connection whose
        # handler raised; a peer that resets before the answer makes that happen at will.
        # One rate-limited structured line instead (nri_plugin.peerlog).
        exc = sys.exc_info()[1]
        if exc is not None:
            self.peer_errors.note(exc)

    def process_request(self, request, client_address) -> None:  # type: ignore[override]
        with self._lock:
            full = len(self._open) >= self.max_connections
            if not full:
                self._open[request] = monotonic() + self.deadline
        if full:
            with suppress(OSError):
                request.setblocking(False)  # never wait on this client
                request.send(_BUSY)
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)  # starts the thread
        except BaseException:
            with self._lock:  # no thread will free the slot
                self._open.pop(request, None)
            raise

    def process_request_thread(self, request, client_address) -> None:  # type: ignore[override]
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self._lock:
                self._open.pop(request, None)

    def service_actions(self) -> None:
        # Runs in serve_forever's loop between polls: ends connections past their
        # deadline. shutdown() wakes a thread blocked reading or writing them; its handler
        # then finishes and the thread ends.
        self.peer_errors.flush()
        now = monotonic()
        with self._lock:
            late = [sock for sock, deadline in self._open.items() if deadline <= now]
        for sock in late:
            with suppress(OSError):  # closed meanwhile
                sock.shutdown(socket.SHUT_RDWR)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    server_version = f"nri-sla/{__version__}"
    timeout = IO_TIMEOUT  # per read or write; the server's deadline bounds the total
    _PLAIN: ClassVar[str] = "text/plain; charset=utf-8"

    def do_GET(self) -> None:  # http.server's naming
        self._serve(head=False)

    def do_HEAD(self) -> None:
        self._serve(head=True)

    def _serve(self, head: bool) -> None:
        path = self.path.split("?", 1)[0]
        metrics = self.server.metrics
        if path == "/metrics":
            encoder, content_type = choose_encoder(self.headers.get("Accept", ""))
            self._reply(200, content_type, encoder(metrics.registry), head)
        elif path == "/healthz":
            self._reply(200, self._PLAIN, b"ok\n", head)
        elif path == "/readyz":
            if metrics.is_registered:
                self._reply(200, self._PLAIN, b"ready: registered with the runtime\n", head)
            else:
                self._reply(503, self._PLAIN,
                            b"not ready: not registered with the runtime\n", head)
        else:
            self._reply(404, self._PLAIN, b"not found: try /metrics, /healthz, /readyz\n",
                        head)

    def _reply(self, code: int, content_type: str, body: bytes, head: bool) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        # Scrapes every few seconds would drown the decision log; stay quiet.
        pass


class MetricsServer:
    """A running metrics/health HTTP server; `close()` stops it."""

    def __init__(self, server: _Server) -> None:
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, name="nri-sla-metrics",
                                        kwargs={"poll_interval": 0.2}, daemon=True)
        self._thread.start()

    @property
    def host(self) -> str:
        return str(self._server.server_address[0])

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def start_http_server(metrics: Metrics, address: str, *,
                      max_connections: int = MAX_CONNECTIONS,
                      deadline: float = CONNECTION_DEADLINE) -> MetricsServer | None:
    """Serve /metrics, /healthz and /readyz on `address`; "" disables (returns None).
    Raises MetricsError for a malformed address and OSError when it cannot bind."""
    listen = parse_address(address)
    if listen is None:
        return None
    return MetricsServer(_Server(listen, metrics, max_connections=max_connections,
                                 deadline=deadline))
