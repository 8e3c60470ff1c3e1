"""nri.wire: a message's top-level fields found in its bytes agree with protobuf's own
parse, and a repeated message field decoded element by element is the field; a large
ttrpc frame is held once, from the decoder's buffer to the request's payload."""

from __future__ import annotations

import pytest
from google.protobuf.message import DecodeError
from hypothesis import given, settings
from hypothesis import strategies as st

from nri_plugin.nri.core import PLUGIN_SERVICE
from nri_plugin.nri.errors import Code, RpcError
from nri_plugin.nri.pb import nri_pb2 as pb
from nri_plugin.nri.pb import ttrpc_pb2
from nri_plugin.nri.stub import Stub
from nri_plugin.nri.ttrpc import (
    LARGE_FRAME,
    TYPE_REQUEST,
    Frame,
    FrameDecoder,
    ServerCore,
    encode_frame,
    encode_request,
)
from nri_plugin.nri.wire import LazyMessages, read_fields

PODS, CONTAINERS, MORE = 1, 2, 3
_PAYLOAD_TAG = 3 << 3 | 2  # ttrpc.Request's payload, length-delimited

texts = st.text(max_size=40)
containers = st.builds(
    lambda cid, pod, annotations, state, created: pb.Container(
        id=cid, pod_sandbox_id=pod, annotations=annotations, state=state, created_at=created
    ),
    texts,
    texts,
    st.dictionaries(texts, texts, max_size=3),
    st.integers(0, 4),
    st.integers(0, 2**63 - 1),
)
pods = st.builds(lambda pid, ns: pb.PodSandbox(id=pid, namespace=ns), texts, texts)


@settings(max_examples=80, deadline=None)
@given(
    st.lists(pods, max_size=4), st.lists(containers, max_size=6), st.booleans(), st.integers(1, 3)
)
def test_fields_and_lazy_elements_match_the_parse(pod_list, container_list, more, copies):
    payloads = [
        pb.SynchronizeRequest(
            pods=pod_list, containers=container_list, more=more
        ).SerializeToString()
        for _ in range(copies)
    ]
    lazy: LazyMessages[pb.Container] = LazyMessages(pb.Container)
    for payload in payloads:
        found = read_fields(payload)
        assert (found.count(PODS), found.count(CONTAINERS)) == (len(pod_list), len(container_list))
        assert bool(found.varints.get(MORE)) == more
        if CONTAINERS in found.spans:
            lazy.add(payload, found.spans[CONTAINERS])
    assert len(lazy) == len(container_list) * copies
    assert list(lazy) == container_list * copies
    assert list(lazy) == list(lazy)  # each pass decodes them again


@given(st.lists(containers, min_size=1, max_size=4), st.data())
def test_a_cut_message_is_refused_as_protobuf_refuses_it(container_list, data):
    payload = pb.SynchronizeRequest(containers=container_list).SerializeToString()
    cut = payload[: data.draw(st.integers(1, len(payload) - 1))]
    try:
        pb.SynchronizeRequest.FromString(cut)
    except DecodeError:
        with pytest.raises(DecodeError):
            found = read_fields(cut)
            lazy: LazyMessages[pb.Container] = LazyMessages(pb.Container)
            lazy.add(cut, found.spans.get(CONTAINERS, []))  # type: ignore[arg-type]
            list(lazy)


def test_a_malformed_container_refuses_its_part_and_the_rest_of_that_synchronize():
    synced = []

    class Plugin:
        def synchronize(self, pods, containers):
            synced.append(len(containers))

    route = Stub(Plugin(), name="t", idx="01").routes[(PLUGIN_SERVICE, "Synchronize")]
    # Field 2 (a container) whose bytes are a string field with a length past its end.
    bad = bytes([CONTAINERS << 3 | 2, 2, 0x0A, 0x05])
    with pytest.raises(RpcError) as refused:
        route(bad + pb.SynchronizeRequest(more=True).SerializeToString())
    assert refused.value.code == Code.INVALID_ARGUMENT
    with pytest.raises(RpcError):  # which part was last is unknown: the next fails too
        route(pb.SynchronizeRequest(containers=[pb.Container(id="a")]).SerializeToString())
    assert synced == []


kvs = st.lists(st.tuples(texts, texts), max_size=3)


@settings(max_examples=40, deadline=None)
@given(
    texts, texts, st.binary(max_size=64), st.integers(-(2**63), 2**63 - 1), kvs, st.integers(1, 5)
)
def test_a_large_request_reads_as_protobuf_reads_it_its_payload_not_copied(
    service, method, tail, timeout, metadata, chunks
):
    payload = bytes(LARGE_FRAME) + tail
    data = encode_request(service, method, payload, timeout, metadata)
    core = ServerCore(lambda s, m: True)
    frame = encode_frame(1, TYPE_REQUEST, data)
    decoder = FrameDecoder()
    step = len(frame) // chunks + 1
    frames = [f for i in range(0, len(frame), step) for f in decoder.feed(frame[i : i + step])]
    (whole,) = frames
    received, answer = core.receive(whole)
    req = ttrpc_pb2.Request.FromString(data)
    assert answer == b"" and received is not None
    assert (received.service, received.method, received.timeout_nano, received.metadata) == (
        req.service,
        req.method,
        req.timeout_nano,
        tuple((kv.key, kv.value) for kv in req.metadata),
    )
    assert isinstance(received.payload, memoryview) and received.payload == payload
    assert received.payload.obj is whole.data  # a view of the frame's buffer


def test_a_large_frame_among_others_is_cut_as_any_frame():
    big = encode_frame(1, TYPE_REQUEST, encode_request("s", "m", bytes(LARGE_FRAME)))
    small = encode_frame(3, TYPE_REQUEST, encode_request("s", "m", b"x"))
    decoder = FrameDecoder()
    frames = decoder.feed(big[:100]) + decoder.feed(big[100:] + small)
    assert [(f.stream_id, len(f.data)) for f in frames] == [
        (1, len(big) - 10),
        (3, len(small) - 10),
    ]
    assert decoder.buffered == 0


def test_a_malformed_large_request_is_refused_as_a_small_one_is():
    core = ServerCore(lambda s, m: True)
    bad = bytes([_PAYLOAD_TAG]) + b"\xff\xff\xff\x7f" + bytes(LARGE_FRAME)  # length past end
    received, answer = core.receive(Frame(1, TYPE_REQUEST, 0, bad))
    assert received is None and b"malformed ttrpc request" in answer
    not_utf8 = encode_request("s", "m", bytes(LARGE_FRAME))
    not_utf8 = not_utf8[:2] + b"\xff" + not_utf8[3:]  # the service's one byte
    received, answer = core.receive(Frame(3, TYPE_REQUEST, 0, not_utf8))
    assert received is None and b"malformed ttrpc request" in answer
