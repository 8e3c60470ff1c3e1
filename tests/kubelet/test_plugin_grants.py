"""The NRI plugin asks the kubelet's PodResources (a fake kubelet, both stub flavours)
which GPUs a container holds when its only GPU evidence is NVIDIA_VISIBLE_DEVICES (the
NVIDIA device plugin's envvar strategy): the kubelet's books are the grant, the env never
is."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from nri_plugin.config.values import GpuConfig, NodeConfig, Permissions
from nri_plugin.core.nodestate import NodeState
from nri_plugin.nri.errors import RpcError
from nri_plugin.nri.pb import nri_pb2 as pb
from nri_plugin.plan.allocator import Allocator
from nri_plugin.plan.rt_budget import RtBudget
from nri_plugin.plugin.handlers import SlaPlugin
from nri_plugin.simulated.runtime import make_container, make_pod
from nri_plugin.topology.snapshot import load_snapshot

DGX = load_snapshot(Path(__file__).resolve().parents[2] / "examples" / "dgx-like.yaml")
UUID = [g.uuid for g in DGX.inventory.gpus]
GPU = "nvidia.com/gpu"


def plugin_on(socket: Path) -> SlaPlugin:
    config = NodeConfig(
        permissions=Permissions(gpus=("*",)), gpu=GpuConfig(podresources_socket=str(socket))
    )
    return SlaPlugin(
        NodeState(
            config, 2, allocator=Allocator(DGX.topology, DGX.inventory), rt_budget=RtBudget(0.5)
        )
    )


def books(*containers: tuple[str, str, str, list[str]]) -> list[dict]:
    """The kubelet's PodResources: (namespace, pod, container, GPU device ids)."""
    return [
        {
            "namespace": ns,
            "name": pod,
            "containers": [
                {
                    "name": name,
                    "devices": [{"resource_name": GPU, "device_ids": ids}] if ids else [],
                }
            ],
        }
        for ns, pod, name, ids in containers
    ]


def create(plugin: SlaPlugin, pod_name: str, env: str, sla: str | None = None):
    pod = make_pod(pod_name, namespace="ml", annotations={"sla.nri.io/pod": sla} if sla else {})
    ctr = make_container(pod, "main", env=(f"NVIDIA_VISIBLE_DEVICES={env}",))
    return pod, ctr, plugin.create_container(pod, ctr)


@pytest.fixture
def kubelet(make_kubelet, sock_dir):
    k = make_kubelet(podresources=True)
    return k, sock_dir / "pod-resources.sock"


def test_envvar_grant_is_read_from_the_kubelets_books(kubelet):
    fake, socket = kubelet
    fake.command(
        "set_pods", pods=books(("ml", "trainer", "main", UUID[4:6]), ("ml", "claimer", "main", []))
    )
    plugin = plugin_on(socket)
    _, ctr, result = create(
        plugin, "trainer", f"{UUID[4]},{UUID[5]}", "gpu: {count: 2, topology: nvlink}"
    )
    record = json.loads(result.adjustment.annotations["sla.nri.io/applied"])
    assert record["placement_record"]["gpus"] == UUID[4:6]
    assert result.adjustment.linux.resources.cpu.mems == "1"  # the GPUs' node
    assert plugin.registry.get(ctr.id).gpus  # held: it can open them
    # the same env written by a pod the kubelet granted nothing: no grant
    with pytest.raises(RpcError) as refused:
        create(plugin, "claimer", ",".join(UUID), "gpu: {count: 1}")
    assert "no device plugin granted this container a GPU" in str(refused.value)
    assert "is not a grant" in str(refused.value)


def test_synchronize_asks_the_kubelet_once_for_every_env_only_container(kubelet):
    fake, socket = kubelet
    fake.command(
        "set_pods", pods=books(("ml", "a", "main", UUID[0:1]), ("ml", "b", "main", UUID[1:2]))
    )
    plugin = plugin_on(socket)
    pods, ctrs = [], []
    for name, env in (("a", UUID[0]), ("b", "all")):  # b's env says all: its grant is 1
        pod = make_pod(name, namespace="ml")
        pods.append(pod)
        ctr = make_container(pod, "main", env=(f"NVIDIA_VISIBLE_DEVICES={env}",))
        ctr.state = pb.CONTAINER_RUNNING
        ctrs.append(ctr)
    plugin.synchronize(pods, ctrs)
    plugin.restorer.restore()
    held = plugin.node.allocator.gpus_in_use()
    assert held == {0: (ctrs[0].id,), 1: (ctrs[1].id,)}


def test_no_kubelet_socket_means_the_runtime_evidence_alone(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="nri_sla")
    plugin = plugin_on(tmp_path / "absent.sock")
    with pytest.raises(RpcError) as refused:
        create(plugin, "trainer", UUID[0], "gpu: {count: 1}")
    assert "no device plugin granted" in str(refused.value)
    assert not [r for r in caplog.records if "PodResources" in r.getMessage()]


def test_a_kubelet_that_fails_costs_one_warning_a_minute(kubelet, caplog):
    fake, socket = kubelet
    fake.close()  # the socket file may stay: a dead kubelet
    socket.unlink(missing_ok=True)
    import socket as sockets

    mute = sockets.socket(sockets.AF_UNIX)  # accepts, never answers
    mute.bind(str(socket))
    mute.listen(8)
    plugin = plugin_on(socket)
    plugin.kubelet.timeout = 0.2  # the connection is made at the first call
    caplog.set_level(logging.WARNING, logger="nri_sla.plugin.kubelet")
    for name in ("a", "b", "c"):
        with pytest.raises(RpcError):
            create(plugin, name, UUID[0], "gpu: {count: 1}")
    warnings = [r for r in caplog.records if "PodResources unavailable" in r.getMessage()]
    assert len(warnings) == 1 and "no answer within 0.2s" in warnings[0].fields["error"]
    mute.close()


def test_replica_ids_of_a_shared_resource_on_a_kubelet_without_get(kubelet):
    """Time-slicing renamed to nvidia.com/gpu.shared under the envvar strategy, on a kubelet
    whose Get is disabled (UNKNOWN): the List answers, `GPU-...::n` is a replica of its
    GPU, and two replicas of one GPU are shared by design."""
    fake, socket = kubelet
    replica = [
        {"resource_name": "nvidia.com/gpu.shared", "device_ids": [f"{UUID[4]}::{n}"]}
        for n in (1, 3)
    ]
    fake.command(
        "set_pods",
        get_disabled=True,
        pods=[
            {"namespace": "ml", "name": name, "containers": [{"name": "main", "devices": [d]}]}
            for name, d in zip(("a", "b"), replica, strict=True)
        ],
    )
    plugin = plugin_on(socket)
    for name in ("a", "b"):
        _, _, result = create(plugin, name, UUID[4], "gpu: {count: 1, topology: numa}")
        record = json.loads(result.adjustment.annotations["sla.nri.io/applied"])
        assert record["placement_record"]["gpus"] == [UUID[4]]
    [shared] = plugin.registry.shared()
    assert shared.intended and len(shared.containers) == 2


def test_dra_claims_reported_by_the_kubelet(kubelet):
    fake, socket = kubelet
    claim = "k8s.gpu.nvidia.com/claim=0b5e4c3a-1f2d-4e6b-9a8c-7d6e5f4a3b2c-gpu-6"
    fake.command(
        "set_pods",
        pods=[
            {
                "namespace": "ml",
                "name": "infer",
                "containers": [
                    {
                        "name": "main",
                        "dynamic_resources": [
                            {
                                "claim_name": "gpu",
                                "claim_namespace": "ml",
                                "claim_resources": [
                                    {
                                        "driver_name": "gpu.nvidia.com",
                                        "pool_name": "node-1",
                                        "device_name": "gpu-6",
                                        "cdi_devices": [
                                            {"name": "k8s.gpu.nvidia.com/device=gpu-6"},
                                            {"name": claim},
                                        ],
                                    }
                                ],
                            }
                        ],
                    }
                ],
            }
        ],
    )
    plugin = plugin_on(socket)
    _, _, result = create(plugin, "infer", UUID[6], "gpu: {count: 1}")
    record = json.loads(result.adjustment.annotations["sla.nri.io/applied"])
    assert record["placement_record"]["gpus"] == [UUID[6]]
