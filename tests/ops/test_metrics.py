"""nri_plugin.ops.metrics (the registry's contents) and nri_plugin.ops.metrics_http (the
HTTP endpoints, over real sockets)."""

import logging
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from nri_plugin import __version__
from nri_plugin.ops.listenaddress import ListenAddress, parse_address
from nri_plugin.ops.metrics import Metrics, MetricsError
from nri_plugin.ops.metrics_http import start_http_server
from tests.support.http_flood import resetting_requests


def _get(port: int, path: str, accept: str = "") -> tuple[int, str, str]:
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", headers={"Accept": accept} if accept else {}
    )
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, resp.headers["Content-Type"], resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["Content-Type"], exc.read().decode()


@pytest.fixture
def metrics():
    return Metrics()


@pytest.fixture
def server(metrics):
    srv = start_http_server(metrics, "127.0.0.1:0")
    assert srv is not None
    yield srv
    srv.close()


def test_decisions_counted_by_outcome_and_reason(metrics):
    metrics.record_decision("enforced", "ok")
    metrics.record_decision("enforced", "ok")
    metrics.record_decision("refused", "placement")
    assert metrics.value("nri_sla_decisions_total", outcome="enforced", reason="ok") == 2
    assert metrics.value("nri_sla_decisions_total", outcome="refused", reason="placement") == 1
    # pre-created series read 0 before any decision of that kind
    assert metrics.value("nri_sla_decisions_total", outcome="warned", reason="unsupported") == 0


@pytest.mark.parametrize(
    ("outcome", "reason", "needle"),
    [
        ("accepted", "ok", "enforced, refused, warned"),
        ("refused", "memory.high (12Gi) must be below", "ok, policy, limit, invalid"),
    ],
)
def test_unknown_labels_rejected_with_allowed_values(metrics, outcome, reason, needle):
    with pytest.raises(MetricsError, match=needle):
        metrics.record_decision(outcome, reason)


def test_observe_and_timer(metrics):
    metrics.observe("CreateContainer", 0.003)
    with metrics.time("Synchronize"):
        pass
    with pytest.raises(RuntimeError), metrics.time("CreateContainer"):
        raise RuntimeError("handler failed")  # still observed
    assert metrics.value("nri_sla_request_seconds_count", event="CreateContainer") == 2
    assert metrics.value("nri_sla_request_seconds_count", event="Synchronize") == 1
    assert metrics.value("nri_sla_request_seconds_bucket", event="CreateContainer", le="0.005") >= 1
    with pytest.raises(MetricsError, match="identifier"):
        metrics.observe("pod default/web", 0.1)
    with pytest.raises(MetricsError, match="identifier"), metrics.time("bad label!"):
        raise AssertionError("block must not run with a bad label")


def test_state_gauges(metrics):
    metrics.set_connected(True)
    metrics.set_registered(True)
    metrics.inc_reconnects()
    metrics.set_gpus_in_use(3)
    metrics.set_gpus_shared(1)
    metrics.set_exclusive_cpus_in_use(8)
    assert metrics.value("nri_sla_gpus_shared") == 1
    assert metrics.value("nri_sla_connected") == 1
    assert metrics.value("nri_sla_registered") == 1
    assert metrics.value("nri_sla_reconnects_total") == 1
    assert metrics.value("nri_sla_gpus_in_use") == 3
    assert metrics.value("nri_sla_exclusive_cpus_in_use") == 8
    metrics.set_connected(False)  # losing the connection drops registration too
    assert metrics.value("nri_sla_registered") == 0 and not metrics.is_registered
    for bad in (-1, 1.5, True):
        with pytest.raises(MetricsError, match="non-negative integer"):
            metrics.set_gpus_in_use(bad)
        with pytest.raises(MetricsError, match="non-negative integer"):
            metrics.set_gpus_shared(bad)


def test_instances_do_not_share_a_registry():
    a, b = Metrics(), Metrics()
    a.record_decision("enforced")
    assert b.value("nri_sla_decisions_total", outcome="enforced", reason="ok") == 0


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("127.0.0.1:9477", ListenAddress("127.0.0.1", 9477)),
        (":9477", ListenAddress("0.0.0.0", 9477)),
        ("[::1]:0", ListenAddress("::1", 0)),
        ("", None),
    ],
)
def test_parse_address(text, want):
    assert parse_address(text) == want


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("9477", "HOST:PORT"),
        ("localhost:http", "port must be"),
        ("::1:9477", "brackets"),
        ("127.0.0.1:70000", "port must be"),
    ],
)
def test_parse_address_errors(text, needle):
    with pytest.raises(MetricsError, match=needle):
        parse_address(text)


def test_empty_address_disables_server(metrics):
    assert start_http_server(metrics, "") is None


def test_scrape_over_http(metrics, server):
    metrics.record_decision("warned", "unsupported")
    metrics.observe("CreateContainer", 0.002)
    metrics.set_gpus_in_use(2)
    status, ctype, body = _get(server.port, "/metrics")
    assert status == 200 and ctype.startswith("text/plain; version=0.0.4")
    families = {f.name: f for f in text_string_to_metric_families(body)}
    for name in (
        "nri_sla_decisions",
        "nri_sla_request_seconds",
        "nri_sla_gpus_in_use",
        "nri_sla_exclusive_cpus_in_use",
        "nri_sla_connected",
        "nri_sla_registered",
        "nri_sla_reconnects",
        "nri_sla_build_info",
    ):
        assert name in families, name
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in families.values()
        for s in f.samples
    }
    key = ("nri_sla_decisions_total", (("outcome", "warned"), ("reason", "unsupported")))
    assert samples[key] == 1
    assert samples[("nri_sla_gpus_in_use", ())] == 2
    assert samples[("nri_sla_build_info", (("version", __version__),))] == 1


def test_openmetrics_when_asked(server):
    status, ctype, body = _get(
        server.port, "/metrics", accept="application/openmetrics-text; version=1.0.0"
    )
    assert status == 200 and ctype.startswith("application/openmetrics-text")
    assert body.rstrip().endswith("# EOF")


def test_health_and_readiness_follow_registration(metrics, server):
    assert _get(server.port, "/healthz")[0] == 200
    status, _, body = _get(server.port, "/readyz")
    assert status == 503 and "not registered" in body
    metrics.set_registered(True)
    assert _get(server.port, "/readyz")[0] == 200
    metrics.set_connected(False)
    assert _get(server.port, "/readyz")[0] == 503
    assert _get(server.port, "/nope")[0] == 404


def test_head_and_concurrent_scrapes(server):
    req = urllib.request.Request(f"http://127.0.0.1:{server.port}/healthz", method="HEAD")
    with urllib.request.urlopen(req, timeout=5) as resp:
        assert resp.status == 200 and resp.read() == b""
    codes: list[int] = []
    threads = [
        threading.Thread(target=lambda: codes.append(_get(server.port, "/metrics")[0]))
        for _ in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert codes == [200] * 8


@pytest.mark.slow
def test_half_open_connections_are_capped_and_cut_at_the_deadline(metrics):
    """Connections that send nothing hold at most max_connections threads, for at most
    the deadline; the ones over the cap are told 503 at once; then the server serves."""
    before = threading.active_count()
    with start_http_server(metrics, "127.0.0.1:0", max_connections=4, deadline=1.0) as srv:
        idle = [socket.create_connection(("127.0.0.1", srv.port)) for _ in range(40)]
        start = time.monotonic()
        answers = []
        for sock in idle:
            sock.settimeout(5)
            answers.append(sock.recv(4096))  # 503 now, or EOF at the deadline
            assert threading.active_count() <= before + 1 + 4  # the server's + 4
        elapsed = time.monotonic() - start
        busy = [a for a in answers if a.startswith(b"HTTP/1.0 503 ")]
        assert len(busy) == 36, answers
        assert all(a.endswith(b"too many connections; retry later\n") for a in busy)
        assert answers.count(b"") == 4  # the served ones: cut at the deadline
        assert elapsed < 6.0, f"{elapsed:.2f}s"  # 1 s deadline; without one: forever
        for sock in idle:
            sock.close()
        # the cut connections' threads free their slots a moment after the EOF
        codes = [_get(srv.port, "/healthz")[0]]
        while codes[-1] != 200 and len(codes) < 20:
            time.sleep(0.05)
            codes.append(_get(srv.port, "/healthz")[0])
        assert codes[-1] == 200, codes
        # one byte at a time keeps each read under the 5 s timeout; the deadline cuts it
        with socket.create_connection(("127.0.0.1", srv.port)) as slow:
            slow.sendall(b"GET /healthz HTTP/1.0\r\nX-Slow: ")
            start = time.monotonic()
            slow.settimeout(0.1)
            while time.monotonic() - start < 10:
                try:
                    slow.sendall(b"a")
                    if slow.recv(1) == b"":
                        break
                except TimeoutError:
                    continue
                except OSError:
                    break
            assert time.monotonic() - start < 6.0  # 1 s deadline; without: minutes
    for _ in range(50):
        if threading.active_count() <= before:
            break
        time.sleep(0.05)
    assert threading.active_count() <= before


def test_default_connection_bounds(metrics):
    from nri_plugin.ops import metrics_http

    assert (
        metrics_http.MAX_CONNECTIONS,
        metrics_http.CONNECTION_DEADLINE,
        metrics_http.IO_TIMEOUT,
    ) == (16, 10.0, 5.0)
    with start_http_server(metrics, "127.0.0.1:0") as srv:
        assert srv._server.max_connections == 16 and srv._server.deadline == 10.0


def test_close_frees_the_port(metrics):
    srv = start_http_server(metrics, "127.0.0.1:0")
    port = srv.port
    srv.close()
    with socket.socket() as s, pytest.raises(OSError):
        s.settimeout(1)
        s.connect(("127.0.0.1", port))


def test_bind_conflict_raises_oserror(metrics, server):
    with pytest.raises(OSError):
        start_http_server(metrics, f"127.0.0.1:{server.port}")


def test_every_failure_reason_is_a_metric_label():
    # A failure whose reason the metric does not know would make the plugin's
    # record_decision raise MetricsError before the runtime got its answer.
    import nri_plugin.config.loader
    import nri_plugin.enforce.errors
    import nri_plugin.hook.values
    import nri_plugin.plan.model
    import nri_plugin.plan.record
    import nri_plugin.sla.errors  # noqa: F401 - every SlaFailure subclass is loaded
    from nri_plugin.errors import SlaFailure
    from nri_plugin.ops.metrics import REASONS

    seen, todo = [], [SlaFailure]
    while todo:
        cls = todo.pop()
        seen.append(cls)
        todo += cls.__subclasses__()
    assert len(seen) > 10
    # the kindless bases (SlaFailure, EnforceError) are never raised: no reason either
    assert {
        cls.__name__: cls.reason
        for cls in seen
        if hasattr(cls, "kind") and cls.reason not in REASONS
    } == {}


def test_gpu_health_series_follow_the_listed_gpus():
    from nri_plugin.ops.metrics import HEALTH_VALUES
    from nri_plugin.topology.gpu_health import STATES, unhealthy, unknown
    from nri_plugin.topology.gpus import Gpu

    m = Metrics()
    gpus = [
        Gpu(0, "GPU-a", "0000:07:00.0", 0),
        Gpu(1, "", "0000:0f:00.0", 0, health=unhealthy("XID 79")),
        Gpu(2, "GPU-c", "0000:47:00.0", 1, health=unknown("NVML: error 999")),
    ]
    assert sorted(HEALTH_VALUES) == sorted(STATES)  # every state has its value
    m.set_gpu_health(gpus)
    value = "nri_sla_gpu_healthy"
    assert [m.value(value, gpu=g.ref, index=str(g.index)) for g in gpus] == [1.0, 0.0, -1.0]
    m.set_gpu_health(gpus[:1])  # two GPUs gone from the inventory: their series too
    assert m.value(value, gpu="0000:0f:00.0", index="1") is None
    with pytest.raises(MetricsError, match="GPU label"):
        m.set_gpu_health([Gpu(0, 'GPU-"}\n', "", 0)])


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.mark.slow
def test_resetting_peers_give_one_rate_limited_line_and_no_traceback(metrics, capfd):
    """200 connections that send a request and reset (SO_LINGER 0) before the
    answer wrote 5,307 stderr lines with 197 tracebacks (socketserver's handle_error).
    Now: nothing on stderr, one structured line at once, the rest counted into the next
    line a minute later."""
    handler = _Records()
    logger = logging.getLogger("nri_sla.metrics")
    logger.addHandler(handler)
    now = [1000.0]
    try:
        with start_http_server(metrics, "127.0.0.1:0") as srv:
            peers = srv._server.peer_errors
            peers.clock = lambda: now[0]
            resetting_requests("127.0.0.1", srv.port, 200)
            deadline = time.monotonic() + 10
            while peers.total < 150 and time.monotonic() < deadline:
                time.sleep(0.05)  # the handler threads meet the resets
            time.sleep(0.5)
            lines_in_the_minute = len(handler.records)
            now[0] += 60.0  # a minute later: the server loop's flush writes the count
            deadline = time.monotonic() + 5
            while len(handler.records) < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert _get(srv.port, "/healthz")[0] == 200  # and it still serves
    finally:
        logger.removeHandler(handler)
    out, err = capfd.readouterr()
    assert err == "" and "Traceback" not in out
    assert lines_in_the_minute == 1
    first, second = handler.records
    assert first.getMessage() == "HTTP connections failed"
    assert first.fields["count"] == 1 and first.fields["listener"] == "metrics"
    assert first.fields["count"] + second.fields["count"] == peers.total >= 150
    kinds = dict(k.split(":") for k in second.fields["errors"].split(","))
    assert set(kinds) <= {"ConnectionResetError", "BrokenPipeError", "TimeoutError"}
    print(
        f"evidence: 200 resetting connections: {peers.total} failed, 2 log lines "
        f"({first.fields['errors']}; {second.fields['errors']}), 0 bytes on stderr"
    )


def test_peer_error_log_writes_once_per_interval():
    from nri_plugin.ops.peerlog import PeerErrorLog

    handler = _Records()
    logger = logging.getLogger("nri_sla.test_peerlog")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    now = [0.0]
    peers = PeerErrorLog(logger, "x", interval=60, clock=lambda: now[0])
    for _ in range(1000):
        peers.note(ConnectionResetError(104, "reset"))
    peers.flush()
    assert [r.fields["count"] for r in handler.records] == [1]
    now[0] = 59.9
    peers.note(BrokenPipeError(32, "pipe"))
    assert len(handler.records) == 1
    now[0] = 60.0
    peers.flush()
    peers.flush()  # nothing pending: no line
    assert [r.fields["count"] for r in handler.records] == [1, 1000]
    assert handler.records[1].fields["errors"] == "BrokenPipeError:1,ConnectionResetError:999"
    assert peers.total == 1001


def test_operations_doc_lists_exactly_the_exported_metrics(metrics):
    """docs/operations.md's metric table names every metric the plugin exports, the
    per-container collector's included, and nothing else."""
    import re

    from nri_plugin.plugin.container_metrics import ContainerCollector
    from nri_plugin.plugin.report import NodeReport

    families = [
        *metrics.registry.collect(),
        *ContainerCollector(lambda: NodeReport(0.0, 30.0), 10).describe(),
    ]
    exported = {f.name + ("_total" if f.type == "counter" else "") for f in families}
    doc = (Path(__file__).parents[2] / "docs" / "operations.md").read_text()
    section = doc.split("\n## Metrics\n", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1] for line in section.splitlines() if line.startswith("| `nri_sla_")]
    documented = {name for row in rows for name in re.findall(r"`(nri_sla_[a-z_]+)`", row)}
    assert documented == exported
    # "exactly these, and beside each counter and histogram series its `_created`": every
    # sample of the node-wide exposition is a documented metric's
    from prometheus_client import generate_latest

    assert "the `_created` series" in section
    suffixes = {
        "counter": ("_total", "_created"),
        "histogram": ("_bucket", "_sum", "_count", "_created"),
        "gauge": ("",),
    }
    for family in metrics.registry.collect():
        for sample in family.samples:
            assert sample.name in {family.name + s for s in suffixes[family.type]}, sample.name
    assert b"_created" in generate_latest(metrics.registry)


def test_the_null_sink_takes_every_report_the_registry_takes():
    # A plugin without metrics reports to NullMetrics: a method missing there, or taking
    # other arguments, would fail only on that path (the demo, tests without metrics).
    import inspect

    from nri_plugin.ops.metrics import MetricsSink, NullMetrics

    reports = sorted(name for name in vars(MetricsSink) if not name.startswith("_"))
    assert "record_decision" in reports and "time" in reports
    for name in reports:
        wanted = list(inspect.signature(getattr(MetricsSink, name)).parameters.values())
        for sink in (Metrics, NullMetrics):
            got = list(inspect.signature(getattr(sink, name)).parameters.values())
            assert got == wanted, (sink.__name__, name)
    null = NullMetrics()
    null.record_decision("enforced", "ok")
    with null.time("CreateContainer"):
        null.observe("CreateContainer", 0.001)


def test_a_plugin_without_metrics_does_not_load_prometheus_client():
    # The null sink costs nothing: prometheus_client (about 2 MiB) comes with Metrics().
    code = (
        "import sys; from nri_plugin.plugin import SlaPlugin; "
        "from nri_plugin.ops.metrics import NO_METRICS; "
        "print('prometheus_client' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    ).stdout
    assert out.strip() == "False"


def test_the_registration_only_sink_keeps_what_the_probes_read():
    # `nri-sla run` without a metrics endpoint reports to RegistrationOnly: every report
    # the service makes must be taken as Metrics takes it, and /readyz must follow the
    # registration as it does with Metrics (registered, then the connection lost).
    import inspect

    from nri_plugin.ops.metrics import RegistrationOnly, ServiceMetrics

    reports = sorted(name for name in vars(ServiceMetrics) if not name.startswith("_"))
    assert "set_registered" in reports and "is_registered" in reports
    for name in reports:
        if name == "is_registered":
            continue
        wanted = list(inspect.signature(getattr(ServiceMetrics, name)).parameters.values())
        for sink in (Metrics, RegistrationOnly):
            got = list(inspect.signature(getattr(sink, name)).parameters.values())
            assert got == wanted, (sink.__name__, name)
    for sink in (Metrics(), RegistrationOnly()):
        sink.inc_connect_attempts()
        sink.set_connected(True)
        assert not sink.is_registered
        sink.set_registered(True)
        assert sink.is_registered
        sink.inc_reconnects()
        sink.set_connected(False)
        assert not sink.is_registered
