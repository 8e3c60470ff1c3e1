"""The metrics HTTP server of `nri-sla run`: `start_http_server(metrics, address)` serves,
from a daemon thread:

* `/metrics`  the registry of `nri_plugin.ops.metrics.Metrics` in the Prometheus text
  format (or OpenMetrics when asked);
* `/healthz`  200 while the process serves HTTP (liveness);
* `/readyz`   200 once the plugin is registered with the runtime, else 503 (readiness).

The server serves each connection in a thread, at most MAX_CONNECTIONS at once (one more
is answered 503 and closed at once), and ends any connection still open
CONNECTION_DEADLINE seconds after it was accepted, whatever it is doing: a client that
opens connections and sends nothing (or one byte at a time) holds a bounded number of
threads for a bounded time. That cap makes these /healthz and /readyz unfit for the
kubelet's probes (a client holding 16 connections makes them answer 503): probes go to
the probe listener, nri_plugin.ops.health. A connection that fails by the peer's doing (a
reset before the answer) is counted into one rate-limited log line, never a traceback.
"""

from __future__ import annotations

import logging
import socket
import sys
import threading
from contextlib import suppress
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from time import monotonic
from typing import ClassVar, Protocol

from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import CollectorRegistry

from nri_plugin import __version__
from nri_plugin.ops.listenaddress import ListenAddress, parse_address
from nri_plugin.ops.peerlog import PeerErrorLog

log = logging.getLogger("nri_sla.metrics")

# HTTP connection bounds: a scrape or probe takes milliseconds and Prometheus and kubelet
# open a few connections at most, so these only ever bite on stuck or hostile clients.
MAX_CONNECTIONS = 16  # served at once (one thread each)
CONNECTION_DEADLINE = 10.0  # seconds from accept to close, request and answer included
IO_TIMEOUT = 5.0  # seconds one read or write may block
_BUSY_BODY = b"busy: too many connections; retry later\n"
_BUSY = (
    b"HTTP/1.0 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"
    b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(_BUSY_BODY), _BUSY_BODY)
)


class Exposed(Protocol):
    """What the server exposes: the plugin's `Metrics` or the device plugin's
    `DevicePluginMetrics`."""

    @property
    def registry(self) -> CollectorRegistry: ...

    @property
    def is_registered(self) -> bool:
        """The service is registered with the runtime or the kubelet (/readyz)."""
        ...


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    # Connections past the cap queue in the kernel (no thread, no memory of ours) until
    # accepted and answered 503; socketserver's default of 5 would drop their SYNs.
    request_queue_size = 64

    def __init__(
        self,
        listen: ListenAddress,
        metrics: Exposed,
        *,
        max_connections: int = MAX_CONNECTIONS,
        deadline: float = CONNECTION_DEADLINE,
    ) -> None:
        if ":" in listen.host:
            self.address_family = socket.AF_INET6
        self.metrics = metrics
        self.max_connections = max_connections
        self.deadline = deadline
        self._lock = threading.Lock()
        self._open: dict[socket.socket, float] = {}  # served connection -> its deadline
        self.peer_errors = PeerErrorLog(log, "metrics")
        super().__init__((listen.host, listen.port), _Handler)

    def handle_error(self, request, client_address) -> None:
        # socketserver's default prints a traceback to stderr for every connection whose
        # handler raised; a peer that resets before the answer makes that happen at will.
        # One rate-limited structured line instead (nri_plugin.ops.peerlog).
        exc = sys.exc_info()[1]
        if exc is not None:
            self.peer_errors.note(exc)

    def process_request(self, request, client_address) -> None:
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

    def process_request_thread(self, request, client_address) -> None:
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
                self._reply(503, self._PLAIN, b"not ready: not registered with the runtime\n", head)
        else:
            self._reply(404, self._PLAIN, b"not found: try /metrics, /healthz, /readyz\n", head)

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
        self._thread = threading.Thread(
            target=server.serve_forever,
            name="nri-sla-metrics",
            kwargs={"poll_interval": 0.2},
            daemon=True,
        )
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


def start_http_server(
    metrics: Exposed,
    address: str,
    *,
    max_connections: int = MAX_CONNECTIONS,
    deadline: float = CONNECTION_DEADLINE,
) -> MetricsServer | None:
    """Serve /metrics, /healthz and /readyz on `address`; "" disables (returns None).
    Raises MetricsError for a malformed address and OSError when it cannot bind."""
    listen = parse_address(address)
    if listen is None:
        return None
    return MetricsServer(
        _Server(listen, metrics, max_connections=max_connections, deadline=deadline)
    )
