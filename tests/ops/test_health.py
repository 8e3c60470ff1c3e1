"""nri_plugin.ops.health: the probe listener answers the kubelet's probes whatever a client
does to the metrics port or to the listener itself, over real sockets."""

from __future__ import annotations

import logging
import socket
import statistics
import time

import pytest

from nri_plugin.config.loader import parse_config
from nri_plugin.ops.health import HEAD_DEADLINE, MAX_HEAD, MAX_PENDING, answer, start_health_server
from nri_plugin.ops.metrics import Metrics, MetricsError
from nri_plugin.ops.metrics_http import start_http_server
from tests.support.http_flood import HeldConnections, probe, resetting_requests

LOCAL = "127.0.0.1"


@pytest.fixture
def metrics() -> Metrics:
    return Metrics()


def _probes(port: int, seconds: float, path: str = "/healthz") -> list:
    """Kubelet-style probes (1 s timeout each) back to back for `seconds`."""
    results = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        results.append(probe(LOCAL, port, path, timeout=1.0))
        time.sleep(0.05)
    return results


def _evidence(what: str, results: list) -> None:
    took = [r.seconds * 1000 for r in results]
    print(
        f"evidence: {what}: {len(results)} probes, statuses "
        f"{sorted({r.status for r in results}, key=str)}, latency median "
        f"{statistics.median(took):.1f} ms, max {max(took):.1f} ms"
    )


def test_the_metrics_port_health_is_starved_by_16_held_connections(metrics):
    """The attack, reproduced: 16 silent connections, re-opened as soon as one
    drops (under 10 per second), and /healthz on the metrics port answers 503 busy. The
    cap stays for scrapes; probes go to the probe listener (next tests)."""
    with (
        start_http_server(metrics, f"{LOCAL}:0") as srv,
        HeldConnections(LOCAL, srv.port, 16, rate=9) as flood,
    ):
        results = _probes(srv.port, 1.5)
        assert flood.opened >= 16
    assert results and all(r.status == 503 for r in results), results


@pytest.mark.slow
def test_probes_answer_200_while_the_metrics_port_is_flooded(metrics):
    with (
        start_http_server(metrics, f"{LOCAL}:0") as srv,
        start_health_server(f"{LOCAL}:0", lambda: metrics.is_registered) as health,
        HeldConnections(LOCAL, srv.port, 16, rate=9),
    ):
        assert probe(LOCAL, srv.port).status == 503  # the flood is on
        live = _probes(health.port, 2.0)
        ready = _probes(health.port, 0.5, "/readyz")
        metrics.set_registered(True)
        ready_after = _probes(health.port, 0.5, "/readyz")
    _evidence("probe listener, metrics port flooded by 16 held connections", live)
    assert all(r.status == 200 for r in live), live
    assert max(r.seconds for r in live) < 0.5
    assert {r.status for r in ready} == {503} and {r.status for r in ready_after} == {200}


@pytest.mark.slow
@pytest.mark.parametrize(
    "held,rate",
    [(16, 9.0), (MAX_PENDING * 2, None)],
    ids=["16-held-9-per-s", "512-held-unthrottled"],
)
def test_probes_answer_200_while_the_probe_listener_itself_is_flooded(metrics, held, rate):
    """Held-open connections on the probe listener push each other out (oldest first) and
    expire after HEAD_DEADLINE; a probe sends its request at once and is answered."""
    with (
        start_health_server(f"{LOCAL}:0", lambda: True) as health,
        HeldConnections(LOCAL, health.port, held, rate=rate) as flood,
    ):
        results = _probes(health.port, 3.0)
        assert health.pending <= MAX_PENDING
        opened = flood.opened
    _evidence(f"probe listener flooded by {held} held connections ({opened} opened)", results)
    assert len(results) >= 10
    assert all(r.status == 200 for r in results), [r for r in results if r.status != 200]
    assert max(r.seconds for r in results) < 1.0


def test_silent_and_trickling_connections_are_cut_at_the_head_deadline():
    with start_health_server(f"{LOCAL}:0", lambda: True, deadline=0.5) as health:
        with (
            socket.create_connection((LOCAL, health.port)) as silent,
            socket.create_connection((LOCAL, health.port)) as slow,
        ):
            silent.settimeout(5)
            slow.settimeout(0.05)
            start = time.monotonic()
            slow.sendall(b"GET /healthz HTTP/1.1\r\nX: ")
            closed = False
            while time.monotonic() - start < 5 and not closed:
                try:
                    slow.sendall(b"a")
                    closed = slow.recv(1) == b""
                except TimeoutError:
                    continue
                except OSError:
                    closed = True
            assert closed and time.monotonic() - start < 2.0
            assert silent.recv(1) == b""  # EOF: no answer for no request
        assert probe(LOCAL, health.port).status == 200


def test_answers_and_errors():
    assert answer(b"GET /healthz HTTP/1.1\r\n\r\n", False).startswith(b"HTTP/1.1 200 OK\r\n")
    assert answer(b"GET /readyz?x=1 HTTP/1.1\r\n\r\n", False).startswith(b"HTTP/1.1 503 ")
    assert answer(b"GET /readyz HTTP/1.0\r\n\r\n", True).endswith(
        b"\r\n\r\nready: registered with the runtime\n"
    )
    head = answer(b"HEAD /healthz HTTP/1.1\r\n\r\n", True)
    assert head.startswith(b"HTTP/1.1 200 ") and head.endswith(b"\r\n\r\n")
    assert b"Content-Length: 3\r\n" in head
    assert answer(b"GET /metrics HTTP/1.1\r\n\r\n", True).startswith(b"HTTP/1.1 404 ")
    assert answer(b"POST /healthz HTTP/1.1\r\n\r\n", True).startswith(b"HTTP/1.1 405 ")
    assert answer(b"\x00\xff garbage\r\n\r\n", True).startswith(b"HTTP/1.1 400 ")


def test_an_oversized_head_is_refused(metrics):
    with (
        start_health_server(f"{LOCAL}:0", lambda: True) as health,
        socket.create_connection((LOCAL, health.port), timeout=5) as s,
    ):
        s.sendall(b"GET /healthz HTTP/1.1\r\nX: " + b"a" * (MAX_HEAD + 10))
        assert s.recv(100).startswith(b"HTTP/1.1 431 ")


def test_addresses_config_key_and_flag(metrics):
    assert start_health_server("", lambda: True) is None
    with pytest.raises(MetricsError, match="health address 'nope' must be HOST:PORT"):
        start_health_server("nope", lambda: True)
    with start_health_server(f"{LOCAL}:0", lambda: True) as health, pytest.raises(OSError):
        start_health_server(f"{LOCAL}:{health.port}", lambda: True)
    assert parse_config("metrics: {health-address: ':9811'}\n").metrics.health_address == ":9811"
    assert parse_config("").metrics.health_address == ""  # off unless asked
    assert HEAD_DEADLINE == 2.0 and MAX_PENDING == 256

    import argparse

    from nri_plugin.commands import run

    parser = argparse.ArgumentParser()
    run.add_arguments(parser)
    assert parser.parse_args(["--health-address", ":9811"]).health_address == ":9811"


def test_resetting_peers_leave_no_traceback_and_at_most_one_line(capfd):
    lines: list[logging.LogRecord] = []
    handler = logging.Handler(logging.DEBUG)
    handler.emit = lines.append  # type: ignore[method-assign]
    logger = logging.getLogger("nri_sla.health")
    logger.addHandler(handler)
    try:
        with start_health_server(f"{LOCAL}:0", lambda: True) as health:
            resetting_requests(LOCAL, health.port, 200, b"GET /healthz HTTP/1.1\r\n\r\n")
            assert probe(LOCAL, health.port).status == 200
            total = health.peer_errors.total
    finally:
        logger.removeHandler(handler)
    out, err = capfd.readouterr()
    assert err == "" and "Traceback" not in out
    assert len(lines) == (1 if total else 0) and total <= 200
    print(
        f"evidence: 200 resetting connections on the probe listener: {total} failed "
        f"on our side, {len(lines)} log line(s), 0 bytes on stderr"
    )
