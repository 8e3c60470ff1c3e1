"""asyncio edge of one NRI connection: a Protocol that feeds NriCore and dispatches.

Served calls run concurrently with our own outstanding calls (the runtime sends
Configure while our RegisterPlugin is still waiting for its reply). A route that returns
bytes is answered inline, in the same loop iteration (no task per call); a route that
returns an awaitable gets a task. Exceptions become error statuses on that stream only.
Bytes reach the socket only through `_flush`, which drains the core after each input,
each served answer and each call; answers to one read go out in one write.
A RemoteProtocolError from the core ends the connection at once.

Backpressure: when more than WRITE_HIGH_WATER bytes wait unsent (the peer reads slower
than it calls), reading stops until they drain below WRITE_LOW_WATER, so a peer that
stops reading cannot make us queue answers without end; its calls wait in its own socket
buffer. Past MAX_UNSENT (only our own calls and answers already in progress can get
there) the connection ends with ConnectionExhausted, as it does when our stream ids run
out.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping

from nri_plugin.nri.core import NriCore, Role
from nri_plugin.nri.errors import (
    Code,
    ConnectionClosed,
    ConnectionExhausted,
    RemoteProtocolError,
    RpcError,
)
from nri_plugin.nri.mux import MAX_SEND_PAYLOAD
from nri_plugin.nri.ttrpc import MAX_DATA, RequestReceived, ResponseReceived
from nri_plugin.nri.wire import Encoded

log = logging.getLogger("nri_sla.nri.connection")

Route = Callable[[Encoded], "bytes | Awaitable[bytes]"]
Routes = Mapping[tuple[str, str], Route]

# Unsent bytes at which reading pauses (and resumes): a few hundred answers, a quarter of
# one largest message; containerd reads its socket continuously, so only a stuck or
# hostile peer gets here.
WRITE_HIGH_WATER = 1 << 20
WRITE_LOW_WATER = 256 << 10
# Unsent bytes at which the peer counts as gone: three largest ttrpc messages beyond the
# high-water mark.
MAX_UNSENT = 16 << 20


def error_status(exc: BaseException) -> tuple[int, str]:
    """Status for an exception raised while serving a call."""
    if isinstance(exc, RpcError):
        return exc.code, exc.message
    return Code.UNKNOWN, str(exc) or type(exc).__name__


class Connection(asyncio.Protocol):
    def __init__(
        self,
        role: Role,
        routes: Routes,
        *,
        max_data: int = MAX_DATA,
        max_send_payload: int = MAX_SEND_PAYLOAD,
        write_high_water: int = WRITE_HIGH_WATER,
        write_low_water: int = WRITE_LOW_WATER,
        max_unsent: int = MAX_UNSENT,
    ) -> None:
        self.routes = routes
        self.core = NriCore(
            role,
            lambda s, m: (s, m) in routes,
            max_data=max_data,
            max_send_payload=max_send_payload,
        )
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self._pending: dict[int, asyncio.Future[ResponseReceived]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed: asyncio.Future[None] = self.loop.create_future()
        self.close_reason: BaseException | None = None
        self._write_limits = (write_high_water, write_low_water)
        self.max_unsent = max_unsent
        self.reading_paused = False  # while the peer has too much of ours unread

    # -- asyncio.Protocol ----------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        stream: asyncio.Transport = transport  # type: ignore[assignment]  # a stream's
        self.transport = stream
        high, low = self._write_limits
        stream.set_write_buffer_limits(high=high, low=low)

    def pause_writing(self) -> None:
        # Stop taking calls we would have to answer into a buffer nobody drains.
        self.reading_paused = True
        if self.transport is not None and not self.transport.is_closing():
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        self.reading_paused = False
        if self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()

    def data_received(self, data: bytes) -> None:
        try:
            events = self.core.receive_data(data)
        except RemoteProtocolError as exc:
            log.warning("ending the NRI connection: %s", exc)
            self._shut(exc)
            return
        for ev in events:
            if isinstance(ev, ResponseReceived):
                fut = self._pending.pop(ev.stream_id, None)
                if fut is not None and not fut.done():
                    fut.set_result(ev)
            else:
                self._serve(ev)
        self._flush()

    def connection_lost(self, exc: Exception | None) -> None:
        self._shut(exc)

    def _shut(self, reason: BaseException | None) -> None:
        """Fail our calls and cancel served ones, now: after a protocol error the
        transport only closes on the next loop iteration, and nothing may use the closed
        core until then."""
        if self._closed.done():
            return
        self.close_reason = reason
        err = ConnectionClosed(f"connection closed{': ' + str(reason) if reason else ''}")
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(err)
        self._pending.clear()
        for task in list(self._tasks):
            task.cancel()
        self._closed.set_result(None)
        self.close()

    # -- serving -------------------------------------------------------------
    def _serve(self, req: RequestReceived) -> None:
        route = self.routes[(req.service, req.method)]
        try:
            result = route(req.payload)
        except Exception as exc:
            self._answer_error(req, exc)
            return
        if isinstance(result, bytes):
            self.core.send_response(req.stream_id, result)
            return
        task = self.loop.create_task(self._serve_async(req, result))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _serve_async(self, req: RequestReceived, pending: Awaitable[bytes]) -> None:
        try:
            payload = await pending
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._answer_error(req, exc)
        else:
            self.core.send_response(req.stream_id, payload)
        self._flush()

    def _answer_error(self, req: RequestReceived, exc: Exception) -> None:
        code, message = error_status(exc)
        if not isinstance(exc, RpcError):
            log.warning(
                "%s/%s failed: %s",
                req.service,
                req.method,
                message,
                exc_info=log.isEnabledFor(logging.DEBUG),
            )
        self.core.send_error(req.stream_id, code, message)

    def _flush(self) -> None:
        data = self.core.data_to_send()
        if data and self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)
            unsent = self.transport.get_write_buffer_size()
            if unsent > self.max_unsent:
                exc = ConnectionExhausted(
                    f"the peer is not reading: {unsent} bytes unsent (at most {self.max_unsent})"
                )
                log.warning("ending the NRI connection: %s", exc)
                self.transport.abort()  # close() would wait to flush what nobody reads
                self._shut(exc)

    # -- calling -------------------------------------------------------------
    async def call(
        self,
        service: str,
        method: str,
        payload: bytes,
        timeout: float | None = None,
        metadata: Iterable[tuple[str, str]] = (),
    ) -> bytes:
        """Unary call; returns the response payload or raises RpcError/ConnectionClosed.
        On timeout the call fails with DeadlineExceeded and a late answer is dropped."""
        if self.is_closed:
            why = f" ({self.close_reason})" if self.close_reason else ""
            raise ConnectionClosed(f"{method}: connection is closed{why}")
        timeout_nano = int(timeout * 1e9) if timeout else 0
        try:
            sid = self.core.send_request(service, method, payload, timeout_nano, metadata)
        except ConnectionExhausted as exc:
            log.warning("ending the NRI connection: %s", exc)
            self._shut(exc)
            raise ConnectionClosed(f"NRI connection ended: {exc}") from exc
        fut: asyncio.Future[ResponseReceived] = self.loop.create_future()
        self._pending[sid] = fut
        self._flush()  # may end the connection (peer not reading): `fut` then fails
        timer = self.loop.call_later(timeout, self._expire, sid, method) if timeout else None
        try:
            resp = await fut
        finally:
            if timer is not None:
                timer.cancel()
            self._pending.pop(sid, None)
        if resp.code:
            raise RpcError(resp.code, resp.message, method)
        return resp.payload

    def _expire(self, sid: int, method: str) -> None:
        fut = self._pending.pop(sid, None)
        self.core.cancel(sid)
        if fut is not None and not fut.done():
            fut.set_exception(RpcError(Code.DEADLINE_EXCEEDED, "context deadline exceeded", method))

    # -- life cycle ----------------------------------------------------------
    @property
    def is_closed(self) -> bool:
        return self._closed.done()

    async def wait_closed(self) -> None:
        await asyncio.shield(self._closed)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()
