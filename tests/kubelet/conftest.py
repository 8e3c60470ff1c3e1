"""Both flavours of the fake kubelet: built from this project's protos (always) and from
the kubelet's published protos (when NRI_SLA_KUBELET_PROTOS names the kubelet repository's
pkg/apis directory, e.g. a checkout of github.com/kubernetes/kubelet)."""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

import pytest

from tests.support.kubelet_harness import PROJECT_STUBS, FakeKubelet, Stubs

PROTOS_ENV = "NRI_SLA_KUBELET_PROTOS"
# the two APIs nri-sla speaks, as laid out under the kubelet's pkg/apis
PUBLISHED = ("deviceplugin/v1beta1/api.proto", "podresources/v1/api.proto")
# Kubelets up to 1.33 (v0.33.x) annotate these protos with gogoproto options, which steer
# Go code generation only (no wire effect): dropped so protoc needs no gogo.proto.
_GOGO = re.compile(
    r'^import "github.com/gogo/protobuf/gogoproto/gogo.proto";\n'
    r"|^option \(gogoproto\.[^;]*;\n|\s*\[\(gogoproto\.[^\]]*\]",
    re.M,
)


@pytest.fixture(scope="session")
def published_stubs(tmp_path_factory) -> Stubs:
    root = os.environ.get(PROTOS_ENV)
    if not root:
        pytest.skip(
            f"set {PROTOS_ENV} to the kubelet repository's pkg/apis directory "
            "(github.com/kubernetes/kubelet) to test against its published protos"
        )
    from nri_plugin.nri.protogen import run_protoc

    missing = [p for p in PUBLISHED if not (Path(root) / p).is_file()]
    assert not missing, f"{PROTOS_ENV}={root} has no {', '.join(missing)}"
    src = tmp_path_factory.mktemp("published-protos")
    for name in PUBLISHED:
        (src / name).parent.mkdir(parents=True)
        (src / name).write_text(_GOGO.sub("", (Path(root) / name).read_text()))
    out = tmp_path_factory.mktemp("published-stubs")
    run_protoc(
        [
            f"-I{src}",
            f"--python_out={out}",
            f"--grpc_python_out={out}",
            *(str(src / p) for p in PUBLISHED),
        ],
        ", ".join(PUBLISHED),
    )
    return Stubs("published", "deviceplugin.v1beta1.api_pb2", "podresources.v1.api_pb2", out)


@pytest.fixture(params=["project", "published"])
def stubs(request) -> Stubs:
    if request.param == "project":
        return PROJECT_STUBS
    return request.getfixturevalue("published_stubs")


@pytest.fixture
def sock_dir():
    # unix socket paths are limited to 107 bytes: pytest's tmp_path can be longer
    with tempfile.TemporaryDirectory(prefix="nri-sla-k") as d:
        yield Path(d)


@pytest.fixture
def make_kubelet(stubs, sock_dir):
    started: list[FakeKubelet] = []

    def start(podresources: bool = False) -> FakeKubelet:
        kubelet = FakeKubelet(
            stubs, sock_dir, sock_dir / "pod-resources.sock" if podresources else None
        )
        started.append(kubelet)
        return kubelet

    yield start
    for k in started:
        k.close()
