"""Hostile HTTP clients over real sockets, for the metrics and health listeners' tests
(tests/ops/test_health.py, tests/ops/test_metrics.py, tests/e2e/test_metrics_isolation.py).

* `HeldConnections`: keeps N connections open and silent, re-opening each one as soon as
  the server closes it (optionally at most `rate` per second): the connection flood
  that made `/healthz` answer `503 busy`.
* `resetting_requests`: connections that send a request and reset (SO_LINGER 0: RST, not
  FIN) before the answer comes.
* `probe`: one kubelet-style probe, a fresh connection and one GET with a timeout.
"""

from __future__ import annotations

import selectors
import socket
import struct
import threading
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class ProbeResult:
    status: int | None  # None: no answer within the timeout, or the connection failed
    seconds: float
    error: str = ""


def probe(host: str, port: int, path: str = "/healthz", timeout: float = 1.0) -> ProbeResult:
    """GET `path` on a new connection, as the kubelet's httpGet probe does (timeout 1 s)."""
    start = time.monotonic()
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.settimeout(max(0.01, timeout - (time.monotonic() - start)))
            s.sendall(
                f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\n"
                "User-Agent: kube-probe/1.30\r\nAccept: */*\r\n"
                "Connection: close\r\n\r\n".encode()
            )
            data = b""
            while b"\r\n" not in data:
                chunk = s.recv(4096)
                if not chunk:
                    break
                data += chunk
    except OSError as exc:
        return ProbeResult(None, time.monotonic() - start, f"{type(exc).__name__}: {exc}")
    took = time.monotonic() - start
    parts = data.split(b"\r\n", 1)[0].split()
    if len(parts) < 2 or not parts[1].isdigit():
        return ProbeResult(None, took, f"no status line: {data[:80]!r}")
    return ProbeResult(int(parts[1]), took)


class HeldConnections:
    """`count` silent connections to (host, port), each re-opened when the server drops it
    (or answers it), at most `rate` new connections per second when given."""

    def __init__(self, host: str, port: int, count: int, rate: float | None = None) -> None:
        self.host, self.port, self.count, self.rate = host, port, count, rate
        self.opened = 0
        self.dropped = 0  # closed or answered by the server
        self.failed = 0  # connects that failed
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="held-connections", daemon=True)

    def __enter__(self) -> HeldConnections:
        self._thread.start()
        deadline = time.monotonic() + 10
        while self.opened < self.count and time.monotonic() < deadline:
            time.sleep(0.01)  # the flood is in place before the test goes on
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        sel = selectors.DefaultSelector()
        held: set[socket.socket] = set()
        budget, last = float(self.count), time.monotonic()  # the first `count` at once
        try:
            while not self._stop.is_set():
                now = time.monotonic()
                if self.rate is not None:
                    budget = min(float(self.count), budget + (now - last) * self.rate)
                last = now
                while len(held) < self.count and (self.rate is None or budget >= 1):
                    budget -= 1
                    try:
                        s = socket.create_connection((self.host, self.port), timeout=1)
                    except OSError:
                        self.failed += 1
                        break
                    s.setblocking(False)
                    held.add(s)
                    sel.register(s, selectors.EVENT_READ)
                    self.opened += 1
                for key, _ in sel.select(0.02):
                    s = key.fileobj
                    try:
                        s.recv(4096)  # EOF, a reset or an answer: the server let go
                    except BlockingIOError:
                        continue
                    except OSError:
                        pass
                    sel.unregister(s)
                    held.discard(s)  # type: ignore[arg-type]
                    s.close()  # type: ignore[union-attr]
                    self.dropped += 1
        finally:
            for s in held:
                s.close()
            sel.close()


_LINGER_RST = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() sends RST


def resetting_requests(
    host: str, port: int, count: int, request: bytes = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"
) -> None:
    """`count` connections that each send `request` and reset at once, before reading."""
    for _ in range(count):
        with socket.create_connection((host, port), timeout=2) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RST)
            s.sendall(request)
