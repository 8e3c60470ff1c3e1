"""A kubelet for the fault tests: pods created concurrently through simulated/cri.py (the
runtime's side, containerd's rules), retried on the next runtime instance when the one
they were on dies, and the checks every fault test ends with: the cgroup files hold each
enforced container's plan, the plugin holds exactly what the live records hold."""

from __future__ import annotations

import asyncio
import re

from nri_plugin.core.decision import parse_sla
from nri_plugin.enforce.cgfile import CgroupWriter
from nri_plugin.enforce.plan_writes import cgroup_writes
from nri_plugin.nri.pb import nri_pb2 as pb
from nri_plugin.plan.record import decode_record
from nri_plugin.simulated.cri import Cri, RuntimeGone
from nri_plugin.simulated.runtime import PluginCallError, make_container, make_pod
from nri_plugin.topology.cpulist import parse_cpulist
from tests.support.cgroups import CgroupTree
from tests.support.plugin_helpers import gpu_grant, make_pod_cgroups, runc_create

APPLIED = "sla.nri.io/applied"
LIVE = (pb.CONTAINER_CREATED, pb.CONTAINER_RUNNING, pb.CONTAINER_PAUSED)
# One SLA per kind of holding, and no SLA: pod i gets MIX[i % len(MIX)].
MIX = (
    "gpu: {count: 2, align: false}",
    "cpu: {exclusive: 2}",
    "cpu: {rt-runtime: 5ms}",
    "io:\n  max:\n  - {device: /dev/nvme0n1, read-bps: 100Mi}",
    "cpu: {limit: 1}\nmemory: {max: 1Gi}",
    None,
)


def gpus_asked(sla: str | None) -> int:
    """The GPUs a MIX pod's limits ask (its SLA's gpu.count): the kubelet grants them."""
    found = re.search(r"gpu: \{count: (\d+)", sla or "")
    return int(found.group(1)) if found else 0


class Kubelet:
    """Creates pods through the current runtime instance; `replace` swaps the instance.
    Keeps the node's GPU books as the kubelet does: a pod whose GPUs are not free is not
    admitted (`unadmitted`), one admitted gets distinct GPUs (CDI names, its grant)."""

    def __init__(self, cri: Cri, tree: CgroupTree, gpus: int = 8) -> None:
        self.cri = cri
        self.tree = tree
        self.free_gpus = list(range(gpus))
        self.unadmitted: set[str] = set()  # pod names the kubelet had no GPUs for
        self._up = asyncio.Event()
        self._up.set()
        self.refused: dict[str, str] = {}  # pod name -> the plugin's message
        self.removed: set[str] = set()  # container ids the kubelet deleted
        self.created = 0

    def down(self) -> None:
        self._up.clear()

    def replace(self, cri: Cri) -> None:
        self.cri = cri
        self._up.set()

    async def pod(
        self, name: str, sla: str | None, churn: bool = False, retry_after: float = 0.0
    ) -> None:
        """One pod's life until it runs (or is refused); churn: deleted once running.
        A runtime that dies on the way is waited out and the rest retried `retry_after`
        seconds after the next one is up (the kubelet's back-off)."""
        pod = make_pod(name, annotations={"sla.nri.io/pod": sla} if sla else None)
        wanted = gpus_asked(sla)
        if wanted > len(self.free_gpus):
            self.unadmitted.add(name)
            return
        grant, self.free_gpus = self.free_gpus[:wanted], self.free_gpus[wanted:]
        ctr = make_container(pod, "c", cdi_devices=gpu_grant(*grant))
        while True:
            await self._up.wait()
            cri = self.cri
            try:
                await self._life(cri, pod, ctr, churn)
                return
            except RuntimeGone:
                while self.cri is cri:
                    await self._up.wait()
                await asyncio.sleep(retry_after)

    async def _life(self, cri: Cri, pod: pb.PodSandbox, ctr: pb.Container, churn: bool) -> None:
        state = cri.sim.state
        if pod.id not in state.pods:
            await cri.run_pod(pod)
        make_pod_cgroups(self.tree, ctr.linux.cgroups_path)
        stored = state.containers.get(ctr.id)
        if stored is None:
            try:
                stored = await cri.create_container(pod, ctr)
            except PluginCallError as exc:
                self.refused[pod.name] = exc.message
                self.free_gpus += grant_of(ctr)
                return
            self.created += 1
        if stored.state == pb.CONTAINER_CREATED:
            runc_create(self.tree, stored)
            try:
                await cri.start_container(pod, ctr)
            except PluginCallError as exc:
                self.refused[pod.name] = exc.message
                self.free_gpus += grant_of(ctr)
                return
        if churn and APPLIED in stored.annotations:
            await cri.stop_container(pod, ctr)
            await cri.remove_container(pod, ctr)
            await cri.remove_pod(pod)
            self.removed.add(ctr.id)
            self.free_gpus += grant_of(ctr)


def grant_of(ctr: pb.Container) -> list[int]:
    """The GPU indexes the kubelet granted `ctr` (gpu_grant's CDI names)."""
    return [int(d.name.rpartition("=")[2]) for d in ctr.CDI_devices]


def asks_sla(plugin, sim, ctr: pb.Container) -> bool:
    pod = sim.state.pods[ctr.pod_sandbox_id]
    return parse_sla(plugin.node.config, pod.annotations, ctr.name) is not None


def live_records(plugin, sim) -> dict[str, object]:
    """Live container id -> the plan its record holds (verified with the node's key)."""
    return {
        cid: decode_record(c.annotations[APPLIED], cid, plugin.node.record_key)[1]
        for cid, c in sim.state.containers.items()
        if c.state in LIVE and APPLIED in c.annotations
    }


def cgroup_drift(plugin, sim, records) -> dict[str, list[str]]:
    """Container id -> the settings of its plan its cgroup files do not hold."""
    node = plugin.node
    drift = {}
    for cid, plan in records.items():
        paths = node.container_paths(sim.state.containers[cid].linux.cgroups_path)
        writes = cgroup_writes(plan, scope="all", bfq=node.capabilities.bfq)
        problems = CgroupWriter(paths).drift(writes)
        if problems:
            drift[cid] = problems
    return drift


def holdings(plugin) -> dict[str, object]:
    """What the plugin holds: GPUs and exclusive CPUs by owner, RT owners, plans."""
    allocator = plugin.node.allocator
    return {
        "gpus": {i: set(o) for i, o in allocator.gpus_in_use().items()},
        "cpus": allocator.exclusive_cpus_in_use(),
        "rt": set(plugin.node.rt_budget.owners()),
        "plans": {e.id for e in plugin.registry if e.decided_plan},
    }


def held_by_records(plugin, records) -> dict[str, object]:
    """What the records say the live containers hold, in holdings()' shape."""
    inventory = plugin.node.allocator.inventory
    gpus: dict[int, set[str]] = {}
    cpus: dict[int, str] = {}
    for cid, plan in records.items():
        placement = plan.placement_record or {}
        for ref in placement.get("gpus", ()):
            gpus.setdefault(inventory.find(ref).index, set()).add(cid)
        for cpu in parse_cpulist(placement.get("exclusive", "")):
            cpus[cpu] = cid
    return {
        "gpus": gpus,
        "cpus": cpus,
        "rt": {cid for cid, plan in records.items() if plan.rt_runtime},
        "plans": set(records),
    }
