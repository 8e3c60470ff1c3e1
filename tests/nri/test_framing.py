"""Sans-IO core: mux framing, ttrpc framing, unary client/server state machines."""

from __future__ import annotations

import pytest

from nri_plugin.nri import mux
from nri_plugin.nri.core import PLUGIN_SERVICE, RUNTIME_SERVICE, NriCore, Role
from nri_plugin.nri.errors import (
    Code,
    ConnectionExhausted,
    LocalProtocolError,
    RemoteProtocolError,
)
from nri_plugin.nri.pb import ttrpc_pb2
from nri_plugin.nri.ttrpc import (
    HEADER,
    MAX_DATA,
    MAX_STREAM_ID,
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
    resp = ttrpc_pb2.Response.FromString(reply[10 : 10 + length])
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
        for conn, piece in dec.feed(wire[i : i + 1]):
            got[conn] += piece
    assert got == {1: b"A" * 5000 + b"C", 2: b"B" * 10}
    assert not dec.in_frame


def test_mux_decoder_streams_large_frames_without_buffering():
    dec = mux.MuxDecoder()
    out = dec.feed(mux.HEADER.pack(1, mux.MAX_RECV_PAYLOAD) + b"abc")
    assert out == [(1, b"abc")] and dec.in_frame
    assert dec.feed(b"d" * 100) == [(1, b"d" * 100)]


@pytest.mark.parametrize("split", [0, 5])
def test_mux_frame_longer_than_any_peer_sends_is_a_remote_error(split):
    header = mux.HEADER.pack(2, mux.MAX_RECV_PAYLOAD + 1)
    dec = mux.MuxDecoder()
    with pytest.raises(RemoteProtocolError, match=f"announces {mux.MAX_RECV_PAYLOAD + 1}"):
        dec.feed(header[:split])
        dec.feed(header[split:] + b"payload")


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
        ref = ttrpc_pb2.Request(
            service=SVC,
            method="Configure",
            payload=b"\x01\x02",
            timeout_nano=timeout,
            metadata=[ttrpc_pb2.KeyValue(key="k", value="v")],
        )
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
    with pytest.raises(LocalProtocolError, match="no open call"):
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


def test_a_request_after_the_last_stream_id_ends_the_connection():
    """A peer at id 2**32 - 1 can make no further valid call (a Go client wraps to 1):
    answering each later call InvalidArgument would fail every call on a connection that
    looks alive, so the core closes and the connection is replaced."""
    plugin = NriCore(Role.PLUGIN, _known)
    runtime = NriCore(Role.RUNTIME, lambda s, m: True)
    runtime.client.next_stream_id = MAX_STREAM_ID
    assert runtime.send_request(SVC, "Configure", b"top") == MAX_STREAM_ID
    (top,) = plugin.receive_data(runtime.data_to_send())
    assert top.stream_id == MAX_STREAM_ID  # the last id itself is valid and served
    plugin.send_response(top.stream_id, b"ok")
    assert runtime.receive_data(plugin.data_to_send())[0].payload == b"ok"
    runtime.client.next_stream_id = 1  # what a wrapping client sends next
    runtime.send_request(SVC, "Configure", b"wrapped")
    with pytest.raises(RemoteProtocolError, match=f"after stream id {MAX_STREAM_ID}"):
        plugin.receive_data(runtime.data_to_send())
    assert plugin.error is not None and plugin.data_to_send() == b""


def test_our_stream_ids_never_wrap():
    cli = ClientCore()
    cli.next_stream_id = MAX_STREAM_ID - 2
    assert [cli.request(SVC, "A", b"")[0] for _ in range(2)] == [MAX_STREAM_ID - 2, MAX_STREAM_ID]
    with pytest.raises(ConnectionExhausted, match="used its last stream id"):
        cli.request(SVC, "A", b"")
    core = NriCore(Role.PLUGIN, _known)
    core.client.next_stream_id = MAX_STREAM_ID + 2
    with pytest.raises(ConnectionExhausted):
        core.send_request(RUNTIME_SERVICE, "UpdateContainers", b"")
    assert core.data_to_send() == b""  # nothing queued (the header could not hold it)


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
    err = Frame(
        1,
        TYPE_RESPONSE,
        0,
        ttrpc_pb2.Response(status=ttrpc_pb2.Status(code=2, message="boom")).SerializeToString(),
    )
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
    assert cli.receive(OversizedFrame(3, TYPE_RESPONSE, 0, 1 << 30)).code == Code.RESOURCE_EXHAUSTED


# -- both conns -------------------------------------------------------------------------


def test_plugin_and_runtime_cores_talk():
    plugin = NriCore(Role.PLUGIN, _known)
    runtime = NriCore(Role.RUNTIME, lambda s, m: m == "RegisterPlugin")
    sid = plugin.send_request(RUNTIME_SERVICE, "RegisterPlugin", b"r")
    (got,) = runtime.receive_data(plugin.data_to_send())
    assert isinstance(got, RequestReceived) and got.stream_id == sid == 1
    # runtime calls the plugin on conn 1 while the plugin's call is outstanding
    sid2 = runtime.send_request(SVC, "Configure", b"c" * 9000)
    wire2 = runtime.data_to_send()
    assert mux.HEADER.unpack_from(wire2)[0] == mux.PLUGIN_CONN
    (cfg,) = plugin.receive_data(wire2)
    assert cfg.payload == b"c" * 9000
    plugin.send_response(cfg.stream_id, b"ok")
    (resp,) = runtime.receive_data(plugin.data_to_send())
    assert resp == ResponseReceived(sid2, 0, "", b"ok")
    runtime.send_response(sid, b"")
    (reg,) = plugin.receive_data(runtime.data_to_send())
    assert reg == ResponseReceived(1, 0, "", b"")
    # unknown conn ids are dropped; unknown methods answered automatically
    assert plugin.receive_data(mux.encode(7, b"junk")) == []
    assert plugin.data_to_send() == b""
    runtime.send_request(SVC, "Nope", b"")
    assert plugin.receive_data(runtime.data_to_send()) == []
    (answer,) = runtime.receive_data(plugin.data_to_send())
    assert answer.code == Code.UNIMPLEMENTED


def test_everything_to_send_leaves_through_data_to_send_in_order():
    """Our call, a rejection the core makes on its own and our answer come out of the
    one queue in the order they were made, and only once."""
    plugin = NriCore(Role.PLUGIN, _known)
    runtime = NriCore(Role.RUNTIME, lambda s, m: True)
    runtime.send_request(SVC, "Nope", b"")  # stream 1: rejected by the plugin core
    runtime.send_request(SVC, "Configure", b"cfg")  # stream 3: served
    plugin.send_request(RUNTIME_SERVICE, "RegisterPlugin", b"r")
    (cfg,) = plugin.receive_data(runtime.data_to_send())
    plugin.send_response(cfg.stream_id, b"configured")
    wire = plugin.data_to_send()
    assert plugin.data_to_send() == b""
    events = runtime.receive_data(wire)
    assert [(type(e).__name__, e.stream_id) for e in events] == [
        ("RequestReceived", 1),
        ("ResponseReceived", 1),
        ("ResponseReceived", 3),
    ]
    assert events[1].code == Code.UNIMPLEMENTED and events[2].payload == b"configured"


def test_misuse_by_the_caller_is_a_local_error_and_changes_nothing():
    plugin = NriCore(Role.PLUGIN, _known)
    with pytest.raises(LocalProtocolError, match="stream 1 has no open call"):
        plugin.send_response(1, b"")
    with pytest.raises(LocalProtocolError, match="stream 5 has no open call"):
        plugin.send_error(5, Code.INTERNAL, "x")
    with pytest.raises(LocalProtocolError, match=f"a plugin calls {RUNTIME_SERVICE}"):
        plugin.send_request(PLUGIN_SERVICE, "Configure", b"")
    runtime = NriCore(Role.RUNTIME, _known)
    with pytest.raises(LocalProtocolError, match=f"a runtime calls {PLUGIN_SERVICE}"):
        runtime.send_request(RUNTIME_SERVICE, "RegisterPlugin", b"")
    assert plugin.data_to_send() == runtime.data_to_send() == b""
    assert plugin.error is None and plugin.client.next_stream_id == 1
    # still fully usable
    assert plugin.send_request(RUNTIME_SERVICE, "RegisterPlugin", b"") == 1


def test_peer_breaking_the_protocol_closes_the_core():
    plugin = NriCore(Role.PLUGIN, _known)
    runtime = NriCore(Role.RUNTIME, lambda s, m: True)
    runtime.send_request(SVC, "Configure", b"c")
    (cfg,) = plugin.receive_data(runtime.data_to_send())
    runtime.send_request(SVC, "Nope", b"")
    plugin.receive_data(runtime.data_to_send())  # queues an Unimplemented answer
    with pytest.raises(RemoteProtocolError):
        plugin.receive_data(mux.HEADER.pack(mux.PLUGIN_CONN, 0xFFFFFFFF))
    assert isinstance(plugin.error, RemoteProtocolError)
    assert plugin.data_to_send() == b""  # nothing more is sent to that peer
    for use in (
        lambda: plugin.receive_data(b""),
        lambda: plugin.send_response(cfg.stream_id, b""),
        lambda: plugin.send_error(cfg.stream_id, Code.INTERNAL, ""),
        lambda: plugin.send_request(RUNTIME_SERVICE, "UpdateContainers", b""),
    ):
        with pytest.raises(LocalProtocolError, match="closed after the peer broke"):
            use()
    plugin.cancel(1)  # a deadline firing after the error is not a misuse
