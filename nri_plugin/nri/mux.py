"""NRI multiplexer framing (sans-IO).

One unix socket carries several logical byte streams. Every frame is an 8-byte
big-endian header (uint32 conn_id, uint32 payload_len) followed by the payload.
conn 1 carries the Plugin service (runtime calls plugin), conn 2 the Runtime service
(plugin calls runtime); conn 0 is reserved.

The decoder never buffers a whole frame: it hands payload bytes on as they arrive, so a
large frame costs no memory. The per-conn byte streams are then cut into ttrpc messages
by nri_plugin.nri.ttrpc.
"""

from __future__ import annotations

import struct

from nri_plugin.nri.errors import RemoteProtocolError

HEADER = struct.Struct(">II")
HEADER_LEN = HEADER.size
# containerd's reader takes one mux frame into a 4,096-byte buffer: never send a
# longer frame payload, or the runtime loses it.
MAX_SEND_PAYLOAD = 4096
# containerd's mux refuses to write a frame longer than one whole ttrpc message (10-byte
# header + 4 MiB). A longer announced length means the peer is broken or the stream lost
# sync; reading on would swallow every later frame as payload, so the connection ends.
MAX_RECV_PAYLOAD = 10 + (4 << 20)

PLUGIN_CONN = 1  # Plugin service: the runtime is the client
RUNTIME_CONN = 2  # Runtime service: the plugin is the client


def encode(conn_id: int, data: bytes, max_payload: int = MAX_SEND_PAYLOAD) -> bytes:
    """Frame `data` for `conn_id`, cut into frames of at most `max_payload` bytes."""
    n = len(data)
    if n <= max_payload:
        return HEADER.pack(conn_id, n) + data
    view = memoryview(data)
    parts: list[bytes | memoryview] = []
    for start in range(0, n, max_payload):
        chunk = view[start : start + max_payload]
        parts.append(HEADER.pack(conn_id, len(chunk)))
        parts.append(chunk)
    return b"".join(parts)


class MuxDecoder:
    """Turns raw socket bytes into (conn_id, payload piece) segments.

    A segment is a contiguous slice of one frame's payload; consecutive segments of the
    same conn form that conn's byte stream. Memory held: at most 7 header bytes. A frame
    announcing more than MAX_RECV_PAYLOAD bytes raises RemoteProtocolError.
    """

    __slots__ = ("_conn", "_header", "_remaining")

    def __init__(self) -> None:
        self._header = b""
        self._conn = 0
        self._remaining = 0  # payload bytes of the current frame still to come

    @property
    def in_frame(self) -> bool:
        """True while a frame's payload is only partly received."""
        return self._remaining > 0 or bool(self._header)

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        out: list[tuple[int, bytes]] = []
        pos = 0
        n = len(data)
        while pos < n:
            if self._remaining:
                take = min(self._remaining, n - pos)
                out.append((self._conn, data[pos : pos + take]))
                self._remaining -= take
                pos += take
                continue
            need = HEADER_LEN - len(self._header)
            if need < HEADER_LEN or n - pos < HEADER_LEN:
                self._header += data[pos : pos + need]
                pos += min(need, n - pos)
                if len(self._header) < HEADER_LEN:
                    break
                self._conn, self._remaining = HEADER.unpack(self._header)
                self._header = b""
            else:
                self._conn, self._remaining = HEADER.unpack_from(data, pos)
                pos += HEADER_LEN
            if self._remaining > MAX_RECV_PAYLOAD:
                raise RemoteProtocolError(
                    f"mux frame for conn {self._conn} announces {self._remaining} bytes; "
                    f"an NRI peer sends at most {MAX_RECV_PAYLOAD} (one ttrpc message)"
                )
        return out
