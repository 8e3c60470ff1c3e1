"""The committed kubelet API modules are what proto/kubelet/ generates."""

from __future__ import annotations

import re

import pytest

from nri_plugin.kubelet import protogen
from nri_plugin.nri.protogen import ProtogenError

# The generators stamp their own protobuf/grpcio versions into the modules; a newer
# grpcio-tools changes only those lines. What must match is everything else.
_VERSION_LINES = re.compile(
    rb"^# Protobuf Python Version: .*$|ValidateProtobufRuntimeVersion\([^)]*\)"
    rb"|^GRPC_GENERATED_VERSION = .*$",
    re.M,
)


def test_committed_modules_are_fresh(tmp_path):
    pytest.importorskip("grpc_tools", reason="grpcio-tools (test extra) regenerates pb/")
    written = protogen.generate(tmp_path)
    assert len(written) == 8
    for path in written:
        committed = (protogen.REPO / protogen.PACKAGE_PATH / path.name).read_bytes()
        assert _VERSION_LINES.sub(b"", committed) == _VERSION_LINES.sub(b"", path.read_bytes()), (
            f"{protogen.PACKAGE_PATH}/{path.name} is stale: run "
            "`python -m nri_plugin.kubelet.protogen` and commit it"
        )


def test_services_are_where_the_kubelet_dials():
    from nri_plugin.kubelet.pb import deviceplugin_v1beta1_pb2 as dp
    from nri_plugin.kubelet.pb import podresources_v1_pb2 as pr

    services = {
        s.full_name: sorted(m.name for m in s.methods)
        for mod in (dp, pr)
        for s in mod.DESCRIPTOR.services_by_name.values()
    }
    assert services == {
        "v1beta1.Registration": ["Register"],
        "v1beta1.DevicePlugin": [
            "Allocate",
            "GetDevicePluginOptions",
            "GetPreferredAllocation",
            "ListAndWatch",
            "PreStartContainer",
        ],
        "v1.PodResourcesLister": ["Get", "GetAllocatableResources", "List"],
    }
    stream = dp.DESCRIPTOR.services_by_name["DevicePlugin"].methods_by_name["ListAndWatch"]
    assert stream.server_streaming and not stream.client_streaming


def test_protoc_failure_is_reported(tmp_path):
    pytest.importorskip("grpc_tools")
    for name in protogen.PROTOS:
        (tmp_path / name).write_text('syntax = "proto3"; message {')
    with pytest.raises(ProtogenError, match="protoc exited"):
        protogen.generate(tmp_path / "out", proto_dir=tmp_path)
