"""Sans-IO core: mux framing, ttrpc framing, unary client/server state machines."""

from __future__ import annotations

import pytest

from nri_plugin.nri import mux
from nri_plugin.nri.core import NriCore, Role
from nri_plugin.nri.errors import Code, ProtocolError
from nri_plugin.nri.pb import ttrpc_pb2
from nri_plugin.nri.ttrpc import (
    HEADER,
    MAX_DATA,
    TYPE_DATA,
    TYPE_REQUEST,
    TYPE_RESPONSE,
    ClientCore,
    Frame,
    FrameDecoder,
    OversizedFrame,
    RequestReceived,
    ResponseReceived,
    ServerCore,
    encode_frame,
    encode_request,
    encode_response,
)

SVC = "nri.pkg.api.v1alpha1.Plugin"


def _known(service: str, method: str) -> bool:
    return service == SVC and method in {"Configure", "CreateContainer"}


def _request_frame(sid: int, method: str = "Configure", payload: bytes = b"x") -> Frame:
    return Frame(sid, TYPE_REQUEST, 0, encode_request(SVC, method, payload))


def _status(reply: bytes) -> tuple[int, int, str]:
    length, sid, type_, _ = HEADER.unpack_from(reply)
    resp = ttrpc_pb2.Response.FromString(reply[10:10 + length])
    assert type_ == TYPE_RESPONSE and not resp.payload
    return sid, resp.status.code, resp.status.message


# -- mux --------------------------------------------------------------------------------

def test_mux_cuts_outgoing_payload_into_4096_byte_frames():
    data = bytes(range(256)) * 40  # 10,240 bytes
    wire = mux.encode(1, data)
    sizes, pos = [], 0
    while pos < len(wire):
        conn, n = mux.HEADER.unpack_from(wire, pos)
        assert conn == 1
        sizes.append(n)
        pos += 8 + n
    assert sizes == [4096, 4096, 2048]
    assert b"".join(p for _, p in mux.MuxDecoder().feed(wire)) == data


def test_mux_decoder_reassembles_byte_by_byte_and_interleaved():
    wire = mux.encode(1, b"A" * 5000) + mux.encode(2, b"B" * 10) + mux.encode(1, b"C")
    dec = mux.MuxDecoder()
    got: dict[int, bytes] = {1: b"", 2: b""}
    for i in range(len(wire)):
        for conn, piece in dec.feed(wire[i:i + 1]):
            got[conn] += piece
    assert got == {1: b"A" * 5000 + b"C", 2: b"B" * 10}
    assert not dec.in_frame


def test_mux_decoder_streams_huge_frames_without_buffering():
    dec = mux.MuxDecoder()
    out = dec.feed(mux.HEADER.pack(1, 0xFFFFFFFF) + b"abc")
    assert out == [(1, b"abc")] and dec.in_frame
    assert dec.feed(b"d" * 100) == [(1, b"d" * 100)]


# -- ttrpc framing ----------------------------------------------------------------------

def test_frame_decoder_splits_and_joins():
    wire = encode_frame(1, TYPE_REQUEST, b"hello") + encode_frame(3, TYPE_REQUEST, b"")
    dec = FrameDecoder()
    frames = dec.feed(wire[:3]) + dec.feed(wire[3:12]) + dec.feed(wire[12:])
    assert frames == [Frame(1, TYPE_REQUEST, 0, b"hello"), Frame(3, TYPE_REQUEST, 0, b"")]
    assert dec.buffered == 0


def test_frame_decoder_skips_oversized_payload_without_holding_it():
    dec = FrameDecoder(max_data=100)
    big = encode_frame(5, TYPE_REQUEST, b"z" * 1000)
    after = encode_frame(7, TYPE_REQUEST, b"ok")
    out = dec.feed(big[:50])
    assert out == [OversizedFrame(5, TYPE_REQUEST, 0, 1000)]
    assert dec.buffered == 0
    out = dec.feed(big[50:] + after)
    assert out == [Frame(7, TYPE_REQUEST, 0, b"ok")]


def test_hand_encoded_envelopes_equal_protobuf():
    for timeout in (0, 1, 4999261845, -5):
        ours = encode_request(SVC, "Configure", b"\x01\x02", timeout, [("k", "v")])
        ref = ttrpc_pb2.Request(service=SVC, method="Configure", payload=b"\x01\x02",
                                timeout_nano=timeout,
                                metadata=[ttrpc_pb2.KeyValue(key="k", value="v")])
        assert ours == ref.SerializeToString()
    assert encode_response(b"abc") == ttrpc_pb2.Response(payload=b"abc").SerializeToString()
    assert encode_response(b"") == b""


# -- server -----------------------------------------------------------------------------

def test_server_accepts_odd_increasing_ids_and_answers_once():
    srv = ServerCore(_known)
    req, reply = srv.receive(_request_frame(1))
    assert isinstance(req, RequestReceived) and reply == b""
    assert (req.service, req.method, req.payload) == (SVC, "Configure", b"x")
    out = srv.respond(1, b"payload")
    assert out == encode_frame(1, TYPE_RESPONSE, encode_response(b"payload"))
    with pytest.raises(ProtocolError):
        srv.respond(1, b"again")


@pytest.mark.parametrize("sid", [2, 1])
def test_server_rejects_even_and_reused_ids(sid):
    srv = ServerCore(_known)
    srv.receive(_request_frame(1))
    req, reply = srv.receive(_request_frame(sid))
    assert req is None
    got_sid, code, message = _status(reply)
    assert (got_sid, code) == (sid, Code.INVALID_ARGUMENT)
    assert f"stream id {sid}" in message


def test_server_unknown_method_is_unimplemented_naming_it():
    srv = ServerCore(_known, server_name="this plugin")
    req, reply = srv.receive(_request_frame(1, "Frobnicate"))
    assert req is None
    _sid, code, message = _status(reply)
    assert code == Code.UNIMPLEMENTED == 12
    assert f"{SVC}/Frobnicate" in message


def test_server_oversized_and_malformed_requests_get_error_status():
    srv = ServerCore(_known)
    _, reply = srv.receive(OversizedFrame(1, TYPE_REQUEST, 0, MAX_DATA + 1))
    assert _status(reply)[1] == Code.RESOURCE_EXHAUSTED
    _, reply = srv.receive(Frame(3, TYPE_REQUEST, 0, b"\xff\xff\xff"))
    assert _status(reply)[1] == Code.INVALID_ARGUMENT


def test_server_drops_data_and_response_frames():
    srv = ServerCore(_known)
    for type_ in (TYPE_DATA, TYPE_RESPONSE, 9):
        assert srv.receive(Frame(1, type_, 0, b"")) == (None, b"")
    assert srv.dropped_frames == 3
    # ...and the id was not consumed
    assert isinstance(srv.receive(_request_frame(1))[0], RequestReceived)


# -- client -----------------------------------------------------------------------------

def test_client_ids_and_out_of_order_responses():
    cli = ClientCore()
    ids = [cli.request(SVC, "Configure", b"")[0] for _ in range(3)]
    assert ids == [1, 3, 5]
    ok = Frame(5, TYPE_RESPONSE, 0, encode_response(b"five"))
    err = Frame(1, TYPE_RESPONSE, 0, ttrpc_pb2.Response(
        status=ttrpc_pb2.Status(code=2, message="boom")).SerializeToString())
    assert cli.receive(ok) == ResponseReceived(5, 0, "", b"five")
    assert cli.receive(err) == ResponseReceived(1, 2, "boom", b"")
    assert cli.pending == {3}
    cli.cancel(3)
    assert cli.receive(Frame(3, TYPE_RESPONSE, 0, b"")) is None  # late: dropped
    assert cli.receive(Frame(7, TYPE_RESPONSE, 0, b"")) is None  # never asked


def test_client_bad_and_oversized_responses_fail_the_call_only():
    cli = ClientCore()
    cli.request(SVC, "A", b"")
    cli.request(SVC, "B", b"")
    assert cli.receive(Frame(1, TYPE_RESPONSE, 0, b"\x0a\xff")).code == Code.INTERNAL
    assert cli.receive(OversizedFrame(3, TYPE_RESPONSE, 0, 1 << 30)).code == \
        Code.RESOURCE_EXHAUSTED


# -- both conns -------------------------------------------------------------------------

def test_plugin_and_runtime_cores_talk():
    plugin = NriCore(Role.PLUGIN, _known)
    runtime = NriCore(Role.RUNTIME, lambda s, m: m == "RegisterPlugin")
    sid, wire = plugin.send_request("nri.pkg.api.v1alpha1.Runtime", "RegisterPlugin", b"r")
    (got,) = runtime.receive_data(wire)
    assert isinstance(got, RequestReceived) and got.stream_id == sid == 1
    # runtime calls the plugin on conn 1 while the plugin's call is outstanding
    sid2, wire2 = runtime.send_request(SVC, "Configure", b"c" * 9000)
    assert mux.HEADER.unpack_from(wire2)[0] == mux.PLUGIN_CONN
    (cfg,) = plugin.receive_data(wire2)
    assert cfg.payload == b"c" * 9000
    (resp,) = runtime.receive_data(plugin.send_response(cfg.stream_id, b"ok"))
    assert resp == ResponseReceived(sid2, 0, "", b"ok")
    (reg,) = plugin.receive_data(runtime.send_response(sid, b""))
    assert reg == ResponseReceived(1, 0, "", b"")
    # unknown conn ids are dropped; unknown methods answered automatically
    assert plugin.receive_data(mux.encode(7, b"junk")) == []
    _, wire3 = runtime.send_request(SVC, "Nope", b"")
    assert plugin.receive_data(wire3) == []
    (answer,) = runtime.receive_data(plugin.data_to_send())
    assert answer.code == Code.UNIMPLEMENTED
