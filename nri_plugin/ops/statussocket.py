"""The status socket: `nri-sla run` answers `nri-sla status` over a root-only unix socket.

Why a unix socket and not a /status route on the metrics server: the metrics port is
TCP (the DaemonSet listens on every interface), and anyone who reaches it would read
every SLA container's namespace, pod, cgroup values and GPU placement. The socket file
is made mode 0600 before it appears under its name (bound under a temporary name,
chmod-ed, renamed), so only root (the file's owner) can connect, and the server checks
the peer's uid again (SO_PEERCRED) before answering.

Protocol: connect; the server writes one JSON document and closes; it reads nothing, so
there is no request to parse. One connection at a time, each bounded by WRITE_TIMEOUT;
the document is built on the plugin's event loop (`SlaPlugin.status`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import stat
import struct
import threading
from collections.abc import Callable
from typing import Any

# The status socket cannot be served (its path taken), or the running plugin cannot be
# asked: what the command needs is taken or not there (exit status 4).
from nri_plugin.errors import Unavailable

log = logging.getLogger("nri_sla.status")

WRITE_TIMEOUT = 5.0  # seconds a client may take to read the answer
BUILD_TIMEOUT = 10.0  # seconds the plugin may take to build it (1,000 containers: ~0.1 s)
MAX_ANSWER = 64 << 20  # what the client reads at most
_PEERCRED = struct.Struct("3i")  # pid, uid, gid


def _prepare(path: str) -> None:
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, mode=0o755, exist_ok=True)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        raise Unavailable(
            f"status socket {path} exists and is not a socket; remove it or "
            "set status.socket elsewhere"
        )
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(1.0)
        try:
            probe.connect(path)
        except OSError:
            return  # stale: left by an earlier run; replaced below
    raise Unavailable(
        f"status socket {path} is served by another process (is nri-sla already running?)"
    )


def bind_socket(path: str) -> socket.socket:
    """A listening socket at `path`, mode 0600 from the moment the name exists."""
    _prepare(path)
    temporary = f"{path}.{os.getpid()}.tmp"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(temporary)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(temporary)
        os.chmod(temporary, 0o600)
        sock.listen(8)
        os.replace(temporary, path)
    except OSError:
        sock.close()
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    return sock


class StatusServer:
    """Serves `source()` (a JSON-able document) on a unix socket from a daemon thread."""

    def __init__(self, path: str, source: Callable[[], dict[str, Any]]) -> None:
        self.path = path
        self.source = source
        self._sock = bind_socket(path)
        self._sock.settimeout(0.5)  # accept() wakes up to see close()
        self._uid = os.geteuid()
        self._closed = False
        self._thread = threading.Thread(target=self._serve, name="nri-sla-status", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                if self._closed:
                    return
                continue
            with conn:
                try:
                    self._answer(conn)
                except OSError as exc:  # the client went away or did not read in time
                    log.debug("status client: %s", exc)

    def _answer(self, conn: socket.socket) -> None:
        conn.settimeout(WRITE_TIMEOUT)
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size)
        _pid, uid, _gid = _PEERCRED.unpack(creds)
        if uid not in (0, self._uid):
            document: dict[str, Any] = {"error": "permission denied: root only"}
        else:
            try:
                document = self.source()
            except Exception as exc:  # the client hears why, in one line
                log.warning("status: %s", exc)
                document = {"error": f"{type(exc).__name__}: {exc}"}
        conn.sendall(json.dumps(document, separators=(",", ":")).encode() + b"\n")

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()
        self._thread.join(timeout=5)
        with contextlib.suppress(OSError):
            if stat.S_ISSOCK(os.lstat(self.path).st_mode):
                os.unlink(self.path)

    def __enter__(self) -> StatusServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_status(path: str, timeout: float = BUILD_TIMEOUT + WRITE_TIMEOUT) -> dict[str, Any]:
    """The running plugin's status document; Unavailable with one line saying why not."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        try:
            sock.connect(path)
        except (FileNotFoundError, ConnectionRefusedError):
            raise Unavailable(f"nri-sla is not running (nothing serves {path})") from None
        except PermissionError:
            raise Unavailable(f"permission denied on {path}: nri-sla status is root only") from None
        except OSError as exc:
            raise Unavailable(f"cannot reach nri-sla at {path}: {exc.strerror or exc}") from None
        chunks, size = [], 0
        try:
            while size <= MAX_ANSWER:
                chunk = sock.recv(1 << 16)
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
        except TimeoutError:
            raise Unavailable(f"nri-sla did not answer within {timeout:g}s on {path}") from None
    try:
        document = json.loads(b"".join(chunks))
    except ValueError:
        document = None
    if not isinstance(document, dict):
        raise Unavailable(f"{path} did not answer a status document (is it nri-sla's?)")
    if "error" in document:
        raise Unavailable(f"nri-sla could not report its status: {document['error']}")
    return document
