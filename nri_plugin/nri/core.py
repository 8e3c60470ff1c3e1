"""One NRI connection as a sans-IO state machine: mux + ttrpc, both conns, one side.

The plugin serves conn 1 and calls on conn 2; the runtime does the opposite. Feed raw
socket bytes to `receive_data`; it returns the calls to serve and the responses to
outstanding calls, and queues any automatic answers (rejections) for `data_to_send`.
Every outgoing ttrpc message is cut into mux frames of at most 4,096 payload bytes.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable

from nri_plugin.nri import mux
from nri_plugin.nri.ttrpc import (
    MAX_DATA,
    ClientCore,
    FrameDecoder,
    RequestReceived,
    ResponseReceived,
    ServerCore,
)

Event = RequestReceived | ResponseReceived


class Role(enum.Enum):
    PLUGIN = "plugin"
    RUNTIME = "runtime"


class NriCore:
    def __init__(self, role: Role, is_known: Callable[[str, str], bool], *,
                 max_data: int = MAX_DATA, max_send_payload: int = mux.MAX_SEND_PAYLOAD) -> None:
        self.role = role
        if role is Role.PLUGIN:
            self.server_conn, self.client_conn = mux.PLUGIN_CONN, mux.RUNTIME_CONN
        else:
            self.server_conn, self.client_conn = mux.RUNTIME_CONN, mux.PLUGIN_CONN
        self.max_send_payload = max_send_payload
        self._mux = mux.MuxDecoder()
        self._server_frames = FrameDecoder(max_data)
        self._client_frames = FrameDecoder(max_data)
        self.server = ServerCore(is_known, server_name=f"this {role.value}")
        self.client = ClientCore()
        self._out: list[bytes] = []

    # -- input ---------------------------------------------------------------
    def receive_data(self, data: bytes) -> list[Event]:
        events: list[Event] = []
        for conn, piece in self._mux.feed(data):
            if conn == self.server_conn:
                for frame in self._server_frames.feed(piece):
                    req, reply = self.server.receive(frame)
                    if req is not None:
                        events.append(req)
                    elif reply:
                        self._out.append(self._wrap(self.server_conn, reply))
            elif conn == self.client_conn:
                for frame in self._client_frames.feed(piece):
                    resp = self.client.receive(frame)
                    if resp is not None:
                        events.append(resp)
            # else: the runtime drops frames for conns it does not know; so do we.
        return events

    def data_to_send(self) -> bytes:
        out, self._out = b"".join(self._out), []
        return out

    @property
    def buffered(self) -> int:
        """Bytes held for partly received ttrpc frames (bounded by max_data + a read)."""
        return self._server_frames.buffered + self._client_frames.buffered

    # -- output --------------------------------------------------------------
    def _wrap(self, conn: int, frame: bytes) -> bytes:
        return mux.encode(conn, frame, self.max_send_payload)

    def send_request(self, service: str, method: str, payload: bytes, timeout_nano: int = 0,
                     metadata: Iterable[tuple[str, str]] = ()) -> tuple[int, bytes]:
        sid, frame = self.client.request(service, method, payload, timeout_nano, metadata)
        return sid, self._wrap(self.client_conn, frame)

    def cancel(self, stream_id: int) -> None:
        self.client.cancel(stream_id)

    def send_response(self, stream_id: int, payload: bytes) -> bytes:
        return self._wrap(self.server_conn, self.server.respond(stream_id, payload))

    def send_error(self, stream_id: int, code: int, message: str) -> bytes:
        return self._wrap(self.server_conn, self.server.respond_error(stream_id, code, message))
