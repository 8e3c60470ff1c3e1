"""Property and fuzz tests of the decoders: random, truncated, huge and malformed input
never crashes the core (at worst it ends the connection with RemoteProtocolError),
memory stays bounded, bad streams are answered or dropped; any stream ids, StateChange
events and Synchronize part sequences keep to the protocol and the bounds."""

from __future__ import annotations

import asyncio
import itertools
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nri_plugin.nri import events as ev
from nri_plugin.nri import mux
from nri_plugin.nri.core import NriCore, Role
from nri_plugin.nri.errors import Code, RemoteProtocolError, RpcError
from nri_plugin.nri.pb import nri_pb2 as pb
from nri_plugin.nri.pb import ttrpc_pb2
from nri_plugin.nri.stub import (
    PLUGIN_SERVICE,
    RUNTIME_SERVICE,
    CreateResult,
    Stub,
    SyncLimits,
)
from nri_plugin.nri.ttrpc import (
    HEADER,
    MAX_STREAM_ID,
    TYPE_REQUEST,
    TYPE_RESPONSE,
    Frame,
    FrameDecoder,
    OversizedFrame,
    encode_frame,
    encode_request,
)

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _chunks(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in itertools.pairwise(points)]


@FAST
@given(
    st.lists(st.tuples(st.integers(1, 3), st.binary(max_size=9000)), max_size=6),
    st.lists(st.integers(0, 60000), max_size=12),
)
def test_mux_roundtrip_any_chunking(messages, cuts):
    wire = b"".join(mux.encode(conn, data) for conn, data in messages)
    dec = mux.MuxDecoder()
    got: dict[int, bytes] = {}
    for chunk in _chunks(wire, cuts):
        for conn, piece in dec.feed(chunk):
            got[conn] = got.get(conn, b"") + piece
    want: dict[int, bytes] = {}
    for conn, data in messages:
        if data:
            want[conn] = want.get(conn, b"") + data
    assert got == want and not dec.in_frame


@FAST
@given(
    st.lists(
        st.tuples(st.integers(0, 2**32 - 1), st.sampled_from([1, 2, 3, 7]), st.integers(0, 3000)),
        max_size=8,
    ),
    st.lists(st.integers(0, 30000), max_size=10),
)
def test_frame_decoder_bounded_and_exact(frames, cuts):
    limit = 1000
    wire = b"".join(encode_frame(sid, t, bytes([sid % 251]) * n) for sid, t, n in frames)
    dec = FrameDecoder(max_data=limit)
    out = []
    for chunk in _chunks(wire, cuts):
        out += dec.feed(chunk)
        assert dec.buffered <= limit + HEADER.size + len(chunk)
    expected = [
        OversizedFrame(sid, t, 0, n) if n > limit else Frame(sid, t, 0, bytes([sid % 251]) * n)
        for sid, t, n in frames
    ]
    assert out == expected and dec.buffered == 0


def _plugin_core() -> NriCore:
    stub = Stub(object(), name="fuzz", idx="01")
    return NriCore(Role.PLUGIN, lambda s, m: (s, m) in stub.routes)


@FAST
@given(st.binary(max_size=4000), st.lists(st.integers(0, 4000), max_size=8))
def test_random_bytes_never_crash_the_core(junk, cuts):
    core = _plugin_core()
    for chunk in _chunks(junk, cuts):
        try:
            core.receive_data(chunk)
        except RemoteProtocolError:
            # a mux length no peer sends: the connection ends, nothing more goes out
            assert core.error is not None and core.data_to_send() == b""
            return
        core.data_to_send()
        assert core.buffered <= 4 * 1024 * 1024 + 10 + len(chunk)


@FAST
@given(st.binary(max_size=300), st.integers(0, 2**32 - 1))
def test_bad_requests_get_an_answer_on_their_stream(payload, sid_seed):
    core = _plugin_core()
    sid = sid_seed | 1
    frame = encode_frame(sid, TYPE_REQUEST, payload)
    events = core.receive_data(mux.encode(mux.PLUGIN_CONN, frame))
    replies = core.data_to_send()
    if events:
        # decoded into a known method: the application answers it (not our concern)
        assert not replies
        return
    assert replies, "a request that cannot be served must be answered"
    (conn, piece), *_ = mux.MuxDecoder().feed(replies)
    assert conn == mux.PLUGIN_CONN
    (resp,) = FrameDecoder().feed(piece)
    assert resp.stream_id == sid and resp.type == TYPE_RESPONSE
    status = ttrpc_pb2.Response.FromString(resp.data).status
    assert status.code in (Code.INVALID_ARGUMENT, Code.UNIMPLEMENTED)


def test_truncated_golden_like_stream_is_held_not_misparsed():
    req = encode_request(
        PLUGIN_SERVICE,
        "Configure",
        pb.ConfigureRequest(runtime_name="containerd").SerializeToString(),
    )
    wire = mux.encode(mux.PLUGIN_CONN, encode_frame(1, TYPE_REQUEST, req))
    for cut in range(len(wire)):
        core = _plugin_core()
        assert core.receive_data(wire[:cut]) == []
        assert core.data_to_send() == b""
        (event,) = core.receive_data(wire[cut:])
        assert event.method == "Configure"


def test_huge_length_fields_cost_no_memory():
    core = _plugin_core()
    # ttrpc frame announcing 4 GiB, its "data" spread over legal-sized mux frames
    core.receive_data(mux.encode(mux.PLUGIN_CONN, HEADER.pack(0xFFFFFFF0, 1, TYPE_REQUEST, 0)))
    answer = core.data_to_send()
    ((_, piece),) = mux.MuxDecoder().feed(answer)
    (resp,) = FrameDecoder().feed(piece)
    assert ttrpc_pb2.Response.FromString(resp.data).status.code == Code.RESOURCE_EXHAUSTED
    junk = mux.encode(mux.PLUGIN_CONN, os.urandom(1 << 16), 1 << 16)
    for _ in range(160):  # 10 MiB of payload streams past
        assert core.receive_data(junk) == []
        assert core.buffered == 0
    # a mux frame announcing 4 GiB would swallow every later frame: the connection ends
    with pytest.raises(RemoteProtocolError):
        core.receive_data(mux.HEADER.pack(mux.PLUGIN_CONN, 0xFFFFFFFF) + b"x" * 100)
    assert core.buffered == 0


def test_live_stub_survives_garbage_over_a_real_socket(sock_dir):
    """Bad protobuf, oversized frame, even/reused ids, unknown conn: each answered or
    dropped; afterwards the same connection still serves a valid call."""

    class P:
        def create_container(self, pod, ctr):
            return CreateResult(pb.ContainerAdjustment(annotations={"ok": "1"}))

    async def main():
        path = os.path.join(sock_dir, "nri.sock")
        served = asyncio.get_running_loop().create_future()

        async def runtime(reader, writer):
            served.set_result((reader, writer))

        server = await asyncio.start_unix_server(runtime, path)
        stub = Stub(P(), name="fuzz", idx="01", socket_path=path, registration_timeout=30)
        task = asyncio.create_task(stub.run())
        reader, writer = await served
        conn1 = mux.PLUGIN_CONN

        def send(sid, data, type_=TYPE_REQUEST):
            writer.write(mux.encode(conn1, encode_frame(sid, type_, data)))

        async def status_of(sid):
            header = await reader.readexactly(8)
            conn, n = mux.HEADER.unpack(header)
            body = await reader.readexactly(n)
            while conn != conn1:  # skip the RegisterPlugin request on conn 2
                conn, n = mux.HEADER.unpack(await reader.readexactly(8))
                body = await reader.readexactly(n)
            length, got_sid, _, _ = HEADER.unpack_from(body)
            while len(body) < 10 + length:  # response spans several mux frames
                _, n = mux.HEADER.unpack(await reader.readexactly(8))
                body += await reader.readexactly(n)
            assert got_sid == sid
            return ttrpc_pb2.Response.FromString(body[10 : 10 + length])

        send(1, b"\xff\xff\xff\xff")
        assert (await status_of(1)).status.code == Code.INVALID_ARGUMENT
        send(3, encode_request(PLUGIN_SERVICE, "CreateContainer", b"\x0a\x05\x0a"))
        assert (await status_of(3)).status.code == Code.INVALID_ARGUMENT
        writer.write(mux.encode(conn1, HEADER.pack(5 << 20, 5, TYPE_REQUEST, 0)))
        for _ in range(5 * 16):
            writer.write(mux.encode(conn1, b"\0" * 65536, 65536))
        assert (await status_of(5)).status.code == Code.RESOURCE_EXHAUSTED
        send(4, b"")
        assert (await status_of(4)).status.code == Code.INVALID_ARGUMENT
        send(5, b"")
        assert (await status_of(5)).status.code == Code.INVALID_ARGUMENT
        writer.write(mux.encode(9, b"unknown conn"))
        send(7, b"", TYPE_RESPONSE)  # wrong direction: dropped
        good = pb.CreateContainerRequest(
            pod=pb.PodSandbox(id="p"), container=pb.Container(id="c", name="c")
        )
        send(9, encode_request(PLUGIN_SERVICE, "CreateContainer", good.SerializeToString()))
        resp = await status_of(9)
        assert not resp.HasField("status")
        assert pb.CreateContainerResponse.FromString(resp.payload).adjust.annotations["ok"]
        assert stub._conn.core.buffered == 0
        assert not task.done()
        writer.close()
        stub.stop()
        await asyncio.gather(task, return_exceptions=True)
        server.close()

    asyncio.run(main())


@FAST
@given(
    st.lists(st.tuples(st.booleans(), st.binary(max_size=6000)), min_size=1, max_size=8),
    st.lists(st.integers(0, 100000), max_size=12),
)
def test_interleaved_calls_both_ways_survive_any_chunking(calls, cuts):
    """Plugin and runtime calling each other at once, bytes cut anywhere: every call
    arrives intact and in order, every answer reaches its caller."""
    plugin = NriCore(Role.PLUGIN, lambda s, m: True)
    runtime = NriCore(Role.RUNTIME, lambda s, m: True)
    wire_to_plugin, wire_to_runtime = b"", b""
    sent_by_runtime, sent_by_plugin = [], []
    for from_runtime, payload in calls:
        if from_runtime:
            sid = runtime.send_request(PLUGIN_SERVICE, "CreateContainer", payload)
            wire_to_plugin += runtime.data_to_send()
            sent_by_runtime.append((sid, payload))
        else:
            sid = plugin.send_request(RUNTIME_SERVICE, "UpdateContainers", payload)
            wire_to_runtime += plugin.data_to_send()
            sent_by_plugin.append((sid, payload))
    got_plugin = [e for c in _chunks(wire_to_plugin, cuts) for e in plugin.receive_data(c)]
    got_runtime = [e for c in _chunks(wire_to_runtime, cuts) for e in runtime.receive_data(c)]
    assert [(e.stream_id, e.payload) for e in got_plugin] == sent_by_runtime
    assert [(e.stream_id, e.payload) for e in got_runtime] == sent_by_plugin
    # answer in reverse order: responses are matched by id, not position
    for e in reversed(got_plugin):
        plugin.send_response(e.stream_id, e.payload[::-1])
    answers = plugin.data_to_send()
    done = [e for c in _chunks(answers, cuts) for e in runtime.receive_data(c)]
    assert sorted((e.stream_id, e.payload) for e in done) == sorted(
        (sid, p[::-1]) for sid, p in sent_by_runtime
    )
    assert runtime.client.pending == set() and plugin.buffered == runtime.buffered == 0


@FAST
@given(
    st.lists(
        st.one_of(st.integers(0, MAX_STREAM_ID), st.integers(MAX_STREAM_ID - 8, MAX_STREAM_ID)),
        max_size=12,
    )
)
def test_any_stream_ids_are_served_rejected_or_end_the_connection_after_the_last(ids):
    core = _plugin_core()
    last = 0
    for sid in ids:
        wire = mux.encode(
            mux.PLUGIN_CONN,
            encode_frame(sid, TYPE_REQUEST, encode_request(PLUGIN_SERVICE, "Shutdown", b"")),
        )
        if last == MAX_STREAM_ID:
            with pytest.raises(RemoteProtocolError, match="used up"):
                core.receive_data(wire)
            return
        events = core.receive_data(wire)
        if sid % 2 and sid > last:
            assert [e.stream_id for e in events] == [sid]
            core.send_response(sid, b"")
            last = sid
        else:
            assert events == []
        (_conn, piece), *_ = mux.MuxDecoder().feed(core.data_to_send())
        (frame,) = FrameDecoder().feed(piece)
        assert frame.stream_id == sid  # answered (served or rejected) on its own stream


class _Everything:
    """Has every handler; records which ran."""

    def __init__(self) -> None:
        self.ran: list[str] = []
        for name in ev.HANDLERS.values():
            setattr(self, name, lambda *args, _name=name: self.ran.append(_name))


@FAST
@given(st.lists(st.integers(-1, 20), max_size=10))
def test_state_change_runs_only_non_adjusting_handlers(event_numbers):
    plugin = _Everything()
    route = Stub(plugin, name="t", idx="01").routes[(PLUGIN_SERVICE, "StateChange")]
    pod = pb.PodSandbox(name="p")
    ctr = pb.Container(name="c")
    for number in event_numbers:
        payload = pb.StateChangeEvent(event=number, pod=pod, container=ctr)
        try:
            assert route(payload.SerializeToString()) == b""
        except RpcError as exc:
            assert number in ev.HANDLERS and number not in ev.NON_ADJUSTING_EVENTS
            assert exc.code == Code.INVALID_ARGUMENT
    ran = [ev.HANDLERS[n] for n in event_numbers if n in ev.NON_ADJUSTING_EVENTS]
    assert plugin.ran == ran
    assert "create_container" not in plugin.ran and "update_container" not in plugin.ran


@FAST
@given(
    st.lists(st.tuples(st.integers(0, 4), st.integers(0, 4), st.booleans()), max_size=14),
    st.integers(1, 6),
    st.integers(1, 8),
)
def test_synchronize_parts_hand_on_only_whole_states_within_bounds(
    parts, max_parts, max_containers
):
    synced: list[tuple[int, int]] = []

    class Plugin:
        def synchronize(self, pods, containers):
            synced.append((len(pods), len(containers)))

    limits = SyncLimits(parts=max_parts, pods=8, containers=max_containers, bytes=1 << 20)
    route = Stub(Plugin(), name="t", idx="01", sync_limits=limits).routes[
        (PLUGIN_SERVICE, "Synchronize")
    ]
    expected: list[tuple[int, int]] = []
    n_parts = pods = containers = 0
    refused = False  # once over a bound, every later part of that Synchronize fails
    for n_pods, n_ctrs, more in parts:
        n_parts, pods, containers = n_parts + 1, pods + n_pods, containers + n_ctrs
        refused = refused or not (
            n_parts <= max_parts and pods <= 8 and containers <= max_containers
        )
        req = pb.SynchronizeRequest(
            pods=[pb.PodSandbox()] * n_pods, containers=[pb.Container()] * n_ctrs, more=more
        )
        try:
            route(req.SerializeToString())
        except RpcError as exc:
            assert refused and exc.code == Code.RESOURCE_EXHAUSTED
        else:
            assert not refused
        if not more:
            if not refused:
                expected.append((pods, containers))
            n_parts = pods = containers = 0
            refused = False
    assert synced == expected
