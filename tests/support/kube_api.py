"""A local stand-in for the Kubernetes API server's core/v1 Events, for the Events sender's
tests (tests/plugin/test_pod_events.py) and its e2e test (tests/e2e/test_events.py).

HTTPS on 127.0.0.1 with a certificate made by the `openssl` command (the fixture skips
without it), a bearer token, the real paths (POST /api/v1/namespaces/<ns>/events, PATCH
.../events/<name> as a strategic merge patch), and every object it stores checked against
the Kubernetes JSON schema (kubernetes-validate, strict: no unknown fields) and the API
server's own rules for Events that a schema cannot say (the namespace of the path, the
object and the involved object agree; a type of Normal or Warning; a count of at least 1).
What it refused is in `problems`, which a test expects empty. `status`, `delay` make it a
refusing or slow API server.
"""

from __future__ import annotations

import json
import shutil
import ssl
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import kubernetes_validate

TOKEN = "nri-sla-test-token"
SCHEMA_VERSION = "1.37.0"
EVENTS_PATH = "/api/v1/namespaces/"


def make_certificate(directory: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (also the CA the client trusts)."""
    if shutil.which("openssl") is None:
        import pytest

        pytest.skip("needs the openssl command to make the API server's certificate")
    cert, key = directory / "ca.crt", directory / "server.key"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


def schema_problems(event: dict[str, Any], namespace: str) -> list[str]:
    try:
        kubernetes_validate.validate(event, SCHEMA_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:
        return [f"schema: {exc.message}"]
    except kubernetes_validate.SchemaNotFoundError as exc:  # pragma: no cover
        return [f"schema: {exc}"]
    problems = []
    meta, involved = event.get("metadata") or {}, event.get("involvedObject") or {}
    if not meta.get("name"):
        problems.append("metadata.name: required")
    if not (meta.get("namespace") == involved.get("namespace") == namespace):
        problems.append(
            f"namespace: the path's {namespace!r}, metadata's "
            f"{meta.get('namespace')!r} and involvedObject's "
            f"{involved.get('namespace')!r} differ"
        )
    if event.get("type") not in ("Normal", "Warning"):
        problems.append(f"type: {event.get('type')!r} is not Normal or Warning")
    if not isinstance(event.get("count"), int) or event["count"] < 1:
        problems.append(f"count: {event.get('count')!r}")
    if not event.get("reason") or not event.get("source", {}).get("component"):
        problems.append("reason and source.component: required")
    return problems


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # a client that gave up on a slow answer: what the test provokes


class FakeApiServer:
    """Events the plugin posted, by (namespace, name); a context manager."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.cert, key = make_certificate(directory)
        self.events: dict[tuple[str, str], dict[str, Any]] = {}
        self.requests: list[tuple[str, str, int]] = []  # method, path, status answered
        self.problems: list[str] = []
        self.status = 0  # answer every request with this status (403, 500, ...); 0: serve
        self.delay = 0.0  # seconds before each answer
        self._lock = threading.Lock()
        self._version = 0
        self.httpd = _Server(("127.0.0.1", 0), self._handler())
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.cert, key)
        self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_address[1]
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> FakeApiServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def service_account(self, directory: Path) -> Path:
        """A service account directory (token, ca.crt) for this server."""
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "token").write_text(TOKEN + "\n")
        shutil.copy(self.cert, directory / "ca.crt")
        return directory

    def environ(self) -> dict[str, str]:
        return {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(self.port)}

    def wait_for(self, count: int, timeout: float = 10.0) -> list[dict[str, Any]]:
        """The stored events once there are `count` (or the timeout passed)."""
        deadline = time.monotonic() + timeout
        while len(self.events) < count and time.monotonic() < deadline:
            time.sleep(0.02)
        with self._lock:
            return list(self.events.values())

    def _store(
        self, method: str, namespace: str, name: str | None, body: Any, content_type: str
    ) -> tuple[int, dict[str, Any]]:
        with self._lock:
            if method == "POST":
                if content_type != "application/json":
                    return 415, {"message": f"content type {content_type}"}
                event = body
                name = event.get("metadata", {}).get("name", "")
                if (namespace, name) in self.events:
                    return 409, {"reason": "AlreadyExists"}
            else:
                if content_type != "application/strategic-merge-patch+json":
                    return 415, {"message": f"content type {content_type}"}
                stored = self.events.get((namespace, name or ""))
                if stored is None:
                    return 404, {"reason": "NotFound"}
                unknown = set(body) - {"count", "lastTimestamp", "message"}
                if unknown:
                    self.problems.append(f"patch of {sorted(unknown)}")
                event = {**stored, **body}
            problems = schema_problems(event, namespace)
            if problems:
                self.problems.extend(problems)
                return 422, {"reason": "Invalid", "message": "; ".join(problems)}
            self._version += 1
            event["metadata"] = {**event["metadata"], "resourceVersion": str(self._version)}
            self.events[namespace, event["metadata"]["name"]] = event
            return (201 if method == "POST" else 200), event

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _answer(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                server.requests.append((self.command, self.path, status))
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _serve(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if server.delay:
                    time.sleep(server.delay)
                if server.status:
                    return self._answer(server.status, {"reason": "Refused"})
                if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                    return self._answer(401, {"reason": "Unauthorized"})
                parts = self.path.removeprefix(EVENTS_PATH).split("/")
                if (
                    not self.path.startswith(EVENTS_PATH)
                    or len(parts) not in (2, 3)
                    or parts[1] != "events"
                    or (len(parts) == 3) != (self.command == "PATCH")
                ):
                    return self._answer(404, {"reason": "NotFound"})
                status, answer = server._store(
                    self.command,
                    parts[0],
                    parts[2] if len(parts) == 3 else None,
                    json.loads(body),
                    self.headers.get("Content-Type", ""),
                )
                return self._answer(status, answer)

            do_POST = do_PATCH = _serve

        return Handler
