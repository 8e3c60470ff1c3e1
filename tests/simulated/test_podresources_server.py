"""The simulated kubelet's PodResources server, asked through nri-sla's own client (and, for
GetAllocatableResources, which the client does not call, through the generated stub)."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from nri_plugin.kubelet.errors import KubeletApiError
from nri_plugin.kubelet.pb import podresources_v1_pb2 as pr
from nri_plugin.kubelet.pb import podresources_v1_pb2_grpc as pr_grpc
from nri_plugin.kubelet.podresources import PodDevices, PodResourcesClient
from nri_plugin.posixfs import issock
from nri_plugin.simulated.deviceplugin import DevicePlugin
from nri_plugin.simulated.kubelet import Kubelet
from nri_plugin.simulated.podresources_server import PodResourcesServer
from nri_plugin.topology.snapshot import load_snapshot

REPO = Path(__file__).resolve().parents[2]
INVENTORY = load_snapshot(REPO / "examples" / "dgx-like.yaml").inventory
GPU = "nvidia.com/gpu"


@pytest.fixture
def socket_path() -> Iterator[str]:
    # unix socket paths are limited to 107 bytes: pytest's tmp_path can be longer
    with tempfile.TemporaryDirectory(prefix="nri-sla-pr") as d:
        yield str(Path(d) / "kubelet.sock")


@pytest.fixture
def kubelet() -> Kubelet:
    return Kubelet(DevicePlugin(INVENTORY, "envvar"))


def test_list_and_get_follow_the_books(kubelet, socket_path):
    train = kubelet.admit("uid-1", "ml", "train", "main", 2)
    side = kubelet.admit("uid-1", "ml", "train", "side", 1)
    kubelet.admit("uid-1", "ml", "train", "nogpu", 0)  # not in the books
    with (
        PodResourcesServer(kubelet, socket_path),
        PodResourcesClient(socket_path, timeout=5) as client,
    ):
        expected = PodDevices(
            "ml", "train", {"main": {GPU: train.device_ids}, "side": {GPU: side.device_ids}}
        )
        assert client.list() == (expected,)
        assert client.get("ml", "train") == expected
        other = kubelet.admit("uid-2", "batch", "job", "c", 3)
        assert client.get("batch", "job").devices("c") == {GPU: other.device_ids}
        kubelet.remove_pod("uid-1")  # the server answers from the books as they are now
        assert [(p.namespace, p.name) for p in client.list()] == [("batch", "job")]
        assert client.get("ml", "train") is None
        assert not client._get_unimplemented  # answered by Get, not by the List fallback


def test_an_unknown_pod_is_answered_as_the_kubelet_does(kubelet, socket_path):
    with (
        PodResourcesServer(kubelet, socket_path),
        grpc.insecure_channel(f"unix://{socket_path}") as channel,
    ):
        stub = pr_grpc.PodResourcesListerStub(channel)
        with pytest.raises(grpc.RpcError) as err:
            stub.Get(pr.GetPodResourcesRequest(pod_name="gone", pod_namespace="ml"), timeout=5)
    assert err.value.code() == grpc.StatusCode.UNKNOWN
    assert err.value.details() == "pod gone in namespace ml not found"


def test_allocatable_is_every_advertised_device(kubelet, socket_path):
    kubelet.admit("uid-1", "ml", "train", "main", 5)  # allocated devices stay allocatable
    with (
        PodResourcesServer(kubelet, socket_path),
        grpc.insecure_channel(f"unix://{socket_path}") as channel,
    ):
        answer = pr_grpc.PodResourcesListerStub(channel).GetAllocatableResources(
            pr.AllocatableResourcesRequest(), timeout=5
        )
    assert [(d.resource_name, tuple(d.device_ids)) for d in answer.devices] == [
        (GPU, tuple(g.uuid for g in INVENTORY.gpus))
    ]


def test_stopped_the_socket_is_gone_and_the_client_says_so(kubelet, socket_path):
    server = PodResourcesServer(kubelet, socket_path).start()
    assert issock(socket_path)
    server.stop()
    assert not Path(socket_path).exists()
    with (
        PodResourcesClient(socket_path, timeout=1) as client,
        pytest.raises(KubeletApiError, match="the socket does not exist"),
    ):
        client.list()
    with (
        PodResourcesServer(kubelet, socket_path),
        PodResourcesClient(socket_path, timeout=5) as client,
    ):  # served again
        assert client.list() == ()
