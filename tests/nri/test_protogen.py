"""The committed protobuf modules are what proto/ generates; unknown fields survive."""

from __future__ import annotations

import re

import pytest
from google.protobuf import unknown_fields

from nri_plugin.nri import protogen
from nri_plugin.nri.pb import nri_pb2 as pb

# The generator stamps its own protobuf version into the module; a newer grpcio-tools
# changes only those lines. What must match is everything else (the descriptor).
_VERSION_LINES = re.compile(
    rb"^# Protobuf Python Version: .*$|ValidateProtobufRuntimeVersion\([^)]*\)", re.M
)


def test_committed_modules_are_fresh(tmp_path):
    pytest.importorskip("grpc_tools", reason="grpcio-tools (test extra) regenerates pb/")
    written = protogen.generate(tmp_path)
    for path in written:
        committed = (protogen.PB_DIR / path.name).read_bytes()
        fresh = path.read_bytes()
        assert _VERSION_LINES.sub(b"", committed) == _VERSION_LINES.sub(b"", fresh), (
            f"nri_plugin/nri/pb/{path.name} is stale: run `python -m nri_plugin.nri.protogen` "
            "and commit it"
        )


def test_protogen_reports_protoc_failure(tmp_path):
    pytest.importorskip("grpc_tools")
    (tmp_path / "nri.proto").write_text('syntax = "proto3"; message {')
    (tmp_path / "ttrpc.proto").write_text('syntax = "proto3";')
    with pytest.raises(protogen.ProtogenError, match="protoc exited"):
        protogen.generate(tmp_path / "out", proto_dir=tmp_path)


def test_unknown_fields_survive_decode_and_reencode():
    # A newer runtime adds field 99 to Container and field 50 to the adjustment; a
    # plugin that decodes, edits and re-encodes must pass them on untouched.
    ctr = pb.Container(id="c1", name="work")
    extra = b"\x9a\x06\x05hello" + b"\x90\x03\x07"  # field 99 (bytes), field 50 (varint)
    decoded = pb.Container.FromString(ctr.SerializeToString() + extra)
    assert decoded.id == "c1"
    assert {f.field_number for f in unknown_fields.UnknownFieldSet(decoded)} == {99, 50}
    decoded.annotations["k"] = "v"
    again = pb.Container.FromString(decoded.SerializeToString())
    assert again.annotations["k"] == "v"
    assert extra in decoded.SerializeToString() or sorted(
        (f.field_number, f.data) for f in unknown_fields.UnknownFieldSet(again)
    ) == [(50, 7), (99, b"hello")]
    # Nested: unknown field inside a sub-message of a request.
    req = pb.CreateContainerRequest(container=pb.Container(id="x"))
    raw = req.SerializeToString()
    inner = pb.Container(id="x").SerializeToString() + extra
    raw_with = b"\x12" + bytes([len(inner)]) + inner
    assert raw != raw_with
    decoded_req = pb.CreateContainerRequest.FromString(raw_with)
    assert (
        pb.CreateContainerRequest.FromString(decoded_req.SerializeToString())
        .container.SerializeToString()
        .endswith(extra)
    )
