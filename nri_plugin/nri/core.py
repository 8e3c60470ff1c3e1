"""One NRI connection as a sans-IO state machine: mux + ttrpc, both conns, one side.

The plugin serves conn 1 (the Plugin service) and calls on conn 2 (the Runtime service);
the runtime does the opposite.

In: raw socket bytes go to `receive_data`, which returns the calls to serve and the
responses to our outstanding calls.
Out: one path. Our requests (`send_request`), our answers (`send_response`,
`send_error`) and the answers the core gives by itself (calls it rejects on receipt) are
queued in order; `data_to_send` takes them, already cut into mux frames of at most 4,096
payload bytes. No method returns bytes to send.

Errors come in two families. The peer breaking the protocol in a way no single call can
be failed for raises RemoteProtocolError from `receive_data`: the core is then closed and
the connection has to end. Our own misuse (answering a call that is not open, calling a
service of our own side, using a closed core) raises LocalProtocolError and changes
nothing. Problems confined to one call (bad request, unknown method, reused stream id)
are answered on that call's stream and are not exceptions at all.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable

from nri_plugin.nri import mux
from nri_plugin.nri.errors import LocalProtocolError, RemoteProtocolError
from nri_plugin.nri.ttrpc import (
    MAX_DATA,
    ClientCore,
    FrameDecoder,
    RequestReceived,
    ResponseReceived,
    ServerCore,
)

PLUGIN_SERVICE = "nri.pkg.api.v1alpha1.Plugin"
RUNTIME_SERVICE = "nri.pkg.api.v1alpha1.Runtime"

Event = RequestReceived | ResponseReceived


class Role(enum.Enum):
    PLUGIN = "plugin"
    RUNTIME = "runtime"


class NriCore:
    def __init__(
        self,
        role: Role,
        is_known: Callable[[str, str], bool],
        *,
        max_data: int = MAX_DATA,
        max_send_payload: int = mux.MAX_SEND_PAYLOAD,
    ) -> None:
        self.role = role
        if role is Role.PLUGIN:
            self.server_conn, self.client_conn = mux.PLUGIN_CONN, mux.RUNTIME_CONN
            self.peer_service = RUNTIME_SERVICE
        else:
            self.server_conn, self.client_conn = mux.RUNTIME_CONN, mux.PLUGIN_CONN
            self.peer_service = PLUGIN_SERVICE
        self.max_send_payload = max_send_payload
        self._mux = mux.MuxDecoder()
        self._server_frames = FrameDecoder(max_data)
        self._client_frames = FrameDecoder(max_data)
        self.server = ServerCore(is_known, server_name=f"this {role.value}")
        self.client = ClientCore()
        self._out: list[bytes] = []
        self.error: RemoteProtocolError | None = None  # set once the peer broke the protocol

    # -- input ---------------------------------------------------------------
    def receive_data(self, data: bytes) -> list[Event]:
        """Events decoded from `data`. Raises RemoteProtocolError (and closes the core)
        when the peer broke the protocol; events earlier in the same `data` are then
        dropped with the connection."""
        self._check_open("receive data")
        try:
            return self._receive(data)
        except RemoteProtocolError as exc:
            self.error = exc
            self._out.clear()  # nothing more is owed to a peer that broke the protocol
            raise

    def _receive(self, data: bytes) -> list[Event]:
        pieces = self._mux.feed(data)
        events: list[Event] = []
        for conn, piece in pieces:
            if conn == self.server_conn:
                for frame in self._server_frames.feed(piece):
                    req, reply = self.server.receive(frame)
                    if req is not None:
                        events.append(req)
                    elif reply:
                        self._queue(self.server_conn, reply)
            elif conn == self.client_conn:
                for frame in self._client_frames.feed(piece):
                    resp = self.client.receive(frame)
                    if resp is not None:
                        events.append(resp)
            # else: the runtime drops frames for conns it does not know; so do we.
        return events

    @property
    def buffered(self) -> int:
        """Bytes held for partly received ttrpc frames (bounded by max_data + a read)."""
        return self._server_frames.buffered + self._client_frames.buffered

    # -- output --------------------------------------------------------------
    def data_to_send(self) -> bytes:
        """Everything queued since the last call, in order; b"" when nothing is."""
        out, self._out = self._out, []
        return out[0] if len(out) == 1 else b"".join(out)  # mostly one answer: no copy

    def send_request(
        self,
        service: str,
        method: str,
        payload: bytes,
        timeout_nano: int = 0,
        metadata: Iterable[tuple[str, str]] = (),
    ) -> int:
        """Queue a unary call to the peer's service; returns its stream id. Raises
        ConnectionExhausted (nothing queued) once the stream ids are used up."""
        self._check_open(f"call {method}")
        if service != self.peer_service:
            raise LocalProtocolError(
                f"a {self.role.value} calls {self.peer_service}, not {service}"
            )
        sid, frame = self.client.request(service, method, payload, timeout_nano, metadata)
        self._queue(self.client_conn, frame)
        return sid

    def cancel(self, stream_id: int) -> None:
        """Forget an outstanding call (its deadline passed); a late answer is dropped.
        Allowed on a closed core and for calls already answered: a deadline may fire
        while the answer or the connection's end is on its way."""
        self.client.cancel(stream_id)

    def send_response(self, stream_id: int, payload: bytes) -> None:
        self._check_open(f"answer stream {stream_id}")
        self._queue(self.server_conn, self.server.respond(stream_id, payload))

    def send_error(self, stream_id: int, code: int, message: str) -> None:
        self._check_open(f"answer stream {stream_id}")
        self._queue(self.server_conn, self.server.respond_error(stream_id, code, message))

    def _queue(self, conn: int, frame: bytes) -> None:
        self._out.append(mux.encode(conn, frame, self.max_send_payload))

    def _check_open(self, doing: str) -> None:
        if self.error is not None:
            raise LocalProtocolError(
                f"cannot {doing}: the core is closed after the peer "
                f"broke the protocol ({self.error})"
            )
