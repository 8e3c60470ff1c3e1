"""Over the runtime simulator, with the simulated kubelet and NVIDIA device plugin (and
DRA driver): every form NVIDIA's stack writes a GPU grant in is read as that grant. MIG
devices granted as device nodes (/dev/nvidia-caps), time-sliced replicas, DRA claims'
CDI names and PodResources claims; intended sharing is not a double grant, privileged
containers are system holders, and a volume at the device-list path that is not the
device plugin's /dev/null mount grants nothing."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import tempfile
from pathlib import Path

import pytest

from nri_plugin.config.values import DEFAULT_GRANT_CDI_KINDS, GpuConfig, NodeConfig, Permissions
from nri_plugin.core.nodestate import NodeState
from nri_plugin.nri.pb import nri_pb2 as pb
from nri_plugin.ops.metrics import Metrics
from nri_plugin.plan.allocator import Allocator
from nri_plugin.plan.rt_budget import RtBudget
from nri_plugin.simulated import dra
from nri_plugin.simulated.cdi import CdiRegistry
from nri_plugin.simulated.deviceplugin import STRATEGIES, DevicePlugin, nvidia_cdi_specs
from nri_plugin.simulated.kubelet import Kubelet, container_request
from nri_plugin.simulated.podresources_server import PodResourcesServer
from nri_plugin.simulated.runtime import PluginCallError, make_container, make_pod
from nri_plugin.topology.snapshot import load_snapshot
from tests.support.plugin_helpers import plugin_session

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
DGX = load_snapshot(EXAMPLES / "dgx-like.yaml")
MIG_BOX = load_snapshot(EXAMPLES / "mig-box.yaml")
CLAIM_UID = "0b5e4c3a-1f2d-4e6b-9a8c-7d6e5f4a3b2c"


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


def node(snapshot, podresources_socket: str = "") -> NodeState:
    # The DRA driver's kinds named as an operator would before they were defaults.
    config = NodeConfig(
        permissions=Permissions(gpus=("*",)),
        gpu=GpuConfig(
            podresources_socket=podresources_socket,
            grant_cdi_kinds=tuple(dict.fromkeys((*DEFAULT_GRANT_CDI_KINDS, *dra.KINDS))),
        ),
    )
    return NodeState(
        config,
        2,
        allocator=Allocator(snapshot.topology, snapshot.inventory),
        rt_budget=RtBudget(0.5),
    )


def cdi(snapshot, *claims: tuple[str, list[str]]) -> CdiRegistry:
    """The node's CDI directories: nvidia-ctk's and the device plugin's specs, the DRA
    driver's standard spec and one spec per prepared claim."""
    return CdiRegistry(
        [
            *nvidia_cdi_specs(snapshot.inventory),
            dra.standard_spec(snapshot.inventory),
            *(dra.claim_spec(uid, names) for uid, names in claims),
        ]
    )


def shared(metrics: Metrics) -> float:
    return metrics.registry.get_sample_value("nri_sla_gpus_shared") or 0.0


def applied(resp) -> dict:
    return json.loads(resp.adjust.annotations["sla.nri.io/applied"])


@contextlib.asynccontextmanager
async def simulated(snapshot, registry: CdiRegistry, socket: str = ""):
    """The plugin on `snapshot`'s node over the simulator, whose runtime resolves CDI
    names against `registry`."""
    metrics = Metrics()
    with tempfile.TemporaryDirectory(prefix="nri-sla-g") as d:
        async with plugin_session(node(snapshot, socket), Path(d), metrics=metrics) as (
            sim,
            session,
            plugin,
        ):
            sim.cdi = registry
            yield session, plugin, metrics


def granted_pod(
    kubelet: Kubelet, name: str, count: int, sla: str | None = None, **kw
) -> tuple[pb.PodSandbox, pb.Container]:
    pod = make_pod(name, namespace="ml", annotations={"sla.nri.io/pod": sla} if sla else {})
    grant = kubelet.admit(pod.uid, pod.namespace, pod.name, "c", count)
    return pod, container_request(pod, "c", grant, **kw)


# -- MIG devices granted as device nodes ---------------------------------------------------


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_mig_devices_granted_in_every_strategy_are_mig_devices(strategy):
    """NVIDIA's mixed MIG strategy in each device-list strategy: passDeviceSpecs (device
    nodes) and the CDI strategies, which containerd up to 2.1 (and the OCI hook) see
    resolved into the parent's /dev/nvidiaN and the MIG device's /dev/nvidia-caps nodes;
    volume-mounts' MIG UUIDs; envvar's MIG UUIDs in the kubelet's books. A hard MIG SLA
    is met, and two containers on two MIG devices of one GPU share nothing."""
    kubelet = Kubelet(
        DevicePlugin(MIG_BOX.inventory, strategy, mig=True, resource="nvidia.com/mig-1g.10gb"),
        choose=lambda free, n: free[2 : 2 + n],
    )  # the two 1g.10gb devices

    async def scenario():
        with tempfile.TemporaryDirectory(prefix="nri-sla-k") as d:
            socket = str(Path(d) / "kubelet.sock")
            with PodResourcesServer(kubelet, socket):
                async with simulated(MIG_BOX, cdi(MIG_BOX), socket) as (session, plugin, metrics):
                    answers = []
                    for name in ("a", "b"):
                        pod, ctr = granted_pod(kubelet, name, 1, "gpu: {mig: 1g.10gb}")
                        if strategy != "cdi-cri":  # resolved before NRI: nodes alone
                            del ctr.CDI_devices[:]
                        answers.append(await session.create_container(pod, ctr))
                    return answers, shared(metrics), plugin.node.allocator.migs_in_use()

    answers, sharing, migs = run(scenario())
    mig = MIG_BOX.inventory.gpus[0].mig_instances
    assert [applied(a)["placement_record"]["migs"] for a in answers] == [
        [mig[2].uuid],
        [mig[3].uuid],
    ]
    assert sharing == 0 and set(migs) == {mig[2].uuid, mig[3].uuid}


def test_a_parent_node_without_access_nodes_is_the_whole_gpu():
    """/dev/nvidia0 alone (no caps nodes) is no MIG device: the SLA is refused, naming
    only this container's grant."""

    async def scenario():
        async with simulated(MIG_BOX, cdi(MIG_BOX)) as (session, _, _m):
            pod = make_pod(
                "x", namespace="ml", annotations={"sla.nri.io/pod": "gpu: {mig: 1g.10gb}"}
            )
            ctr = make_container(
                pod,
                "c",
                devices=[pb.LinuxDevice(path="/dev/nvidia0", type="c", major=195, minor=0)],
            )
            with pytest.raises(PluginCallError) as refused:
                await session.create_container(pod, ctr)
            return refused.value.message

    assert "asks for a MIG 1g.10gb device; none is granted" in run(scenario())


# -- time-slicing and MPS replicas ---------------------------------------------------------


@pytest.mark.parametrize("strategy", ["envvar", "cdi-cri", "device-nodes"])
def test_time_sliced_replicas_under_a_shared_resource_are_grants_shared_by_design(caplog, strategy):
    """Time-slicing renamed to nvidia.com/gpu.shared: the kubelet's books say GPU-...::n.
    With the envvar strategy the env is the only trace; with the others both containers
    carry the GPU itself, and the books tell replicas from a double grant. Two pods get
    replicas of one GPU, both hard SLAs are met, and the sharing is reported as by
    design, never counted."""
    caplog.set_level(logging.INFO, logger="nri_sla.plugin")
    kubelet = Kubelet(
        DevicePlugin(DGX.inventory, strategy, replicas=4, resource="nvidia.com/gpu.shared")
    )

    async def scenario():
        with tempfile.TemporaryDirectory(prefix="nri-sla-k") as d:
            socket = str(Path(d) / "kubelet.sock")
            with PodResourcesServer(kubelet, socket):
                async with simulated(DGX, cdi(DGX), socket) as (session, plugin, metrics):
                    answers = []
                    for name in ("a", "b"):
                        pod, ctr = granted_pod(kubelet, name, 1, "gpu: {count: 1, topology: numa}")
                        answers.append(await session.create_container(pod, ctr))
                    return answers, shared(metrics), plugin.node.allocator.gpus_in_use()

    answers, sharing, held = run(scenario())
    uuid0 = DGX.inventory.gpus[0].uuid
    assert [applied(a)["placement_record"]["gpus"] for a in answers] == [[uuid0], [uuid0]]
    assert sharing == 0 and len(held[0]) == 2
    by_design = [r for r in caplog.records if "shared by design" in r.getMessage()]
    assert len(by_design) == 1 and by_design[0].fields["gpu"] == DGX.inventory.gpus[0].identity
    assert not [r for r in caplog.records if "GPU shared by two" in r.getMessage()]


def test_a_replica_beside_a_whole_grant_of_its_gpu_is_a_double_grant():
    async def scenario():
        async with simulated(DGX, cdi(DGX)) as (session, _, metrics):
            for name, ctr_kw in (
                ("whole", {"cdi_devices": ("nvidia.com/gpu=0",)}),
                (
                    "replica",
                    {
                        "devices": [
                            pb.LinuxDevice(path="/dev/nvidia0", type="c", major=195, minor=0)
                        ]
                    },
                ),
            ):
                pod = make_pod(name, namespace="ml")
                await session.create_container(pod, make_container(pod, "c", **ctr_kw))
            return shared(metrics)

    assert run(scenario()) == 1


# -- DRA ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("snapshot", "sla", "pick"),
    [
        (DGX, "gpu: {count: 1, topology: numa}", lambda inv: (inv.gpus[3], None)),
        (MIG_BOX, "gpu: {mig: 2g.20gb}", lambda inv: (inv.gpus[0], inv.gpus[0].mig_instances[1])),
        (MIG_BOX, "gpu: {mig: 1g.10gb}", lambda inv: (inv.gpus[0], inv.gpus[0].mig_instances[3])),
    ],
)
def test_dra_claims_cdi_names_are_the_grant(snapshot, sla, pick):
    """NVIDIA's DRA driver: the container gets `k8s.gpu.nvidia.com/device=gpu-<minor>` and
    `k8s.gpu.nvidia.com/claim=<claim uid>-gpu-<minor>` (MIG: gpu-<minor>-mig-...); the
    runtime resolves them into device nodes. A MIG name that fits two devices of one
    profile is the one whose access nodes the container has."""
    gpu, mig = pick(snapshot.inventory)
    name = dra.device_name(gpu, mig)

    async def scenario():
        async with simulated(snapshot, cdi(snapshot, (CLAIM_UID, [name]))) as (session, _, _m):
            pod = make_pod("infer", namespace="ml", annotations={"sla.nri.io/pod": sla})
            ctr = make_container(pod, "c", cdi_devices=dra.cdi_names(CLAIM_UID, [name]))
            return await session.create_container(pod, ctr)

    record = applied(run(scenario()))["placement_record"]
    assert record.get("migs", []) == ([mig.uuid] if mig else [])
    assert record.get("gpus", []) == ([] if mig else [gpu.uuid])


def test_dra_claims_in_podresources_are_the_grant():
    """A container whose only trace is its env: the kubelet's PodResources reports its
    DRA claim (`dynamic_resources`), whose CDI names are the grant."""
    gpu = DGX.inventory.gpus[5]
    claim = dra.dynamic_resource("gpu", "ml", CLAIM_UID, "node-1", [dra.device_name(gpu)])
    kubelet = Kubelet(DevicePlugin(DGX.inventory, "envvar"))

    async def scenario():
        with tempfile.TemporaryDirectory(prefix="nri-sla-k") as d:
            socket = str(Path(d) / "kubelet.sock")
            pod = make_pod(
                "infer", namespace="ml", annotations={"sla.nri.io/pod": "gpu: {count: 1}"}
            )
            kubelet.prepare(pod.uid, pod.namespace, pod.name, "c", (claim,))
            with PodResourcesServer(kubelet, socket):
                async with simulated(DGX, cdi(DGX), socket) as (session, _, _m):
                    ctr = make_container(pod, "c", env=(f"NVIDIA_VISIBLE_DEVICES={gpu.uuid}",))
                    return await session.create_container(pod, ctr)

    assert applied(run(scenario()))["placement_record"]["gpus"] == [gpu.uuid]


# -- system holders and what is not a grant ------------------------------------------------


def privileged(pod: pb.PodSandbox, inventory) -> pb.Container:
    """As containerd creates a privileged container: every host device node (the GPUs,
    their access nodes, nvidiactl, others) and a device cgroup that allows everything."""
    ctr = make_container(pod, "dcgm")
    for gpu in inventory.gpus:
        ctr.linux.devices.add(
            path=f"/dev/nvidia{gpu.device_minor}", type="c", major=195, minor=gpu.device_minor
        )
        for mig in gpu.mig_instances:
            for m in mig.caps_minors:
                ctr.linux.devices.add(
                    path=f"/dev/nvidia-caps/nvidia-cap{m}", type="c", major=511, minor=m
                )
    ctr.linux.devices.add(path="/dev/nvidiactl", type="c", major=195, minor=255)
    ctr.linux.devices.add(path="/dev/sda", type="b", major=8, minor=0)
    ctr.linux.resources.devices.add(allow=True, access="rwm")
    return ctr


@pytest.mark.parametrize("snapshot", [DGX, MIG_BOX])
def test_a_privileged_container_is_a_system_holder(snapshot):
    """DCGM (or a device plugin, or nri-sla's DaemonSet) beside GPU pods: it holds no GPU
    and shares none; the GPU pod's hard SLA is met; its own GPU SLA finds no grant."""

    async def scenario():
        async with simulated(snapshot, cdi(snapshot)) as (session, plugin, metrics):
            system = make_pod("dcgm", namespace="gpu-operator")
            await session.create_container(system, privileged(system, snapshot.inventory))
            pod = make_pod(
                "train", namespace="ml", annotations={"sla.nri.io/pod": "gpu: {count: 1}"}
            )
            answer = await session.create_container(
                pod, make_container(pod, "c", cdi_devices=("nvidia.com/gpu=1",))
            )
            greedy = make_pod(
                "greedy", namespace="ml", annotations={"sla.nri.io/pod": "gpu: {count: 1}"}
            )
            with pytest.raises(PluginCallError) as refused:
                await session.create_container(greedy, privileged(greedy, snapshot.inventory))
            return (
                answer,
                shared(metrics),
                plugin.node.allocator.gpus_in_use(),
                refused.value.message,
            )

    answer, sharing, held, refusal = run(scenario())
    assert applied(answer)["placement_record"]["gpus"] == [snapshot.inventory.gpus[1].uuid]
    assert sharing == 0 and list(held) == [1]
    assert "no device plugin granted this container a GPU" in refusal


def test_a_pod_volume_at_the_device_list_path_grants_nothing():
    """A pod's own emptyDir at /var/run/nvidia-container-devices/all is not the device
    plugin's /dev/null mount: no grant, a hard count is refused, and the GPU of a pod
    granted through volume-mounts is not double-granted."""
    kubelet = Kubelet(DevicePlugin(DGX.inventory, "volume-mounts"))

    async def scenario():
        async with simulated(DGX, cdi(DGX)) as (session, plugin, metrics):
            victim, ctr = granted_pod(kubelet, "victim", 1, "gpu: {count: 1}")
            answer = await session.create_container(victim, ctr)
            pod = make_pod(
                "sneaky", namespace="ml", annotations={"sla.nri.io/pod": "gpu: {count: 8}"}
            )
            sneaky = make_container(
                pod,
                "c",
                mounts=[
                    pb.Mount(
                        destination="/var/run/nvidia-container-devices/all",
                        type="bind",
                        source="/var/lib/kubelet/pods/u/volumes/kubernetes.io~empty-dir/all",
                    )
                ],
            )
            with pytest.raises(PluginCallError) as refused:
                await session.create_container(pod, sneaky)
            return answer, refused.value.message, shared(metrics), plugin

    answer, refusal, sharing, plugin = run(scenario())
    assert applied(answer)["placement_record"]["gpus"] == [DGX.inventory.gpus[0].uuid]
    assert "no device plugin granted this container a GPU" in refusal
    assert sharing == 0 and plugin.node.allocator.gpus_in_use() == {
        0: tuple(plugin.node.allocator.gpus_in_use()[0])
    }
    assert len(plugin.node.allocator.gpus_in_use()[0]) == 1
