"""Replay the recorded containerd sessions (tests/data/golden) through our transport."""

from __future__ import annotations

from google.protobuf import unknown_fields

from nri_plugin.nri import mux
from nri_plugin.nri.core import NriCore, Role
from nri_plugin.nri.pb import nri_pb2 as pb
from nri_plugin.nri.pb import ttrpc_pb2
from nri_plugin.nri.stub import PLUGIN_SERVICE, RUNTIME_SERVICE, Stub
from nri_plugin.nri.ttrpc import TYPE_REQUEST, TYPE_RESPONSE, RequestReceived
from tests.support.nri_golden import (
    GOLDEN_DIR,
    GOLDEN_FILES,
    REPO,
    GoRefAllEvents,
    GoRefPlugin,
    load_golden,
)


def _request_class(method: str):
    return pb.StateChangeEvent if method == "StateChange" else getattr(pb, method + "Request")


def test_recordings_ship_with_the_repository():
    """A clone of the repository alone replays them: nothing outside it is needed."""
    assert GOLDEN_DIR.is_relative_to(REPO)
    assert all((GOLDEN_DIR / name).stat().st_size > 0 for name in GOLDEN_FILES)


def test_every_runtime_message_decodes(golden):
    frames = golden.frames("r2p")
    methods = []
    for conn, frame in frames:
        if conn == mux.PLUGIN_CONN:
            assert frame.type == TYPE_REQUEST and frame.stream_id % 2 == 1
            req = ttrpc_pb2.Request.FromString(frame.data)
            assert req.service == PLUGIN_SERVICE
            msg = _request_class(req.method).FromString(req.payload)
            # Our schema covers everything these runtimes send: nothing left unknown.
            assert not list(unknown_fields.UnknownFieldSet(msg)), req.method
            assert type(msg).FromString(msg.SerializeToString()) == msg
            methods.append(req.method)
            if req.method == "Synchronize":
                assert len(msg.pods) >= 3 and msg.containers and not msg.more
            if req.method == "CreateContainer":
                assert msg.container.name == "work"
                assert "sla.nri.io/container.work" in msg.pod.annotations
        else:
            assert conn == mux.RUNTIME_CONN and frame.type == TYPE_RESPONSE
            resp = ttrpc_pb2.Response.FromString(frame.data)
            assert resp.status.code == 0
    assert methods[:2] == ["Configure", "Synchronize"]
    assert "CreateContainer" in methods
    if "1.7.34" in golden.name:
        assert "RemoveContainer" not in methods and "StateChange" in methods
    else:
        assert "StateChange" not in methods and methods[-1] in (
            "RemoveContainer",
            "RemovePodSandbox",
        )


def test_runtime_mux_frames_respect_4096_and_plugin_frames_parse(golden):
    # containerd cuts its 13,804-byte Synchronize into frames; check what we rely on.
    for direction in ("r2p", "p2r"):
        assert golden.frames(direction)
    stream = golden.stream("r2p")
    pos, sizes = 0, []
    while pos < len(stream):
        _, length = mux.HEADER.unpack_from(stream, pos)
        sizes.append(length)
        pos += mux.HEADER_LEN + length
    assert pos == len(stream)
    if golden.name == "containerd-2.3.4.jsonl":
        assert 4096 in sizes and 9718 in sizes


def _replay(golden, plugin) -> tuple[bytes, Stub]:
    """Run the recorded runtime bytes through our stub (sans-IO) and return the bytes
    our plugin side would have written, in order."""
    stub = Stub(plugin, name="goref", idx="50")
    register = next(f for c, f in golden.frames("p2r") if c == mux.RUNTIME_CONN)
    timeout = ttrpc_pb2.Request.FromString(register.data).timeout_nano
    core = NriCore(Role.PLUGIN, lambda s, m: (s, m) in stub.routes)
    core.send_request(
        RUNTIME_SERVICE, "RegisterPlugin", stub.registration_request().SerializeToString(), timeout
    )
    written = [core.data_to_send()]
    for direction, data in golden.records:
        if direction != "r2p":
            continue
        events = core.receive_data(data)
        assert core.data_to_send() == b""  # the core rejected nothing on its own
        for event in events:
            if isinstance(event, RequestReceived):
                payload = stub.routes[(event.service, event.method)](event.payload)
                assert isinstance(payload, bytes)
                core.send_response(event.stream_id, payload)
        written.append(core.data_to_send())
    return b"".join(written), stub


def test_replay_matches_reference_plugin_byte_for_byte(golden):
    plugin = GoRefAllEvents() if "all-events" in golden.name else GoRefPlugin()
    ours, stub = _replay(golden, plugin)
    # RegisterPlugin request, Configure response (events mask), the CreateContainer
    # adjustment and every empty answer: identical bytes, mux headers included.
    assert ours == golden.stream("p2r")
    assert stub.events == (0x67F if "all-events" in golden.name else 0x608)
    names = [c[0] for c in plugin.calls]
    assert names.count("create_container") == 1
    assert "remove_container" in names  # via StateChange on 1.7.34
    if "all-events" in golden.name:
        assert names[0] == "run_pod_sandbox" and names[-1] == "remove_pod_sandbox"
        assert len(names) == 9


def test_configure_reports_runtime_identity():
    # 1.7.34 sends no NRI version: its release tells it (nri_plugin.nri.levels).
    for name, version, nri, source in (
        ("containerd-2.3.4.jsonl", "2.3.4+unknown", "v0.12.0", "sent"),
        (
            "containerd-1.7.34.jsonl",
            "1.7.34+unknown",
            "v0.8.0",
            "containerd 1.7.34+unknown (release table)",
        ),
    ):
        _, stub = _replay(load_golden(name), GoRefPlugin())
        assert (stub.runtime_name, stub.runtime_version, stub.nri_version) == (
            "containerd",
            version,
            nri,
        )
        assert stub.nri_level.source == source
        assert stub.request_timeout_ms == 2000


def test_adjustment_response_bytes():
    g = load_golden("containerd-2.3.4.jsonl")
    responses = [f for c, f in g.frames("p2r") if c == mux.PLUGIN_CONN]
    adjust = [f for f in responses if f.data][-1]
    resp = pb.CreateContainerResponse.FromString(ttrpc_pb2.Response.FromString(adjust.data).payload)
    assert resp.adjust.annotations["sla.nri.io/applied-by"] == "goref"
    assert resp.adjust.linux.resources.cpu.quota.value == 50000
    assert resp.adjust.linux.resources.cpu.period.value == 100000
    assert resp.adjust.linux.resources.memory.limit.value == 268435456
