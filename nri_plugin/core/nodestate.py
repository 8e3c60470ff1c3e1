"""NodeState: the plugin's node, which outlives every container on it.

What it is (core.node: config, cgroup facts, capabilities) and the books it keeps for its
whole life: the GPU / exclusive-CPU allocator, the CPU pool of every live container's
cpuset, the RT budget (and, on cgroup v1, the ledger of what was raised in RT
ancestors), and the key that authenticates nri-sla's records. Allocations persist across
containers and are rebuilt from records on every Synchronize, to exactly what the live
containers hold; a decided container takes its share only when admitted (admit, a
core.reservation). The OCI hook's node keeps no books: core.node.OneShotNode.
"""

from __future__ import annotations

import os

import nri_plugin.plan.cpupool as cpupool
import nri_plugin.plan.rt_budget as budgets
import nri_plugin.plan.runtime_gpus as runtime_gpus
from nri_plugin.core.cpusets import Cpusets
from nri_plugin.core.node import Node
from nri_plugin.core.reservation import Reservation
from nri_plugin.enforce.blockdev import resolve_block_device
from nri_plugin.errors import InternalFailure, SlaFailure
from nri_plugin.ops.corelog import CoreLogger
from nri_plugin.plan.context import PodUsage
from nri_plugin.plan.placement_values import PlacementRequest
from nri_plugin.plan.record import (
    RecordLimits,
    record_body,
    record_text,
    sign_record,
)
from nri_plugin.value import replace

# Per-create imports are `import a.b as b`: Python 3.11's `from a.b import x` inside a
# function asks the (plain, package-less) module for `__path__` and builds and drops an
# AttributeError on every call (3-4 us hot against 1).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from pathlib import Path

    from nri_plugin.config.values import NodeConfig
    from nri_plugin.enforce.capabilities import NodeCapabilities
    from nri_plugin.enforce.cgpaths import CgroupFacts, CgroupPaths
    from nri_plugin.enforce.rt import RtChange
    from nri_plugin.enforce.rt_ledger import RtLedger
    from nri_plugin.granted import GrantedResources
    from nri_plugin.plan.allocator import Allocator, InventoryChange
    from nri_plugin.plan.model import ContainerPlan
    from nri_plugin.plan.placement_values import CpuFloor
    from nri_plugin.plan.rt_budget import RtBudget
    from nri_plugin.plan.runtime_gpus import GpuGrant
    from nri_plugin.sla.model import Sla
    from nri_plugin.topology.health_monitor import HealthChange
    from nri_plugin.topology.watched import WatchedInventory

log = CoreLogger("nri_sla.rt")


class NodeState(Node):
    """The plugin's node: its books, shared by every container decision on it."""

    def __init__(
        self,
        config: NodeConfig,
        cgroup_version: int,
        *,
        allocator: Allocator,
        rt_budget: RtBudget,
        facts: CgroupFacts | None = None,
        rt_ledger: RtLedger | None = None,
        capabilities: NodeCapabilities | None = None,
        resolve_device: Callable[[str], tuple[int, int]] | None = resolve_block_device,
        record_key: bytes | None = None,
        gpus: WatchedInventory | None = None,
    ) -> None:
        super().__init__(
            config, cgroup_version, capabilities=capabilities, resolve_device=resolve_device
        )
        # None: a node that only plans (explain), with no cgroup to write.
        self.facts = facts
        self.allocator = allocator
        self.rt_budget = rt_budget
        # What nri-sla raised in RT ancestors (cgroup v1), given back when no longer
        # needed; None: this node raises none (cgroup v2, or it only plans).
        self.rt_ledger = rt_ledger
        # The node's record key (core.recordkey); None: a key of this NodeState's own, for
        # nodes whose records never outlive them (explain, demo, tests).
        self.record_key = record_key or os.urandom(32)  # what secrets.token_bytes does
        # Reads the node's GPUs again with their health (rescan_inventory, poll_gpu_health);
        # None: this node never rescans (a replayed snapshot, tests).
        self.gpus = gpus
        # Every live container's cpuset, and what the runtime is told of them.
        self.cpu_pool = cpupool.CpuPool(allocator)
        self.cpusets = Cpusets(self.cpu_pool)
        # Pod id -> its containers' ids, the per-pod caps' input: the plugin's registry
        # (plugin.registry) knows them.
        self.pod_members: Callable[[str], Iterable[str]] = _no_members
        self._output_keys: tuple[NodeConfig | None, tuple[str, str]] = (None, ("", ""))

    def allocator_for(self, sla: Sla) -> Allocator:
        return self.allocator

    # -- records -------------------------------------------------------------------------
    @property
    def output_keys(self) -> tuple[str, str]:
        """The annotations nri-sla writes (and removes where a pod set them itself)."""
        # Made once per config object, not twice per CreateContainer (its answer and the
        # pod-set check read them); `config` is reassigned on a reload, not edited.
        made_for, keys = self._output_keys
        if made_for is not self.config:
            keys = f"{self.prefix}/applied", f"{self.prefix}/warnings"
            self._output_keys = (self.config, keys)
        return keys

    def annotations_for(
        self, plan: ContainerPlan, path: str, owner: str, text: str | None = None
    ) -> dict[str, str]:
        """`applied` (and `warnings`) for container `owner`; `text`: the record's
        record_text, when already built (replicas share it; the MAC is per container)."""
        applied, warnings = self.output_keys
        text = text or record_text(record_body(plan, path))
        annotations = {applied: sign_record(text, owner, self.record_key)}
        if plan.warnings:
            annotations[warnings] = "; ".join(plan.warnings)
        return annotations

    def record_limits(self) -> RecordLimits:
        """What a record may name on this node (its CPUs, NUMA nodes and GPUs)."""
        topology = self.allocator.topology
        return RecordLimits(
            max_cpu=max(topology.online, default=0),
            max_node=max(topology.node_ids, default=0),
            inventory=self.allocator.known_inventory(),
        )

    def pod_usage(self, pod: str, owner: str) -> PodUsage:
        """What the pod's containers other than `owner` hold (exclusive CPUs, RT share);
        nothing when the pod is not known ("" or a one-shot node)."""
        others = [o for o in self.pod_members(pod) if o != owner] if pod else ()
        cpus = 0
        rt = 0.0
        for other in others:
            placement = self.allocator.placement_of(other)
            if placement is not None:
                cpus += len(placement.exclusive_cpus)
            rt += self.rt_budget.share_of(other)
        return PodUsage(cpus, rt)

    def cpu_floors(self, owner: str) -> tuple[CpuFloor, ...]:
        """What exclusive CPUs for `owner` must leave to the other live containers."""
        return self.cpu_pool.floors(owner)

    def resize_cpus(self, owner: str, request_millis: int | None, namespace: str) -> frozenset[int]:
        """`owner`'s CPU request changed (UpdateContainer): the pool counts the new one,
        and exclusive CPUs beyond its whole CPUs are given back (unless the namespace may
        exceed the runtime's limits). Returns the CPUs given back."""
        self.cpusets.resize(owner, request_millis)
        return self._within_request(owner, request_millis, namespace)

    def _within_request(
        self, owner: str, request_millis: int | None, namespace: str | None
    ) -> frozenset[int]:
        """`owner`'s exclusive CPUs above the logical CPUs of its CPU request given back
        (unless its namespace may exceed the runtime's limits, or it has no known pod: a
        record restore holds to the end, as it holds other grants outside the policy);
        the CPUs given back."""
        if (
            request_millis is None
            or namespace is None
            or self.config.allows("exceed-runtime-limits", namespace)
        ):
            return frozenset()
        return self.allocator.shrink_exclusive(
            owner, request_millis // 1000, self.config.cpu.exclusive_full_cores
        )

    def release(self, owner: str) -> None:
        """Everything `owner` holds, given back: its place in the CPU pool, its RT time,
        its GPUs and exclusive CPUs."""
        self.cpu_pool.leave(owner)
        self.rt_budget.release(owner)
        self.allocator.release(owner)

    def gpu_grant(
        self, granted: GrantedResources, kubelet_gpu_ids: tuple[str, ...] = ()
    ) -> GpuGrant:
        """The GPUs `granted` names on this node (runtime_gpus.resolve_grant)."""
        return runtime_gpus.resolve_grant(
            self.allocator.inventory, granted, self.config.gpu.grant_cdi_kinds, kubelet_gpu_ids
        )

    def hold_grant(self, owner: str, grant: GpuGrant) -> None:
        """`owner` holds its granted GPUs when nri-sla placed nothing for it (no SLA, or
        one without placement): every container that can open a GPU is a holder, so that
        the status and the metrics see them all. Never refused: the grant is the
        kubelet's."""
        if grant.empty or self.allocator.placement_of(owner):
            return
        self.allocator.allocate(
            PlacementRequest(owner, align=False, granted_gpus=grant.gpus, granted_migs=grant.migs)
        )

    def admit(
        self,
        owner: str,
        plan: ContainerPlan | None,
        grant: GpuGrant,
        request_millis: int | None,
        reported: str,
        *,
        created: bool = True,
    ) -> Reservation:
        """Take what `owner` is admitted with (core.reservation): its plan's placement
        (else its GPU grant alone, hold_grant), its plan's RT time and its place in the
        CPU pool (Cpusets.join: `reported` and `created` are that method's). Raises the
        book's SlaFailure (PlacementError, RtBudgetExceeded: another container took it
        since the plan was made) with nothing taken."""
        reservation = Reservation(owner, self.release)
        try:
            if plan is not None and plan.placement_record:
                self.allocator.restore(owner, plan.placement_record)
            self.hold_grant(owner, grant)
            if plan is not None and plan.rt_runtime:
                self.rt_budget.reserve(
                    owner, budgets.RtGrant(plan.rt_runtime, plan.rt_period_in_force)
                )
            self.cpusets.join(owner, request_millis, reported, created=created)
        except BaseException:
            reservation.rollback()
            raise
        return reservation

    def usage(self) -> tuple[int, int]:
        """GPUs held (vanished ones included: their holders still have them) and
        exclusive CPUs held."""
        gpus = len(self.allocator.gpus_in_use()) + len(self.allocator.missing_gpus())
        return gpus, len(self.allocator.exclusive_cpus_in_use())

    def rescan_inventory(self) -> InventoryChange | None:
        """Read the node's GPUs again and hand them to the allocator (Allocator.rescan
        says what happens to held GPUs); None when this node does not rescan. Raises
        InventoryError or OSError when the inventory cannot be read (nothing changes)."""
        if self.gpus is None:
            return None
        return self.allocator.rescan(self.gpus.read())

    def poll_gpu_health(self, timeout_ms: int = 0) -> HealthChange | None:
        """One health step (GpuHealthMonitor.poll); a change reaches the allocator at once
        (an unhealthy GPU is never a new container's choice). None: no monitor here."""
        if self.gpus is None:
            return None
        change = self.gpus.poll(timeout_ms)
        if change:
            self.allocator.rescan(self.gpus.with_health(self.allocator.inventory))
        return change

    # -- enforcement ---------------------------------------------------------------------
    def container_paths(self, cgroups_path: str) -> CgroupPaths:
        if self.facts is None:
            raise InternalFailure("no cgroup facts: this node state only plans (explain)")
        return self.facts.container_paths(cgroups_path)

    def make_rt_room(
        self, plan: ContainerPlan, paths: CgroupPaths, owner: str = ""
    ) -> tuple[ContainerPlan, list[RtChange]]:
        """cgroup v1: raise the ancestors' RT budget before the container's own is written
        (the kernel refuses a child budget its parents lack). Hard mode: PlanError; soft
        mode: the plan without RT, with a warning. Returns the changes made (to undo); they
        go into the ledger, and `owner`'s budget keeps them until it is released."""
        if not plan.rt_runtime or paths.version != 1:
            return plan, []
        from nri_plugin.enforce.rt import rt_room

        def note(text: str) -> None:
            log.info("RT room refused for %s: %s", owner or paths.cgroups_path, text)

        # the rule (hard refuses, soft runs without RT) is enforce.rt.rt_room's, the hook's too
        done, problem = rt_room(
            paths,
            (plan.rt_runtime, plan.rt_period_in_force),
            plan.enforcement,
            plan.key or self.prefix,
            note,
        )
        if problem is not None:
            if owner:
                # It runs without RT: what the planner set aside would be refused to others.
                self.rt_budget.release(owner)
            return replace(
                plan,
                rt_runtime=None,
                rt_period=None,
                warnings=(*plan.warnings, problem),
                reasons=(*plan.reasons, "budget"),
            ), []
        if owner:
            # `owner`'s grant, with where it lives now: the ancestors keep this raise
            # (give_back_rt) until the grant is released.
            self.rt_budget.hold(
                owner, budgets.RtGrant(plan.rt_runtime, plan.rt_period_in_force, _cpu_dir(paths))
            )
        if self.rt_ledger is not None:
            self.rt_ledger.note(done)
        return plan, done

    def give_back_rt(self) -> list[RtChange]:
        """Lower what nri-sla raised in RT ancestors to what the containers below still
        need (rt_ledger); the RT budget's grants keep theirs even before runc wrote the
        container's own. Returns the changes made."""
        if self.rt_ledger is None or self.facts is None or self.cgroup_version != 1:
            return []
        from pathlib import Path

        try:
            root = Path(self.facts.hierarchy("cpu").path)
        except SlaFailure:
            return []
        return self.rt_ledger.give_back(root, self.rt_budget.cgroup_dirs())

    def write_plan(
        self,
        plan: ContainerPlan,
        cgroups_path: str,
        scope: str,
        *,
        undo_on_failure: bool | None = None,
    ) -> list[str]:
        """Write the plan's `scope` settings ("all", or "direct": what NRI cannot carry)
        into the container's cgroup; the failures as text. Hard mode writes all or none
        (the first failure undoes the earlier writes); soft mode keeps what held.
        `undo_on_failure` overrides the mode's choice (False: a running container)."""
        import nri_plugin.enforce.cgfile as cgfile  # per start and per restored container:
        import nri_plugin.enforce.plan_writes as plan_writes  # see the imports' note

        writes = plan_writes.cgroup_writes(plan, scope=scope, bfq=self.capabilities.bfq)
        if not writes:
            return []
        try:
            paths = self.container_paths(cgroups_path)
        except SlaFailure as exc:
            return [str(exc)]
        if undo_on_failure is None:
            undo_on_failure = plan.enforcement == "hard"
        results = cgfile.CgroupWriter(paths).apply(writes, undo_on_failure=undo_on_failure)
        return [str(r.error) for r in results if not r.ok]


def _no_members(pod: str) -> Iterable[str]:
    return ()


def _cpu_dir(paths: CgroupPaths) -> Path:
    """The container's cpu cgroup dir as enforce.rt names the groups (links resolved:
    /sys/fs/cgroup/cpu is often a link to cpu,cpuacct), whether or not it exists yet."""
    from pathlib import Path  # v1 RT containers only: a cold hook run spares pathlib

    cpu_dir = Path(paths.dir("cpu"))
    return cpu_dir.parent.resolve() / cpu_dir.name
