"""Property: whatever the order of pods, removals, plugin restarts and runtime restarts,
a container can open exactly the GPUs the kubelet granted it, and nri-sla knows them.

The world: the simulated kubelet's books (served on its PodResources socket, which the
plugin's `gpu.podresources-socket` names) and NVIDIA device plugin (one device-list
strategy per node, drawn), containerd as the simulator plays it (CDI specs for both
NVIDIA kinds resolved before NRI, the whole adjustment applied to a modelled OCI spec),
and `nri-sla run`'s service over a real socket. Pods with and without SLAs (every GPU SLA
form: count, ids, topology any/numa/nvlink, align; hard and soft), pods whose env names
GPUs without a grant, several pods created at once, removals, pods created while
no plugin is registered, the plugin restarted (a fresh node state, Synchronize) and
containerd restarted (the plugin reconnects). After every step:

* no GPU can be opened by two live containers;
* every live container can open exactly its kubelet grant;
* the GPUs the plugin holds are exactly the union of the live containers' grants (with
  the envvar strategy, whose grant reaches the runtime as env alone, the plugin learns it
  from the kubelet's PodResources, served from the simulated kubelet's books);
* a refusal names no GPU but those of the pod's grant and its own env.

The runtime accepts NVIDIA_VISIBLE_DEVICES only on the node whose device plugin uses the
envvar strategy (that strategy needs it); on the others it is configured not to, and only
there do pods write the env themselves: with the env accepted, a tenant's env is the
runtime's leak, which no NRI plugin can close (ocispec.openable_gpus).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nri_plugin.config.values import GpuConfig
from nri_plugin.core.nodestate import NodeState
from nri_plugin.nri.pb import nri_pb2 as pb
from nri_plugin.nri.service import run_service
from nri_plugin.ops.metrics import Metrics
from nri_plugin.plugin.service import build_service
from nri_plugin.simulated.cdi import CdiRegistry
from nri_plugin.simulated.cri import Cri
from nri_plugin.simulated.deviceplugin import STRATEGIES, DevicePlugin, nvidia_cdi_specs
from nri_plugin.simulated.kubelet import AdmissionRefused, Grant, Kubelet, container_request
from nri_plugin.simulated.ocispec import NvidiaRuntime, openable_gpus
from nri_plugin.simulated.podresources_server import PodResourcesServer
from nri_plugin.simulated.runtime import PluginCallError, RuntimeSimulator, make_pod
from tests.support.plugin_helpers import make_node


def node(podresources_socket: str) -> NodeState:
    """The DGX-like node, asking the simulated kubelet's PodResources (never a real
    kubelet's on the test machine)."""
    return make_node(2, gpu=GpuConfig(podresources_socket=podresources_socket))


INVENTORY = node("").allocator.inventory
CDI = CdiRegistry(nvidia_cdi_specs(INVENTORY))
UUID = r"GPU-[0-9a-f-]{36}"
ENV_ONLY = "envvar"  # the strategy whose grant reaches the runtime as env alone


@dataclass(frozen=True)
class PodPlan:
    namespace: str
    gpus: int  # limits nvidia.com/gpu
    sla: str | None
    tenant_env: str | None  # NVIDIA_VISIBLE_DEVICES the pod spec sets


@st.composite
def gpu_slas(draw: st.DrawFn) -> str:
    form = draw(st.sampled_from(["count", "ids"]))
    if form == "count":
        what = f"count: {draw(st.integers(1, 4))}"
    else:
        ids = draw(st.lists(st.integers(0, 7), min_size=1, max_size=2, unique=True))
        what = f"ids: [{', '.join(map(str, ids))}]"
    topology = draw(st.sampled_from(["any", "numa", "nvlink"]))
    align = draw(st.booleans())
    enforcement = draw(st.sampled_from(["hard", "soft"]))
    return (
        f"enforcement: {enforcement}\n"
        f"gpu: {{{what}, topology: {topology}, align: {str(align).lower()}}}"
    )


@st.composite
def pod_plans(draw: st.DrawFn, env_writers: bool) -> PodPlan:
    sla = draw(st.one_of(st.none(), gpu_slas(), st.just("cpu: {limit: 1}")))
    env = None
    if env_writers and draw(st.booleans()):
        env = draw(st.sampled_from(["all", "0,1", "GPU-d0000000-0000-0000-0000-000000000007"]))
    return PodPlan(
        namespace=draw(st.sampled_from(["ml", "batch"])),
        gpus=draw(st.integers(0, 4)),
        sla=sla,
        tenant_env=env,
    )


def steps(env_writers: bool) -> st.SearchStrategy[list[tuple]]:
    pods = st.lists(pod_plans(env_writers), min_size=1, max_size=3)
    step = st.one_of(
        st.tuples(st.just("pods"), pods),
        st.tuples(st.just("pods"), pods),
        st.tuples(st.just("remove"), st.integers(0, 7)),
        st.tuples(st.just("plugin away"), pods),
        st.tuples(st.just("restart plugin")),
        st.tuples(st.just("restart runtime")),
    )
    return st.lists(step, min_size=1, max_size=10)


@st.composite
def worlds(draw: st.DrawFn) -> tuple[str, list[tuple]]:
    strategy = draw(st.sampled_from(STRATEGIES))
    return strategy, draw(steps(env_writers=strategy != ENV_ONLY))


@dataclass
class Live:
    pod: pb.PodSandbox
    ctr: pb.Container
    grant: Grant


@dataclass
class World:
    socket: str  # NRI
    podresources_socket: str
    kubelet: Kubelet
    runtime: NvidiaRuntime
    sim: RuntimeSimulator | None = None
    cri: Cri | None = None
    plugin: object = None
    stop: asyncio.Event | None = None
    service: asyncio.Task[None] | None = None
    live: dict[str, Live] = field(default_factory=dict)  # container id -> its pod
    refused: list[str] = field(default_factory=list)
    made: int = 0

    async def start_plugin(self) -> None:
        self.stop = asyncio.Event()
        self.plugin, options = build_service(
            node(self.podresources_socket),
            Metrics(),
            socket=self.socket,
            handle_signals=False,
            stop_event=self.stop,
            backoff_initial=0.01,
            backoff_max=0.05,
        )
        self.service = asyncio.create_task(run_service(self.plugin, options))

    async def stop_plugin(self) -> None:
        self.stop.set()
        await asyncio.wait_for(self.service, 5)

    async def start_runtime(self, old: RuntimeSimulator | None = None) -> None:
        state = old.state if old is not None else None
        self.sim = await RuntimeSimulator(
            self.socket,
            pods=state.pods.values() if state else (),
            containers=state.containers.values() if state else (),
            specs=state.specs if state else None,
            cdi=CDI,
        ).start()
        self.cri = Cri(self.sim)

    async def pod(self, plan: PodPlan) -> None:
        self.made += 1
        annotations = {"sla.nri.io/pod": plan.sla} if plan.sla else {}
        pod = make_pod(f"p{self.made}", namespace=plan.namespace, annotations=annotations)
        try:
            grant = self.kubelet.admit(pod.uid, pod.namespace, pod.name, "c", plan.gpus)
        except AdmissionRefused:
            return  # the kubelet does not admit it: nothing reaches the runtime
        env = (f"NVIDIA_VISIBLE_DEVICES={plan.tenant_env}",) if plan.tenant_env else ()
        ctr = container_request(pod, "c", grant, env=env)
        await self.cri.run_pod(pod)
        try:
            await self.cri.create_container(pod, ctr)
            await self.cri.start_container(pod, ctr)
        except PluginCallError as exc:
            named = set(re.findall(UUID, exc.message))
            own = set(grant.device_ids) | set(re.findall(UUID, plan.tenant_env or ""))
            assert named <= own, f"{pod.name} refused naming another's GPU: {exc.message}"
            self.refused.append(exc.message)
            await self.cri.remove_container(pod, ctr)
            await self.cri.remove_pod(pod)
            self.kubelet.remove_pod(pod.uid)
            return
        self.live[ctr.id] = Live(pod, ctr, grant)

    async def remove(self, which: int) -> None:
        if not self.live:
            return
        cid = sorted(self.live)[which % len(self.live)]
        gone = self.live.pop(cid)
        await self.cri.stop_container(gone.pod, gone.ctr)
        await self.cri.remove_container(gone.pod, gone.ctr)
        await self.cri.remove_pod(gone.pod)
        self.kubelet.remove_pod(gone.pod.uid)  # freed once the pod is gone

    async def restart_runtime(self) -> None:
        old = self.sim
        await old.close()
        await self.start_runtime(old)
        await self.sim.accept(timeout=10)


def granted(live: Live) -> frozenset[int]:
    return frozenset(INVENTORY.find(i).index for i in live.grant.device_ids)


def check(world: World) -> None:
    openable = {
        cid: openable_gpus(world.sim.state.specs[cid], INVENTORY, world.runtime)
        for cid in world.live
    }
    for cid, live in world.live.items():
        assert openable[cid] == granted(live), (
            f"{live.pod.name} ({live.pod.annotations.get('sla.nri.io/pod')!r}) can open "
            f"GPUs {sorted(openable[cid])}, granted {sorted(granted(live))}"
        )
    seen: dict[int, str] = {}
    for cid, gpus in openable.items():
        for gpu in gpus:
            assert gpu not in seen, f"GPU {gpu} openable by {seen[gpu]} and {cid}"
            seen[gpu] = cid
    held = set(world.plugin.node.allocator.gpus_in_use())
    wanted = set().union(*(granted(live) for live in world.live.values()))
    assert held == wanted, f"the plugin holds GPUs {sorted(held)}, granted {sorted(wanted)}"


@contextlib.contextmanager
def socket_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="nri-sla-prop-") as tmp:
        yield Path(tmp)


async def play(strategy: str, plan: list[tuple], sockets: Path) -> World:
    kubelet = Kubelet(DevicePlugin(INVENTORY, strategy))
    world = World(
        str(sockets / "nri.sock"),
        str(sockets / "kubelet.sock"),
        kubelet,
        NvidiaRuntime(accept_env=strategy == ENV_ONLY),
    )
    with PodResourcesServer(kubelet, world.podresources_socket):
        return await play_steps(world, plan)


async def play_steps(world: World, plan: list[tuple]) -> World:
    await world.start_runtime()
    await world.start_plugin()
    await world.sim.accept(timeout=10)
    try:
        for step in plan:
            if step[0] == "pods":  # created at once (the runtime takes them in turn)
                await asyncio.gather(*(world.pod(p) for p in step[1]))
            elif step[0] == "remove":
                await world.remove(step[1])
            elif step[0] == "plugin away":  # created while no plugin is registered
                await world.stop_plugin()
                await asyncio.gather(*(world.pod(p) for p in step[1]))
                await world.start_plugin()
                await world.sim.accept(timeout=10)
            elif step[0] == "restart plugin":
                await world.stop_plugin()
                await world.start_plugin()
                await world.sim.accept(timeout=10)
            else:
                await world.restart_runtime()
            check(world)
    finally:
        await world.stop_plugin()
        await world.sim.close()
    return world


@pytest.mark.slow
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(worlds())
def test_containers_open_exactly_their_grant(world_plan):
    strategy, plan = world_plan
    with socket_dir() as sockets:
        asyncio.run(asyncio.wait_for(play(strategy, plan, sockets), 60))
