"""ttrpc framing and unary call state machines (sans-IO: frames in, events/frames out).

Frame: 10-byte big-endian header (uint32 data_len, uint32 stream_id, uint8 type,
uint8 flags) + data_len bytes. Data of a request frame is a ttrpc.Request, of a response
frame a ttrpc.Response. Only unary calls are used by NRI.

ServerCore and ClientCore hand the frames they produce to their owner, NriCore, which
queues them for the socket (its data_to_send is the one output path).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable
from typing import NamedTuple

from google.protobuf.message import DecodeError

from nri_plugin.nri.errors import (
    Code,
    ConnectionExhausted,
    LocalProtocolError,
    RemoteProtocolError,
)
from nri_plugin.nri.pb import ttrpc_pb2
from nri_plugin.nri.wire import Encoded, read_fields

HEADER = struct.Struct(">IIBB")
HEADER_LEN = HEADER.size
MAX_DATA = 4 << 20  # 4 MiB, ttrpc's message length limit
# From this length on a frame that arrives in parts is assembled in a buffer of its own
# size, handed over as its data, and a request's payload is a view of it: a Synchronize's
# megabytes are held once from the socket to the handler (a copy at each step, and the
# moves of a growing buffer, held them several times over).
LARGE_FRAME = 64 << 10
# The header's stream id is a uint32. Client ids are odd and strictly increasing per
# connection, so the last one is 2**32 - 1; after it the connection can carry no call.
MAX_STREAM_ID = 0xFFFFFFFF

TYPE_REQUEST = 1
TYPE_RESPONSE = 2
TYPE_DATA = 3

FLAG_REMOTE_CLOSED = 1
FLAG_REMOTE_OPEN = 2
FLAG_NO_DATA = 4


# The events are NamedTuples, not frozen dataclasses: one of each is made per call, and
# a frozen dataclass sets every field through object.__setattr__ (a 6-field event: 1.9
# against 0.7 us).
class Frame(NamedTuple):
    stream_id: int
    type: int
    flags: int
    data: bytes | bytearray  # a large frame's: the buffer it was assembled in


class OversizedFrame(NamedTuple):
    """A frame whose announced length exceeds the limit; its data is skipped unread."""

    stream_id: int
    type: int
    flags: int
    length: int


class RequestReceived(NamedTuple):
    stream_id: int
    service: str
    method: str
    payload: Encoded  # a large frame's: a view of the frame's data
    timeout_nano: int
    metadata: tuple[tuple[str, str], ...]


class ResponseReceived(NamedTuple):
    """The end of a call: code 0 and payload, or an error code and message."""

    stream_id: int
    code: int
    message: str
    payload: bytes


def encode_frame(stream_id: int, type_: int, data: bytes, flags: int = 0) -> bytes:
    return HEADER.pack(len(data), stream_id, type_, flags) + data


class FrameDecoder:
    """Cuts one conn's byte stream into frames.

    Holds at most one frame of up to `max_data` bytes plus what one feed brought. A frame
    announcing more than `max_data` is reported as OversizedFrame and its data is
    discarded as it streams past, never buffered.
    """

    __slots__ = ("_buf", "_large", "_skip", "max_data")

    def __init__(self, max_data: int = MAX_DATA) -> None:
        self.max_data = max_data
        self._buf = bytearray()
        self._skip = 0
        self._large: _LargeFrame | None = None  # a large frame under way

    @property
    def buffered(self) -> int:
        large = self._large
        return len(self._buf) + (HEADER_LEN + large.filled if large is not None else 0)

    def feed(self, data: bytes) -> list[Frame | OversizedFrame]:
        out: list[Frame | OversizedFrame] = []
        if self._large is not None:
            data = self._fill_large(data, out)
            if not data:
                return out
        if self._skip:
            if len(data) <= self._skip:
                self._skip -= len(data)
                return out
            data = data[self._skip :]
            self._skip = 0
        buf = self._buf
        if not buf and len(data) >= HEADER_LEN:
            # Fast path: parse straight from `data` and keep only the leftover.
            src: bytes | bytearray = data
        else:
            buf += data
            src = buf
        pos = 0
        end = len(src)
        # A frame's data is copied once, out of a view (slicing the bytearray would copy
        # it twice). The view is released before the buffer is cut below.
        with memoryview(src) as view:
            while end - pos >= HEADER_LEN:
                length, stream_id, type_, flags = HEADER.unpack_from(src, pos)
                if length > self.max_data:
                    out.append(OversizedFrame(stream_id, type_, flags, length))
                    pos += HEADER_LEN
                    if end - pos >= length:
                        pos += length
                        continue
                    self._skip = length - (end - pos)
                    pos = end
                    break
                stop = pos + HEADER_LEN + length
                if stop > end:
                    break
                out.append(Frame(stream_id, type_, flags, bytes(view[pos + HEADER_LEN : stop])))
                pos = stop
        if src is buf:
            del buf[:pos]
        elif pos < end:
            buf += data[pos:]
        self._start_large()
        return out

    def _start_large(self) -> None:
        """A large frame begun in the buffer gets a buffer of its own, of its size: filled
        as it arrives and handed over as its data (growing the shared buffer instead
        would move it, and its old copies stay in the heap)."""
        buf = self._buf
        if len(buf) < HEADER_LEN:
            return
        length, stream_id, type_, flags = HEADER.unpack_from(buf, 0)
        if length < LARGE_FRAME:  # (one over max_data is being skipped, never here)
            return
        frame = _LargeFrame(stream_id, type_, flags, bytearray(length))
        with memoryview(buf) as view:
            frame.fill(view[HEADER_LEN:])
        self._large = frame
        self._buf = bytearray()

    def _fill_large(self, data: bytes, out: list[Frame | OversizedFrame]) -> bytes:
        """`data` into the large frame under way; returns what follows the frame."""
        frame = self._large
        assert frame is not None
        with memoryview(data) as view:
            taken = frame.fill(view)
        if frame.filled == len(frame.data):
            out.append(Frame(frame.stream_id, frame.type, frame.flags, frame.data))
            self._large = None
        return data[taken:] if taken < len(data) else b""


class _LargeFrame:
    """A large frame under way: its header, and its data as far as it came."""

    __slots__ = ("data", "filled", "flags", "stream_id", "type")

    def __init__(self, stream_id: int, type_: int, flags: int, data: bytearray) -> None:
        self.stream_id, self.type, self.flags = stream_id, type_, flags
        self.data = data
        self.filled = 0

    def fill(self, more: memoryview) -> int:
        """Copy what of `more` the frame still lacks; returns how many bytes that was."""
        taken = min(len(more), len(self.data) - self.filled)
        self.data[self.filled : self.filled + taken] = more[:taken]
        self.filled += taken
        return taken


def _varint(value: int) -> bytes:
    if value < 0x4000:  # every length of a create's answer: no loop, no bytearray
        return _VARINTS_1[value] if value < 0x80 else bytes(((value & 0x7F) | 0x80, value >> 7))
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_VARINTS_1 = [bytes((n,)) for n in range(0x80)]  # the one-byte varints


def embedded_field(tag: int, data: bytes) -> bytes:
    """A length-delimited protobuf field (`tag`: its key byte), written even when `data`
    is empty: how protobuf writes an embedded message that is set."""
    return bytes((tag,)) + _varint(len(data)) + data


def _len_field(tag: int, data: bytes) -> bytes:
    return embedded_field(tag, data) if data else b""


def encode_request(
    service: str,
    method: str,
    payload: bytes,
    timeout_nano: int = 0,
    metadata: Iterable[tuple[str, str]] = (),
) -> bytes:
    """ttrpc.Request, encoded by hand (hot path) exactly as protobuf would: fields in
    number order, zero values omitted."""
    parts = [
        _len_field(0x0A, service.encode()),
        _len_field(0x12, method.encode()),
        _len_field(0x1A, payload),
    ]
    if timeout_nano:
        # int64: negative values are 10-byte two's complement varints.
        parts.append(b"\x20" + _varint(timeout_nano & 0xFFFFFFFFFFFFFFFF))
    for key, value in metadata:
        kv = _len_field(0x0A, key.encode()) + _len_field(0x12, value.encode())
        parts.append(b"\x2a" + _varint(len(kv)) + kv)
    return b"".join(parts)


def encode_response(payload: bytes) -> bytes:
    """A successful ttrpc.Response: no status, just the payload."""
    return _len_field(0x12, payload)


def encode_error_response(code: int, message: str) -> bytes:
    status = ttrpc_pb2.Status(code=int(code), message=message)
    return ttrpc_pb2.Response(status=status).SerializeToString()


class ServerCore:
    """Serves unary calls on one conn.

    `receive` turns a frame into a RequestReceived for the application, or into an
    immediate error answer (a frame to send) when the call cannot be served: even or reused
    stream id (InvalidArgument), oversized (ResourceExhausted), malformed request
    (InvalidArgument), unknown service/method (Unimplemented). Frames of other types are
    dropped: a unary server never receives data frames that matter and never sends them.

    A request after stream id 2**32 - 1 raises RemoteProtocolError: no valid id can
    follow that one (a Go client wraps around to 1), so rejecting call by call would fail
    every later call on a connection that looks alive; ending it lets both sides start
    a new one with fresh ids.
    """

    def __init__(
        self, is_known: Callable[[str, str], bool], *, server_name: str = "server"
    ) -> None:
        self.is_known = is_known
        self.server_name = server_name
        self.last_stream_id = 0
        self.active: set[int] = set()
        self.dropped_frames = 0

    def _reject(self, stream_id: int, code: int, message: str) -> bytes:
        return encode_frame(stream_id, TYPE_RESPONSE, encode_error_response(code, message))

    def receive(self, frame: Frame | OversizedFrame) -> tuple[RequestReceived | None, bytes]:
        if frame.type != TYPE_REQUEST:
            self.dropped_frames += 1
            return None, b""
        sid = frame.stream_id
        if self.last_stream_id == MAX_STREAM_ID:
            raise RemoteProtocolError(
                f"request on stream {sid} after stream id {MAX_STREAM_ID}: the peer's "
                "stream ids are used up; the connection must be replaced"
            )
        if sid % 2 == 0 or sid <= self.last_stream_id:
            why = "even" if sid % 2 == 0 else f"not above the last one ({self.last_stream_id})"
            return None, self._reject(
                sid,
                Code.INVALID_ARGUMENT,
                f"stream id {sid} is {why}: client ids must be odd and increasing",
            )
        self.last_stream_id = sid
        if isinstance(frame, OversizedFrame):
            return None, self._reject(
                sid,
                Code.RESOURCE_EXHAUSTED,
                f"message length {frame.length} exceeds maximum message size of {MAX_DATA}",
            )
        try:
            service, method, payload, timeout, meta = (
                _request(frame.data)
                if len(frame.data) < LARGE_FRAME
                else _large_request(frame.data)
            )
        except (DecodeError, UnicodeDecodeError):
            return None, self._reject(
                sid, Code.INVALID_ARGUMENT, "malformed ttrpc request (protobuf decode failed)"
            )
        if not self.is_known(service, method):
            return None, self._reject(
                sid,
                Code.UNIMPLEMENTED,
                f"{service}/{method} is not implemented by {self.server_name}",
            )
        self.active.add(sid)
        return RequestReceived(sid, service, method, payload, timeout, meta), b""

    def _finish(self, stream_id: int) -> None:
        try:
            self.active.remove(stream_id)
        except KeyError:
            raise LocalProtocolError(
                f"stream {stream_id} has no open call to answer "
                "(never received, or already answered)"
            ) from None

    def respond(self, stream_id: int, payload: bytes) -> bytes:
        self._finish(stream_id)
        return encode_frame(stream_id, TYPE_RESPONSE, encode_response(payload))

    def respond_error(self, stream_id: int, code: int, message: str) -> bytes:
        self._finish(stream_id)
        return encode_frame(stream_id, TYPE_RESPONSE, encode_error_response(code, message))


Request = tuple[str, str, Encoded, int, tuple[tuple[str, str], ...]]


def _request(data: bytes | bytearray) -> Request:
    """A ttrpc.Request's service, method, payload, timeout and metadata."""
    req = ttrpc_pb2.Request()
    req.ParseFromString(data)  # type: ignore[arg-type]  # any buffer: the stubs say bytes
    metadata = req.metadata
    meta = tuple((kv.key, kv.value) for kv in metadata) if metadata else ()
    return req.service, req.method, req.payload, req.timeout_nano, meta


_SERVICE, _METHOD, _PAYLOAD, _TIMEOUT, _METADATA = (
    ttrpc_pb2.Request.DESCRIPTOR.fields_by_name[name].number
    for name in ("service", "method", "payload", "timeout_nano", "metadata")
)


def _large_request(data: bytes | bytearray) -> Request:
    """_request for a large frame: its payload a view of `data`, not a copy (protobuf's
    parse copies it, and reading the field copies it again). Field by field as protobuf
    reads them: the last occurrence of a scalar wins, strings must be UTF-8."""
    found = read_fields(data)
    view = memoryview(data)

    def last(number: int) -> memoryview:
        spans = found.spans.get(number)
        return view[spans[-2] : spans[-1]] if spans else view[:0]

    meta = tuple(
        (kv.key, kv.value)
        for kv in (
            ttrpc_pb2.KeyValue.FromString(view[start:stop])  # type: ignore[arg-type]  # as above
            for start, stop in found.each(_METADATA)
        )
    )
    timeout = found.varints.get(_TIMEOUT, 0)
    if timeout >= 1 << 63:  # int64: a negative value's two's complement
        timeout -= 1 << 64
    return (
        str(last(_SERVICE), "utf-8"),
        str(last(_METHOD), "utf-8"),
        last(_PAYLOAD),
        timeout,
        meta,
    )


class ClientCore:
    """Issues unary calls on one conn: ids 1, 3, 5, ...; responses matched by id in any
    order; a response for no outstanding call (late, after a deadline) is dropped. Ids
    never wrap (the peer would take a wrapped id as reused): after 2**32 - 1 a call
    raises ConnectionExhausted."""

    def __init__(self) -> None:
        self.next_stream_id = 1
        self.pending: set[int] = set()
        self.dropped_frames = 0

    def request(
        self,
        service: str,
        method: str,
        payload: bytes,
        timeout_nano: int = 0,
        metadata: Iterable[tuple[str, str]] = (),
    ) -> tuple[int, bytes]:
        sid = self.next_stream_id
        if sid > MAX_STREAM_ID:
            raise ConnectionExhausted(
                f"{method}: this connection has used its last stream "
                f"id ({MAX_STREAM_ID}); a new connection is needed"
            )
        self.next_stream_id += 2
        self.pending.add(sid)
        data = encode_request(service, method, payload, timeout_nano, metadata)
        return sid, encode_frame(sid, TYPE_REQUEST, data)

    def cancel(self, stream_id: int) -> None:
        self.pending.discard(stream_id)

    def receive(self, frame: Frame | OversizedFrame) -> ResponseReceived | None:
        sid = frame.stream_id
        if frame.type != TYPE_RESPONSE or sid not in self.pending:
            self.dropped_frames += 1
            return None
        self.pending.remove(sid)
        if isinstance(frame, OversizedFrame):
            return ResponseReceived(
                sid,
                Code.RESOURCE_EXHAUSTED,
                f"response length {frame.length} exceeds maximum message size of {MAX_DATA}",
                b"",
            )
        resp = ttrpc_pb2.Response()
        try:
            resp.ParseFromString(frame.data)  # type: ignore[arg-type]  # any buffer
        except DecodeError:
            return ResponseReceived(
                sid, Code.INTERNAL, "malformed ttrpc response (protobuf decode failed)", b""
            )
        if resp.HasField("status") and resp.status.code != 0:
            return ResponseReceived(sid, resp.status.code, resp.status.message, b"")
        return ResponseReceived(sid, 0, "", resp.payload)
