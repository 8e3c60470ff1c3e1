"""Kubernetes Events sent to the API server by a background thread, never by the caller.

`EventRecorder.record` puts an event on a bounded queue and returns (a lock and an append:
the runtime's CreateContainer answer never waits for the API server); a full queue drops
the event, counted. The recorder's thread correlates each event as the kubelet does
(ops.kube_events), waits for a token of its own rate limit (`qps`, `burst`) and POSTs it,
or PATCHes the count of the one it repeats, with the node's service account: the pod's
in-cluster configuration (`ApiServer.in_cluster`: KUBERNETES_SERVICE_HOST and _PORT, the
account's token, read again for every request since the kubelet rotates it, and its
ca.crt). One try per request, within `TIMEOUT`: an event the API server does not take is
dropped and counted, and failures are logged at most once a minute (ops.peerlog).

urllib3 is imported by the thread, so a plugin without events (and the OCI hook) never
loads it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from nri_plugin.errors import Unavailable
from nri_plugin.ops.kube_api import ApiServer, InvolvedPod
from nri_plugin.ops.kube_events import Correlated, Correlator, TokenBucket, make_event
from nri_plugin.ops.peerlog import PeerErrorLog

if TYPE_CHECKING:
    from nri_plugin.ops.metrics import MetricsSink

log = logging.getLogger("nri_sla.events")

TIMEOUT = (2.0, 5.0)  # seconds to connect, to read the answer
_STOP = object()
Message = str | Callable[[], str]  # a callable is rendered by the thread, not the caller


class RequestFailed(Unavailable):
    """The API server did not take a request; `why` is the metric label."""

    def __init__(self, why: str, detail: str, status: int = 0) -> None:
        super().__init__(detail)
        self.why = why  # unreachable | timeout | client_error | server_error | token
        self.status = status


class ApiClient:
    """POST and PATCH of core/v1 Events (urllib3: one kept-alive connection, no retries)."""

    def __init__(self, server: ApiServer, timeout: tuple[float, float] = TIMEOUT) -> None:
        import urllib3

        self.server = server
        self._urllib3 = urllib3
        self._pool = urllib3.HTTPSConnectionPool(
            server.host,
            server.port,
            maxsize=1,
            ca_certs=server.ca_path,
            cert_reqs="CERT_REQUIRED",
            retries=False,
            timeout=urllib3.Timeout(connect=timeout[0], read=timeout[1]),
        )

    def send(self, correlated: Correlated) -> str:
        """Create or patch the event; returns "created" or "patched". A patch of an event
        the API server no longer has (expired) creates it. Raises RequestFailed."""
        event = correlated.event
        path = f"/api/v1/namespaces/{quote(event['metadata']['namespace'], safe='')}/events"
        if correlated.patch is not None:
            status = self._request(
                "PATCH",
                f"{path}/{quote(event['metadata']['name'], safe='')}",
                correlated.patch,
                "application/strategic-merge-patch+json",
            )
            if status != 404:
                return "patched"
        self._request("POST", path, event, "application/json")
        return "created"  # (a 409: made by an earlier try whose answer was lost)

    def _request(self, method: str, path: str, body: dict[str, Any], content_type: str) -> int:
        try:
            with open(self.server.token_path, encoding="utf-8") as file:
                token = file.read().strip()
        except OSError as exc:
            raise RequestFailed("token", f"service account token: {exc}") from exc
        headers = {
            "Authorization": f"Bearer {token}",
            "Content-Type": content_type,
            "Accept": "application/json",
            "User-Agent": "nri-sla",
        }
        exceptions = self._urllib3.exceptions
        try:
            answer = self._pool.request(
                method, path, body=json.dumps(body).encode(), headers=headers
            )
        except exceptions.NewConnectionError as exc:  # (urllib3 files it under timeouts)
            raise RequestFailed("unreachable", f"{method} {path}: {exc}") from exc
        except (exceptions.TimeoutError, TimeoutError) as exc:
            raise RequestFailed("timeout", f"{method} {path}: {exc}") from exc
        except (exceptions.HTTPError, OSError) as exc:
            raise RequestFailed("unreachable", f"{method} {path}: {exc}") from exc
        status = answer.status
        if status < 300 or status == 409 or (method == "PATCH" and status == 404):
            return status
        detail = f"{method} {path}: HTTP {status} {answer.data[:200].decode(errors='replace')}"
        raise RequestFailed("server_error" if status >= 500 else "client_error", detail, status)


class EventRecorder:
    """Events about pods, sent in the background (see the module's docstring)."""

    def __init__(
        self,
        server: ApiServer,
        metrics: MetricsSink,
        *,
        host: str,
        queue_size: int,
        qps: float,
        burst: int,
        timeout: tuple[float, float] = TIMEOUT,
        wall: Callable[[], float] = time.time,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.server = server
        self.metrics = metrics
        self.host = host
        self.timeout = timeout
        self.wall = wall
        self.clock = clock
        self._limit = TokenBucket(qps, burst, clock)
        self._queue: queue.Queue[Any] = queue.Queue(queue_size)
        self._stopping = threading.Event()
        self._failures = PeerErrorLog(log, "kubernetes events")
        self._thread = threading.Thread(target=self._run, name="nri-sla-events", daemon=True)
        self._thread.start()

    def record(self, pod: InvolvedPod, event_type: str, reason: str, message: Message) -> None:
        """Queue one event; never waits (a full queue drops it, counted)."""
        try:
            self._queue.put_nowait((pod, event_type, reason, message, self.wall()))
        except queue.Full:
            self.metrics.record_event("dropped", "queue_full")

    def flush(self, timeout: float) -> bool:
        """Wait until every queued event was sent or dropped; False if `timeout` passed."""
        deadline = time.monotonic() + timeout
        while self._queue.unfinished_tasks:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.01)
        return True

    def close(self, timeout: float = 1.0) -> None:
        """Stop the thread once the queued events are sent, or `timeout` has passed: then
        after the request in hand, the others not sent."""
        with contextlib.suppress(queue.Full):  # (full: the timeout ends it)
            self._queue.put_nowait(_STOP)
        self._thread.join(timeout)
        self._stopping.set()

    def _run(self) -> None:
        client = ApiClient(self.server, self.timeout)
        correlator = Correlator(self.clock)
        while not self._stopping.is_set():
            item = self._queue.get()
            try:
                if item is _STOP:
                    return
                self._send(client, correlator, *item)
            except Exception as exc:  # RequestFailed, or a bug: the thread goes on
                self.metrics.record_event("dropped", "failed")
                self._failures.note(exc)
            finally:
                self._queue.task_done()

    def _send(
        self,
        client: ApiClient,
        correlator: Correlator,
        pod: InvolvedPod,
        event_type: str,
        reason: str,
        message: Message,
        at: float,
    ) -> None:
        text = message if isinstance(message, str) else message()
        correlated = correlator.correlate(
            make_event(pod, event_type, reason, text, host=self.host, now=at)
        )
        if correlated is None:
            self.metrics.record_event("dropped", "rate_limited")
            return
        wait = self._limit.wait()
        if wait and self._stopping.wait(wait):
            return
        self._limit.try_take()
        try:
            self.metrics.record_event("sent", client.send(correlated))
        except RequestFailed as exc:
            self.metrics.record_event("failed", exc.why)
            raise
