"""The probe listener: `/healthz` and `/readyz` on an address of their own.

Why not the metrics server: it serves each connection in a thread, at most 16 at once,
so anyone who can reach the metrics port and holds 16 connections open makes every
kubelet probe answer `503 busy`, and the kubelet restarts nri-sla in a loop. Probes need
an answer that no scrape and no connection flood can take away, and that costs nothing.

How this listener gets there: one thread and one `selectors` loop, no thread per
connection. A connection costs a socket and a buffer of at most MAX_HEAD bytes; it is
answered as soon as its request head is in (a probe's arrives with the connection),
from a value in memory (liveness: this loop runs; readiness: registered with the
runtime). A connection that does not send its head within HEAD_DEADLINE is closed, and
when MAX_PENDING connections wait, the oldest one is closed to admit the newest: held-open
connections cannot fill the listener, they only push each other out. Each turn of the
loop reads the connections that sent something before it accepts new ones (at most 32 a
turn), so to push a probe out a client would have to open more than MAX_PENDING
connections between the probe's connect and its request reaching the node's kernel
(a local round trip): a volumetric flood, which the accept queue of any TCP service
suffers from as well (the chart's NetworkPolicy keeps other pods off the port).

Answers are HTTP/1.1 with `Connection: close`; nothing is logged per connection (peer
failures go to one rate-limited line, nri_plugin.ops.peerlog).
"""

from __future__ import annotations

import logging
import selectors
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from time import monotonic

from nri_plugin import __version__
from nri_plugin.ops.listenaddress import ListenAddress, parse_address
from nri_plugin.ops.peerlog import PeerErrorLog

log = logging.getLogger("nri_sla.health")

MAX_PENDING = 256  # connections waiting for their request head
HEAD_DEADLINE = 2.0  # seconds from accept to a complete request head
MAX_HEAD = 4096  # bytes of request head read at most
# Connections the kernel queues before accept: a burst of connects waits there instead of
# having SYNs dropped (a dropped probe SYN is retried after 1 s, the kubelet's timeout).
BACKLOG = 1024
_ACCEPTS_PER_TURN = 32  # accepted per loop turn before the pending ones are read
_POLL = 0.2  # seconds the loop waits for events (deadline checks, close)

_PATHS: dict[str, Callable[[bool], tuple[int, bytes]]] = {
    "/healthz": lambda ready: (200, b"ok\n"),
    "/readyz": lambda ready: (
        (200, b"ready: registered with the runtime\n")
        if ready
        else (503, b"not ready: not registered with the runtime\n")
    ),
}
_REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    431: "Request Header Fields Too Large",
    503: "Service Unavailable",
}


def answer(head: bytes, ready: bool) -> bytes:
    """The whole HTTP answer to a request head (its request line decides)."""
    line = head.split(b"\n", 1)[0].strip()
    parts = line.split()
    if len(parts) != 3 or not parts[2].startswith(b"HTTP/"):
        return _response(400, b"bad request\n", head=False)
    method, target = parts[0], parts[1].split(b"?", 1)[0]
    if method not in (b"GET", b"HEAD"):
        return _response(405, b"only GET and HEAD\n", head=False)
    route = _PATHS.get(target.decode("ascii", "replace"))
    if route is None:
        return _response(404, b"not found: try /healthz, /readyz\n", head=method == b"HEAD")
    code, body = route(ready)
    return _response(code, body, head=method == b"HEAD")


def _response(code: int, body: bytes, *, head: bool) -> bytes:
    return (
        f"HTTP/1.1 {code} {_REASONS[code]}\r\nServer: nri-sla/{__version__}\r\n"
        f"Content-Type: text/plain; charset=utf-8\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    ).encode() + (b"" if head else body)


@dataclass
class _Pending:
    deadline: float
    head: bytearray = field(default_factory=bytearray)


class HealthServer:
    """A running probe listener; `close()` stops it."""

    def __init__(
        self,
        listen: ListenAddress,
        ready: Callable[[], bool],
        *,
        max_pending: int = MAX_PENDING,
        deadline: float = HEAD_DEADLINE,
    ) -> None:
        family = socket.AF_INET6 if ":" in listen.host else socket.AF_INET
        self._sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._sock.bind((listen.host, listen.port))
            self._sock.listen(BACKLOG)
            self._sock.setblocking(False)
        except OSError:
            self._sock.close()
            raise
        self._ready = ready
        self.max_pending = max_pending
        self.deadline = deadline
        self.peer_errors = PeerErrorLog(log, "health")
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._sock, selectors.EVENT_READ)
        self._pending: dict[socket.socket, _Pending] = {}  # in accept order: oldest first
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="nri-sla-health", daemon=True)
        self._thread.start()

    @property
    def host(self) -> str:
        return str(self._sock.getsockname()[0])

    @property
    def port(self) -> int:
        return int(self._sock.getsockname()[1])

    @property
    def pending(self) -> int:
        return len(self._pending)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        for conn in list(self._pending):
            self._drop(conn)
        self._selector.close()
        self._sock.close()

    def __enter__(self) -> HealthServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the loop --------------------------------------------------------------------------
    def _loop(self) -> None:
        while not self._stop.is_set():
            ready = [key.fileobj for key, _ in self._selector.select(_POLL)]
            # Requests that arrived first, new connections after: a connection accepted in
            # one turn is read in the next, before more accepts can push it out.
            for conn in ready:
                if conn is not self._sock:
                    self._read(conn)  # type: ignore[arg-type]
            if self._sock in ready:
                self._accept()
            self._expire()
            self.peer_errors.flush()

    def _accept(self) -> None:
        for _ in range(_ACCEPTS_PER_TURN):
            try:
                conn, _addr = self._sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # ECONNABORTED, or out of descriptors: try next turn
                self.peer_errors.note(exc)
                return
            conn.setblocking(False)
            if len(self._pending) >= self.max_pending:
                self._drop(next(iter(self._pending)))  # the oldest: it had its chance
            self._pending[conn] = _Pending(monotonic() + self.deadline)
            self._selector.register(conn, selectors.EVENT_READ)

    def _read(self, conn: socket.socket) -> None:
        pending = self._pending[conn]
        try:
            data = conn.recv(MAX_HEAD + 1 - len(pending.head))
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self.peer_errors.note(exc)
            self._drop(conn)
            return
        if not data:  # closed before a whole head: nothing to answer
            self._drop(conn)
            return
        pending.head += data
        if b"\r\n\r\n" in pending.head or b"\n\n" in pending.head:
            self._reply(conn, answer(bytes(pending.head), self._ready()))
        elif len(pending.head) > MAX_HEAD:
            self._reply(conn, _response(431, b"request head too large\n", head=False))

    def _reply(self, conn: socket.socket, data: bytes) -> None:
        try:
            # A few hundred bytes into an empty send buffer: taken whole, never waits.
            conn.send(data)
        except OSError as exc:
            self.peer_errors.note(exc)
        self._drop(conn)

    def _expire(self) -> None:
        now = monotonic()
        for conn in [c for c, p in self._pending.items() if p.deadline <= now]:
            self._drop(conn)

    def _drop(self, conn: socket.socket) -> None:
        self._pending.pop(conn, None)
        self._selector.unregister(conn)
        conn.close()


def start_health_server(
    address: str,
    ready: Callable[[], bool],
    *,
    max_pending: int = MAX_PENDING,
    deadline: float = HEAD_DEADLINE,
) -> HealthServer | None:
    """Serve /healthz and /readyz on `address`; "" disables (returns None). Raises
    MetricsError for a malformed address and OSError when it cannot bind."""
    listen = parse_address(address, "health address")
    if listen is None:
        return None
    return HealthServer(listen, ready, max_pending=max_pending, deadline=deadline)
