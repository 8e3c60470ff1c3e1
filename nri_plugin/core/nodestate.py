"""NodeState: what outlives one container decision, for either front-end.

The node config, cgroup facts and capabilities, the GPU / exclusive-CPU allocator, the
RT budget and the key that authenticates nri-sla's records. The plugin keeps one NodeState
for its whole life (allocations persist across containers and are rebuilt from records on
every Synchronize, to exactly what the live containers hold); the OCI hook builds one per
run with no memory of other containers (no RT budget, an allocator only when the SLA asks
for placement). Either way the same decision, cgroup writer and RT code run.
"""

from __future__ import annotations

import os
from dataclasses import replace
from operator import attrgetter

from nri_plugin.core.errors import RecordConflict
from nri_plugin.enforce.blockdev import resolve_block_device
from nri_plugin.enforce.capabilities import NodeCapabilities
from nri_plugin.errors import InternalFailure, SlaFailure
from nri_plugin.ops.corelog import CoreLogger
from nri_plugin.plan.errors import PlacementError, PlanError, RecordError
from nri_plugin.plan.record import (
    RecordLimits,
    granted_permissions,
    parse_record,
    record_body,
    record_text,
    sign_record,
    verified_text,
)
from nri_plugin.topology.cpulist import NO_CPUS, format_cpulist, parse_cpulist
from nri_plugin.topology.errors import CpuListError

# The OCI hook builds a one-shot NodeState per cold run: what only a long-lived node (the
# plugin's allocator, CPU pool, GPU inventory and health, RT budget and ledger) or an SLA
# asking for placement needs is imported where it is first used, so that a CPU/memory-only
# run does not pay for it (tests/hook/test_cold_imports.py pins this). On the plugin's
# per-create path such an import is `import a.b as b`: Python 3.11's `from a.b import x`
# asks the (plain, package-less) module for `__path__` and builds and drops an
# AttributeError on every call (3-4 us hot against 1).
TYPE_CHECKING = False  # `typing` costs the hook's cold run; only checkers need it
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping
    from pathlib import Path
    from typing import Any

    from nri_plugin.config.values import NodeConfig
    from nri_plugin.core.inputs import DecisionInputs, NodeInputs
    from nri_plugin.core.restored import LiveContainer, Restored
    from nri_plugin.enforce.cgpaths import CgroupFacts, CgroupPaths
    from nri_plugin.enforce.rt import RtChange
    from nri_plugin.enforce.rt_ledger import RtLedger
    from nri_plugin.granted import GrantedResources
    from nri_plugin.plan.allocator import Allocator, InventoryChange
    from nri_plugin.plan.context import PodUsage
    from nri_plugin.plan.cpupool import CpuPool, ReportedCpusets
    from nri_plugin.plan.model import ContainerPlan
    from nri_plugin.plan.placement_values import CpuFloor
    from nri_plugin.plan.rt_budget import RtBudget
    from nri_plugin.plan.runtime_gpus import GpuGrant
    from nri_plugin.sla.model import Sla
    from nri_plugin.topology.gpus import GpuInventory
    from nri_plugin.topology.health_monitor import HealthChange
    from nri_plugin.topology.inventory import InventoryReader
    from nri_plugin.topology.watched import WatchedInventory

    AllocatorFactory = Callable[[bool], Allocator]  # (GPUs needed) -> Allocator

log = CoreLogger("nri_sla.rt")


class NodeState:
    """Node-wide state shared by every container decision."""

    def __init__(self, config: NodeConfig, cgroup_version: int, *,
                 facts: CgroupFacts | None = None, allocator: Allocator | None = None,
                 allocator_factory: AllocatorFactory | None = None,
                 rt_budget: RtBudget | None = None,
                 rt_ledger: RtLedger | None = None,
                 capabilities: NodeCapabilities | None = None,
                 resolve_device: Callable[[str], tuple[int, int]] | None = resolve_block_device,
                 record_key: bytes | None = None,
                 gpus: WatchedInventory | None = None) -> None:
        self.config = config
        self.cgroup_version = cgroup_version
        self.facts = facts
        self.allocator = allocator
        # One-shot nodes (the hook) build an allocator only when an SLA asks for placement.
        self.allocator_factory = allocator_factory
        self.rt_budget = rt_budget
        # What nri-sla raised in RT ancestors (v1), given back when no longer needed; None:
        # this node never gives back (the hook: no event tells it a container ended).
        self.rt_ledger = rt_ledger
        self.capabilities = capabilities or NodeCapabilities(io_weight=True, bfq=False)
        self.resolve_device = resolve_device
        # The node's record key (core.recordkey); None: a key of this NodeState's own, for
        # nodes whose records never outlive them (explain, demo, tests).
        self.record_key = record_key or os.urandom(32)  # what secrets.token_bytes does
        # Reads the node's GPUs again (rescan_inventory); None: this node never rescans.
        # Reads the node's GPUs again with their health (rescan_inventory, poll_gpu_health);
        # None: this node never rescans.
        self.gpus = gpus
        # Every live container's cpuset (the plugin's; one-shot nodes keep none).
        self.cpu_pool: CpuPool | None = None
        if allocator is not None:
            from nri_plugin.plan.cpupool import CpuPool

            self.cpu_pool = CpuPool(allocator)
        # The last cpuset answered and its text: most answers carry the shared pool.
        self._answered: tuple[frozenset[int], str] = (frozenset(), "")
        # Pod id -> its containers' ids, the per-pod caps' input: the plugin's registry
        # (plugin.registry) knows them; a one-shot node knows no other container.
        self.pod_members: Callable[[str], Iterable[str]] = _no_members
        # Reusable decisions by their inputs (core.decision.decide; bounded there).
        self.reusable: dict[DecisionInputs, Any] = {}
        # The node's part of those inputs and the config it was made for (decision.node_inputs).
        self.inputs: tuple[NodeConfig | None, NodeInputs | None] = (None, None)
        self._output_keys: tuple[NodeConfig | None, tuple[str, str]] = (None, ("", ""))

    @property
    def prefix(self) -> str:
        return self.config.annotation_prefix

    def reconfigure(self, config: NodeConfig) -> None:
        """Decide with `config` from now on (a reload: nri_plugin.plugin.config_reload says which
        of its keys may differ from the config the node was built with). The remembered
        decisions were made under the old one and are dropped."""
        self.config = config
        self.reusable.clear()

    def allocator_for(self, sla: Sla) -> Allocator | None:
        if self.allocator is not None or self.allocator_factory is None:
            return self.allocator
        wants = (sla.gpu is not None or sla.numa is not None
                 or (sla.cpu is not None and bool(sla.cpu.exclusive)))
        if not wants:
            return None
        try:
            return self.allocator_factory(sla.gpu is not None)
        except OSError as exc:  # sysfs trouble: the node's, not the SLA's
            raise InternalFailure(f"node topology: {exc}") from exc

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

    def annotations_for(self, plan: ContainerPlan, path: str, owner: str,
                        text: str | None = None) -> dict[str, str]:
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
        if self.allocator is None:
            return RecordLimits()
        topology = self.allocator.topology
        return RecordLimits(max_cpu=max(topology.online, default=0),
                            max_node=max(topology.node_ids, default=0),
                            inventory=self.allocator.known_inventory())

    def restore(self, live: Iterable[LiveContainer]) -> Restored:
        """Make the allocations exactly what the live containers' records hold.

        Everything held before is let go first, so owners whose containers went away
        while the plugin was disconnected are released and nothing is taken twice. Then
        each record is taken again, earliest-created container first (ties by id): a
        record counts only when it verifies for its container, is well-formed and claims
        nothing an earlier container holds; a record that fails any of these is one
        Rejection, and never affects another container. A verified record granting what
        the node config no longer allows the pod's namespace (the config changed under
        running pods) is still taken: the container uses those GPUs, CPUs and RT time
        until it ends, so handing them to another would double them. It is reported
        (`out_of_policy`) so that the operator drains the pod.
        """
        from nri_plugin.core.restored import Rejection, Restored

        ordered = sorted(live, key=attrgetter("created_at", "id"))
        held = {*(self.rt_budget.owners() if self.rt_budget else ()),
                *(self.allocator.owners() if self.allocator else ())}
        for owner in held:
            self.release(owner)
        if self.cpu_pool is not None:
            self.cpu_pool.clear()  # the plugin has every live container join again
        result = Restored(released=tuple(sorted(held - {c.id for c in ordered})))
        limits = self.record_limits()
        applied = self.output_keys[0]
        parsed: dict[str, tuple[ContainerPlan, tuple[str, ...]]] = {}  # replicas share one
        from nri_plugin.plan.cpupool import ReportedCpusets

        cpusets = ReportedCpusets((c.cpus for c in ordered),
                                  self.allocator.topology.online if self.allocator else
                                  frozenset())
        for container in ordered:
            text = container.annotations.get(applied)
            if text is None:
                continue
            try:
                result.plans[container.id], breach = self._take(
                    container, text, limits, parsed, cpusets, result.cpus_given_back)
            except RecordError as exc:
                result.rejected.append(Rejection(container.id, exc.problem, str(exc)))
                continue
            if breach:
                result.out_of_policy.append(Rejection(container.id, "policy", breach))
        if self.allocator is not None:
            self.allocator.prune_missing()  # vanished GPUs no live record holds: gone
        result.rt_given_back = self.give_back_rt()
        return result

    def _take(self, container: LiveContainer, text: str, limits: RecordLimits,
              parsed: dict[str, tuple[ContainerPlan, tuple[str, ...]]],
              cpusets: ReportedCpusets, given_back: dict[str, frozenset[int]]
              ) -> tuple[ContainerPlan, str]:
        """Re-take what one record holds, and what of it the node config no longer allows
        ("" when all is allowed); RecordError (nothing taken) when it must not be taken.
        Every record's MAC is checked; `parsed` (verified text -> its plan and the
        permissions it needs) spares parsing a verified text twice; `cpusets`: every live
        container's, which tell its exclusive CPUs still held; `given_back`: where the
        exclusive CPUs above its request now are noted."""
        signed = verified_text(text, container.id, self.record_key)
        known = parsed.get(signed)
        if known is None:
            plan = parse_record(signed, limits)[1]
            known = parsed[signed] = (plan, granted_permissions(plan))
        plan, permissions = known
        breach = self._breach(permissions, container.namespace) if permissions else ""
        if plan.placement_record and self.allocator is not None:
            try:
                self.allocator.restore(container.id, _still_held(
                    plan.placement_record, container.cpus, cpusets))
            except PlacementError as exc:  # unchanged: nothing to undo
                raise RecordConflict(f"{exc} (created earlier); this claim is ignored"
                                     ) from None
            # The request now rules, not the one the record was made for (a resize while
            # nri-sla was away): CPUs above it go back before any later record is taken.
            given = self._within_request(container.id, container.request_millis,
                                         container.namespace)
            if given:
                given_back[container.id] = given
        if plan.rt_runtime and self.rt_budget is not None:
            import nri_plugin.plan.rt_budget as budgets  # per record

            # The kernel already gives the container this budget: counted even if the
            # node's share is exceeded (a tightened rt-budget), so that no new grant adds
            # to it; its ancestors keep their raise while it lives.
            self.rt_budget.hold(container.id, budgets.RtGrant(
                plan.rt_runtime, plan.rt_period_in_force, self._rt_dir(container.cgroups_path)))
        return plan, breach

    def _breach(self, permissions: tuple[str, ...], ns: str | None) -> str:
        """What of `permissions` a restored record needs that namespace `ns` (None: no
        known pod) may no longer use; "" when it may use them all."""
        who = "a container of no known pod" if ns is None else f"namespace {ns!r}"
        return "; ".join(
            f"grants {permission}, which {who} may no longer use (node config "
            f"permissions.{permission}); held until the container ends"
            for permission in permissions
            if ns is None or not self.config.allows(permission, ns))

    def _rt_dir(self, cgroups_path: str) -> Path | None:
        """The cpu cgroup dir of a container with this cgroups path, where an RT budget
        lives (cgroup v1); None: no such dir here."""
        if not cgroups_path or self.facts is None or self.cgroup_version != 1:
            return None
        try:
            return _cpu_dir(self.facts.container_paths(cgroups_path))
        except SlaFailure:
            return None  # no cpu hierarchy: nothing raised for it

    def pod_usage(self, pod: str, owner: str) -> PodUsage:
        """What the pod's containers other than `owner` hold (exclusive CPUs, RT share);
        nothing when the pod is not known ("" or a one-shot node)."""
        from nri_plugin.plan.context import PodUsage

        others = [o for o in self.pod_members(pod) if o != owner] if pod else ()
        cpus = 0
        rt = 0.0
        for other in others:
            placement = self.allocator.placement_of(other) if self.allocator else None
            if placement is not None:
                cpus += len(placement.exclusive_cpus)
            if self.rt_budget is not None:
                rt += self.rt_budget.share_of(other)
        return PodUsage(cpus, rt)

    # -- the CPU pool (plan.cpupool) ----------------------------------------------------
    def join_pool(self, owner: str, request_millis: int | None, reported: str, *,
                  created: bool) -> None:
        """`owner` is a live container whose cpuset the runtime reports as `reported`
        ("" or the whole online set: not pinned). At CreateContainer (`created`) nri-sla
        has not set it yet, so any other cpuset was pinned by someone else (the kubelet's
        static CPU manager): left alone, its CPUs never made exclusive. At Synchronize a
        cpuset is nri-sla's own when it holds no exclusive CPU (nri-sla never put one
        there, and no CPU became exclusive while it was away); any other one is pinned."""
        pool = self.cpu_pool
        if pool is None:
            return
        import nri_plugin.plan.cpupool as cpupool  # per create: see the imports' note

        placement = self.allocator.placement_of(owner) if self.allocator else None
        try:
            cpus = parse_cpulist(reported)
        except CpuListError:
            cpus = NO_CPUS  # a cpuset the kernel would not take: ours to set
        layout = pool.allocator.layout
        whole = not cpus or cpus == layout.topology.online
        placed = placement is not None and bool(placement.cpus)
        foreign = not placed and not whole and (
            created or not cpus.isdisjoint(pool.allocator.exclusive_cpus_in_use()))
        member = (cpupool.PoolMember(cpupool.cpus_needed(request_millis), cpus) if foreign
                  else cpupool.unpinned_member(request_millis))
        # What it runs on now: without a cpuset, every online CPU.
        pool.join(owner, member, None if created else cpus or layout.topology.online)

    def cpuset_of(self, owner: str) -> str:
        """The cpuset `owner` has now in the pool ("": no pool on this node): what it was
        last told (CPUs given back reach it at the next widening), else what it should
        have; a repair or a read-back compares with this, never its creation-time one."""
        return format_cpulist(self.cpu_pool.current(owner)) if self.cpu_pool else ""

    def exclusive_of(self, owner: str) -> str | None:
        """The exclusive CPUs `owner` holds now (a resize or a restore gives back what its
        request no longer covers); None: no allocator here to ask."""
        if self.allocator is None:
            return None
        placement = self.allocator.placement_of(owner)
        return format_cpulist(placement.exclusive_cpus) if placement is not None else ""

    def runs_everywhere(self, cpus: str) -> bool:
        """`cpus` is every online CPU: what a container without a cpuset runs on."""
        return self.allocator is not None and parse_cpulist(cpus) == self.allocator.topology.online

    def answer_cpuset(self, owner: str, planned: bool) -> str:
        """The cpuset an answer about `owner` carries (cpuset_of's), counted as told; ""
        when none need be sent: no pool on this node, or every online CPU while nri-sla
        planned none (`planned`) and never told it a narrower one (a container without a
        cpuset runs on all of them already). Sent with every CreateContainer: the set is
        compared, not its text, and the text of the last one (mostly the shared pool,
        again) is not made twice."""
        pool = self.cpu_pool
        if pool is None:
            return ""
        before = pool.told(owner)
        cpus = pool.answer(owner)
        if not cpus:
            return ""
        # `is` first: mostly the shared pool, one object per allocator generation (the
        # online set itself while nothing is exclusive), and `==` between equal sets
        # looks up every CPU (128 on a large node) even when they are one object.
        online = pool.allocator.topology.online
        if (not planned and (cpus is online or cpus == online)
                and (before is None or before is online or before == online)):
            return ""  # (told a narrower one before: given-back CPUs not sent yet)
        answered = self._answered[0]
        if answered is not cpus and answered != cpus:
            self._answered = (cpus, format_cpulist(cpus))
        return self._answered[1]

    def cpuset_updates(self, exclude: str, widen: bool) -> dict[str, str]:
        """Containers (but `exclude`) whose cpuset must change: container id -> new
        cpuset. widen=False: those holding CPUs that became exclusive since they were told
        theirs; widen=True: also those that get given-back CPUs (CpuPool.changes)."""
        if self.cpu_pool is None:
            return {}
        return {owner: format_cpulist(cpus)
                for owner, cpus in self.cpu_pool.changes(exclude, widen).items()}

    def cpu_floors(self, owner: str) -> tuple[CpuFloor, ...]:
        """What exclusive CPUs for `owner` must leave to the other live containers."""
        return self.cpu_pool.floors(owner) if self.cpu_pool is not None else ()

    def resize_cpus(self, owner: str, request_millis: int | None,
                    namespace: str) -> frozenset[int]:
        """`owner`'s CPU request changed (UpdateContainer): the pool counts the new one,
        and exclusive CPUs beyond its whole CPUs are given back (unless the namespace may
        exceed the runtime's limits). Returns the CPUs given back."""
        pool = self.cpu_pool
        if pool is None:
            return frozenset()
        from nri_plugin.plan.cpupool import cpus_needed

        member = pool.member(owner)
        if member is not None:
            pool.join(owner, replace(member, need=cpus_needed(request_millis)))
        return self._within_request(owner, request_millis, namespace)

    def _within_request(self, owner: str, request_millis: int | None,
                        namespace: str | None) -> frozenset[int]:
        """`owner`'s exclusive CPUs above the logical CPUs of its CPU request given back
        (unless its namespace may exceed the runtime's limits, or it has no known pod: a
        record restore holds to the end, as it holds other grants outside the policy);
        the CPUs given back."""
        if (request_millis is None or self.allocator is None or namespace is None
                or self.config.allows("exceed-runtime-limits", namespace)):
            return frozenset()
        return self.allocator.shrink_exclusive(owner, request_millis // 1000,
                                               self.config.cpu.exclusive_full_cores)

    def cpus_short(self, owner: str, request_millis: int | None) -> tuple[int, int] | None:
        """(whole CPUs a new request needs, CPUs `owner`'s cpuset can hold) when they do not
        fit (a resize up that the CPUs outside every exclusive set cannot give); None
        when they fit, or the cpuset is not nri-sla's."""
        pool = self.cpu_pool
        member = pool.member(owner) if pool is not None else None
        if member is None or member.pinned:
            return None
        from nri_plugin.plan.cpupool import cpus_needed

        need = cpus_needed(request_millis)
        have = len(pool.cpuset(owner, need))
        return (need, have) if have < need else None

    def release(self, owner: str) -> None:
        if self.cpu_pool is not None:
            self.cpu_pool.leave(owner)
        if self.rt_budget is not None:
            self.rt_budget.release(owner)
        if self.allocator is not None:
            self.allocator.release(owner)

    def gpu_grant(self, granted: GrantedResources,
                  kubelet_gpu_ids: tuple[str, ...] = ()) -> GpuGrant:
        """The GPUs `granted` names on this node (runtime_gpus.resolve_grant); nothing on
        a node without an allocator."""
        import nri_plugin.plan.runtime_gpus as runtime_gpus  # per create: see the imports' note

        if self.allocator is None:
            return runtime_gpus.GpuGrant()
        return runtime_gpus.resolve_grant(self.allocator.inventory, granted,
                                          self.config.gpu.grant_cdi_kinds, kubelet_gpu_ids)

    def hold_grant(self, owner: str, grant: GpuGrant) -> None:
        """`owner` holds its granted GPUs when nri-sla placed nothing for it (no SLA, or
        one without placement): every container that can open a GPU is a holder, so that
        the status and the metrics see them all. Never refused: the grant is the
        kubelet's."""
        if self.allocator is None or grant.empty or self.allocator.placement_of(owner):
            return
        from nri_plugin.plan.placement_values import PlacementRequest

        self.allocator.allocate(PlacementRequest(owner, align=False, granted_gpus=grant.gpus,
                                                 granted_migs=grant.migs))

    def usage(self) -> tuple[int, int]:
        """GPUs held (vanished ones included: their holders still have them) and
        exclusive CPUs held."""
        if self.allocator is None:
            return 0, 0
        gpus = len(self.allocator.gpus_in_use()) + len(self.allocator.missing_gpus())
        return gpus, len(self.allocator.exclusive_cpus_in_use())

    def rescan_inventory(self) -> InventoryChange | None:
        """Read the node's GPUs again and hand them to the allocator (Allocator.rescan
        says what happens to held GPUs); None when this node does not rescan. Raises
        InventoryError or OSError when the inventory cannot be read (nothing changes)."""
        if self.allocator is None or self.gpus is None:
            return None
        return self.allocator.rescan(self.gpus.read())

    def poll_gpu_health(self, timeout_ms: int = 0) -> HealthChange | None:
        """One health step (GpuHealthMonitor.poll); a change reaches the allocator at once
        (an unhealthy GPU is never a new container's choice). None: no monitor here."""
        if self.gpus is None or self.allocator is None:
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

    def make_rt_room(self, plan: ContainerPlan, paths: CgroupPaths, owner: str = ""
                     ) -> tuple[ContainerPlan, list[RtChange]]:
        """cgroup v1: raise the ancestors' RT budget before the container's own is written
        (the kernel refuses a child budget its parents lack). Hard mode: PlanError; soft
        mode: the plan without RT, with a warning. Returns the changes made (to undo); they
        go into the ledger, and `owner`'s budget keeps them until it is released."""
        if not plan.rt_runtime or paths.version != 1:
            return plan, []
        from nri_plugin.enforce.errors import EnforceError, RtBudgetError
        from nri_plugin.enforce.rt import make_rt_room

        try:
            done = make_rt_room(paths, plan.rt_runtime, plan.rt_period_in_force)
        except EnforceError as exc:
            key = plan.key or self.prefix
            if isinstance(exc, RtBudgetError) and exc.operator_note:
                # What the other groups take: the operator's, never the pod's message.
                log.info("RT room refused for %s: %s", owner or paths.cgroups_path,
                         exc.operator_note)
            if plan.enforcement == "hard":
                raise PlanError(key, "cpu.rt-runtime", str(exc), "budget") from exc
            problem = f"{key}: cpu.rt-runtime: {exc}"
            if owner and self.rt_budget is not None:
                # It runs without RT: what the planner set aside would be refused to others.
                self.rt_budget.release(owner)
            return replace(plan, rt_runtime=None, rt_period=None,
                           warnings=(*plan.warnings, problem),
                           reasons=(*plan.reasons, "budget")), []
        if owner and self.rt_budget is not None:
            import nri_plugin.plan.rt_budget as budgets  # loaded: the budget is one

            # `owner`'s grant, with where it lives now: the ancestors keep this raise
            # (give_back_rt) until the grant is released.
            self.rt_budget.hold(owner, budgets.RtGrant(plan.rt_runtime, plan.rt_period_in_force,
                                                       _cpu_dir(paths)))
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
        pending = self.rt_budget.cgroup_dirs() if self.rt_budget is not None else {}
        return self.rt_ledger.give_back(root, pending)

    def write_plan(self, plan: ContainerPlan, cgroups_path: str, scope: str, *,
                   undo_on_failure: bool | None = None) -> list[str]:
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


def _still_held(record: Mapping[str, Any], reported: str,
                cpusets: ReportedCpusets) -> Mapping[str, Any]:
    """A placement record as the container holds it now (the record is not rewritten
    when a resize down gives exclusive CPUs back): of the record's exclusive CPUs, those
    its reported cpuset holds. A cpuset of its exclusive CPUs alone holds none given
    back. One with CPUs beyond them (the shared pool too: soft mode clamped its exclusive
    CPUs, or a resize down and up again) holds the given-back ones as well, as the shared
    pool has them: of those, a CPU another live container's cpuset holds is shared, not
    its own. Never more than the record grants; `cpusets`: every live container's."""
    if not reported or "exclusive" not in record:
        return record
    try:
        now = parse_cpulist(reported)
        granted = parse_cpulist(str(record["exclusive"]))
    except CpuListError:
        return record  # the record's own check refuses it
    held = granted & now
    if not now <= granted:
        held -= cpusets.elsewhere(reported)
    kept = {k: v for k, v in record.items() if k not in ("exclusive", "cpus")}
    if held:
        kept["exclusive"] = kept["cpus"] = format_cpulist(held)
    elif record.get("aligned"):
        kept["cpus"] = format_cpulist(now)
    return kept


def _cpu_dir(paths: CgroupPaths) -> Path:
    """The container's cpu cgroup dir as enforce.rt names the groups (links resolved:
    /sys/fs/cgroup/cpu is often a link to cpu,cpuacct), whether or not it exists yet."""
    from pathlib import Path  # v1 RT containers only: a cold hook run spares pathlib

    cpu_dir = Path(paths.dir("cpu"))
    return cpu_dir.parent.resolve() / cpu_dir.name


def inventory_reader(config: NodeConfig, sysfs_root: str = "/sys",
                     inventory_file: str | None = None) -> InventoryReader:
    """The reader of the node's GPUs from where the config says (or a replayed snapshot
    file); one per process, so that it keeps NVML's last good read."""
    from pathlib import Path

    from nri_plugin.topology.inventory import InventoryReader, configured_reader

    if inventory_file:
        return InventoryReader("snapshot", snapshot=Path(inventory_file))
    return configured_reader(config.gpu.inventory, Path(sysfs_root))


def read_gpu_inventory(config: NodeConfig, sysfs_root: str = "/sys",
                       inventory_file: str | None = None) -> GpuInventory:
    """The node's GPUs from where the config says (or a replayed snapshot file), once."""
    return inventory_reader(config, sysfs_root, inventory_file).read()


def node_allocator(config: NodeConfig, sysfs_root: str = "/sys", *,
                   inventory_file: str | None = None, gpus: bool = True,
                   inventory: GpuInventory | None = None) -> Allocator:
    """The GPU / exclusive-CPU allocator over this node (or a replayed snapshot).
    gpus=False: topology only, no GPU inventory (NVML) loaded; `inventory`: one already
    read."""
    from nri_plugin.plan.allocator import Allocator
    from nri_plugin.topology.cpus import read_topology
    from nri_plugin.topology.gpus import GpuInventory

    reserved = frozenset(config.reserved_cpus)
    if inventory_file:
        from pathlib import Path

        from nri_plugin.topology.snapshot import load_snapshot

        snapshot = load_snapshot(Path(inventory_file))
        return Allocator(snapshot.topology, inventory or snapshot.inventory, reserved)
    if inventory is None:
        inventory = read_gpu_inventory(config, sysfs_root) if gpus else GpuInventory()
    return Allocator(read_topology(sysfs_root), inventory, reserved)


def build_node(config: NodeConfig, *, cgroup_version: int | None = None,
               inventory_file: str | None = None, sysfs_root: str = "/sys",
               detect: bool = True, record_key: bytes | None = None) -> NodeState:
    """The plugin's NodeState for this host (or a replayed inventory snapshot / fake sysfs).

    detect=False: plan only (explain), no cgroup facts read from the host beyond the
    version.
    """
    from pathlib import Path

    from nri_plugin.enforce.capabilities import detect_capabilities
    from nri_plugin.enforce.cgroupdetect import detect_cgroup_facts
    from nri_plugin.enforce.rt_ledger import LEDGER_FILE, RtLedger
    from nri_plugin.plan.rt_budget import RtBudget, kernel_rt_share
    from nri_plugin.topology.watched import WatchedInventory

    cg = config.cgroup
    facts = None
    if detect or cgroup_version is None:
        facts = detect_cgroup_facts(cg.root, cg.driver, cgroup_version or cg.version or "auto")
        cgroup_version = facts.version
    gpus = WatchedInventory.of(inventory_reader(config, sysfs_root, inventory_file))
    inventory = gpus.read()
    return NodeState(config, cgroup_version, facts=facts,
                     allocator=node_allocator(config, sysfs_root, inventory_file=inventory_file,
                                              inventory=inventory),
                     rt_budget=RtBudget(config.rt_budget * kernel_rt_share()),
                     rt_ledger=(RtLedger(Path(config.state_dir) / LEDGER_FILE)
                                if detect and cgroup_version == 1 else None),
                     capabilities=detect_capabilities(cgroup_version, sysfs_root),
                     record_key=record_key, gpus=gpus)
