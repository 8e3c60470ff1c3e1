"""The node as the plugin and `explain` see it, and `decide`: annotations -> SLA -> plan.

NodeState holds what outlives one container: the node config, cgroup facts, the GPU and
exclusive-CPU allocator and the RT budget. `decide` runs the data path for one container
and never raises: every failure becomes a Decision with an error the runtime can show.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from nri_plugin.config import NodeConfig
from nri_plugin.enforce.plan_writes import cgroup_writes
from nri_plugin.plan.model import ContainerPlan, PlanError
from nri_plugin.plan.planner import PlanContext, plan_container
from nri_plugin.plan.record import RecordError, decode_record, encode_record
from nri_plugin.plan.rt_budget import RtBudget, RtGrant, kernel_rt_share
from nri_plugin.sla.errors import SlaError
from nri_plugin.sla.parse import sla_for_container

log = logging.getLogger("nri_sla.node")


@dataclass
class Decision:
    """The outcome for one container: enforced, warned, refused or skipped (no SLA)."""

    outcome: str
    reason: str = "ok"
    plan: ContainerPlan | None = None
    error: Exception | None = None

    @property
    def warnings(self) -> tuple[str, ...]:
        return self.plan.warnings if self.plan is not None else ()

    @property
    def error_text(self) -> str | None:
        return str(self.error) if self.error is not None else None


class NodeState:
    """Node-wide state shared by every container decision."""

    def __init__(self, config: NodeConfig, cgroup_version: int, *, facts: Any = None,
                 allocator: Any = None, rt_budget: RtBudget | None = None,
                 io_weight_supported: bool = True, bfq: bool = False,
                 resolve_device: Any = None) -> None:
        self.config = config
        self.cgroup_version = cgroup_version
        self.facts = facts
        self.allocator = allocator
        self.rt_budget = rt_budget or RtBudget(config.rt_budget * kernel_rt_share())
        self.io_weight_supported = io_weight_supported
        self.bfq = bfq
        self._cpusets: dict[str, str] = {}  # aligned container -> cpuset it was last given
        self.resolve_device = resolve_device

    @property
    def prefix(self) -> str:
        return self.config.annotation_prefix

    def plan_context(self, namespace: str, owner: str, nri_version: str | None,
                     env: Mapping[str, str] | None = None) -> PlanContext:
        return PlanContext(
            cgroup_version=self.cgroup_version, namespace=namespace, config=self.config,
            owner=owner, allocator=self.allocator, rt_budget=self.rt_budget,
            nri_version=nri_version, resolve_device=self.resolve_device,
            io_weight_supported=self.io_weight_supported, container_env=env or {})

    # -- records -------------------------------------------------------------------------
    def annotations_for(self, plan: ContainerPlan, path: str,
                        body: dict[str, Any] | None = None) -> dict[str, str]:
        """`applied` (and `warnings`) for the container; `body`: the record, if built."""
        annotations = {f"{self.prefix}/applied": encode_record(plan, path, body)}
        if plan.warnings:
            annotations[f"{self.prefix}/warnings"] = "; ".join(plan.warnings)
        return annotations

    def restore(self, containers: Iterable[tuple[str, Mapping[str, str]]]
                ) -> dict[str, ContainerPlan]:
        """Rebuild allocations from the `applied` records of existing containers; returns
        the plans read back (container id -> plan)."""
        restored: dict[str, ContainerPlan] = {}
        for owner, labels in containers:
            text = labels.get(f"{self.prefix}/applied")
            if not text:
                continue
            try:
                _, plan = decode_record(text)
            except RecordError as exc:
                log.warning("container %s: ignoring unreadable %s/applied: %s",
                            owner, self.prefix, exc)
                continue
            if plan.rt_runtime:
                self.rt_budget.restore(owner, RtGrant(plan.rt_runtime, plan.rt_period or 1_000_000))
            if plan.placement_record and self.allocator is not None:
                from nri_plugin.plan.placement_values import PlacementError

                try:
                    self.allocator.restore(owner, plan.placement_record)
                except PlacementError as exc:
                    log.error("container %s: cannot rebuild its placement: %s", owner, exc)
                else:
                    self.remember_cpuset(owner, plan)
            restored[owner] = plan
        return restored

    def remember_cpuset(self, owner: str, plan: ContainerPlan) -> None:
        if plan.cpus:
            self._cpusets[owner] = plan.cpus

    def cpuset_updates(self, exclude: str) -> dict[str, str]:
        """Aligned containers whose cpuset must change because exclusive CPUs were taken
        or given back since they got it: container id -> new cpuset."""
        if self.allocator is None:
            return {}
        from nri_plugin.topology.cpulist import format_cpulist

        changed = {}
        for owner, old in list(self._cpusets.items()):
            cpus = self.allocator.current_cpus(owner)
            if owner == exclude or not cpus:
                continue
            new = format_cpulist(cpus)
            if new != old:
                self._cpusets[owner] = changed[owner] = new
        return changed

    def release(self, owner: str) -> None:
        self._cpusets.pop(owner, None)
        self.rt_budget.release(owner)
        if self.allocator is not None:
            self.allocator.release(owner)

    def usage(self) -> tuple[int, int]:
        if self.allocator is None:
            return 0, 0
        return len(self.allocator.gpus_in_use()), len(self.allocator.exclusive_cpus_in_use())

    # -- enforcement side effects (plugin path) ---------------------------------------
    def direct_writes(self, plan: ContainerPlan) -> list[Any]:
        return cgroup_writes(plan, scope="direct", bfq=self.bfq)

    def prepare_create(self, plan: ContainerPlan, cgroups_path: str) -> ContainerPlan:
        """Raise the ancestors' RT budget before runc writes the container's (cgroup v1)."""
        if not plan.rt_runtime or self.facts is None:
            return plan
        from nri_plugin.enforce.errors import EnforceError
        from nri_plugin.enforce.nodefacts import container_cgroup_paths
        from nri_plugin.enforce.rt import raise_rt_ancestors

        try:
            paths = container_cgroup_paths(cgroups_path, self.facts)
            raise_rt_ancestors(paths.dir("cpu"), plan.rt_runtime, plan.rt_period or 1_000_000,
                               self.facts.hierarchy("cpu").path)
        except EnforceError as exc:
            key = plan.key or self.prefix
            problem = (f"{key}: cpu.rt-runtime: could not raise the parent cgroups' RT "
                       f"budget: {exc}")
            if plan.enforcement == "hard":
                raise PlanError(key, "cpu.rt-runtime", str(exc), "budget") from exc
            return replace(plan, rt_runtime=None, rt_period=None,
                           warnings=(*plan.warnings, problem),
                           reasons=(*plan.reasons, "budget"))
        return plan

    def apply_direct(self, plan: ContainerPlan, cgroups_path: str) -> list[str]:
        """Write what NRI cannot express into the container's cgroup; problems as text."""
        from nri_plugin.enforce.cgroupfs import apply_to_container
        from nri_plugin.enforce.errors import EnforceError

        writes = self.direct_writes(plan)
        if not writes:
            return []
        try:
            results = apply_to_container(cgroups_path, writes, self.facts)
        except EnforceError as exc:
            return [str(exc)]
        return [str(r.error) for r in results if not r.ok]


def decide(node: NodeState, annotations: Mapping[str, str], container_name: str, *,
           namespace: str = "", owner: str = "", nri_version: str | None = None,
           env: Mapping[str, str] | None = None) -> Decision:
    """Run annotations -> SLA -> plan for one container. Never raises."""
    try:
        sla = sla_for_container(annotations, container_name,
                                default_enforcement=node.config.enforcement, prefix=node.prefix)
    except SlaError as exc:
        return Decision("refused", "invalid", error=exc)
    if sla is None:
        return Decision("skipped")
    try:
        plan = plan_container(sla, node.plan_context(namespace, owner, nri_version, env))
    except PlanError as exc:
        return Decision("refused", exc.reason, error=exc)
    outcome = "warned" if plan.warnings else "enforced"
    reason = plan.reasons[0] if plan.reasons else "ok"
    return Decision(outcome, reason, plan=plan)





def build_node(config: NodeConfig, *, cgroup_version: int | None = None,
               inventory_file: str | None = None, sysfs_root: str = "/sys",
               detect: bool = True) -> NodeState:
    """NodeState for this host (or a replayed inventory snapshot / fake sysfs tree).

    detect=False: plan only (explain), no cgroup facts read from the host beyond the
    version, and block devices given as paths are resolved only when they exist here.
    """
    from nri_plugin.enforce.blockdev import any_bfq
    from nri_plugin.enforce.nodefacts import detect_cgroup_facts
    from nri_plugin.plan.allocator import Allocator
    from nri_plugin.topology.cpus import read_topology
    from nri_plugin.topology.inventory import configured_inventory
    from nri_plugin.topology.snapshot import load_snapshot

    cg = config.cgroup
    facts = None
    if detect or cgroup_version is None:
        facts = detect_cgroup_facts(Path(cg.root), cg.driver,
                                    cgroup_version or cg.version or "auto")
        cgroup_version = facts.version
    reserved = frozenset(config.reserved_cpus)
    if inventory_file:
        snapshot = load_snapshot(Path(inventory_file))
        topology, inventory = snapshot.topology, snapshot.inventory
    else:
        topology = read_topology(Path(sysfs_root))
        inventory = configured_inventory(config.gpu.inventory, Path(sysfs_root))
    bfq = any_bfq(Path(sysfs_root))
    return NodeState(config, cgroup_version, facts=facts,
                     allocator=Allocator(topology, inventory, reserved),
                     io_weight_supported=bfq or cgroup_version == 2, bfq=bfq,
                     resolve_device=_resolve_device)


def _resolve_device(spec: str) -> tuple[int, int]:
    """A block device as MAJ:MIN; the planner turns a ValueError into a named shortfall."""
    from nri_plugin.enforce.blockdev import resolve_block_device
    from nri_plugin.enforce.errors import DeviceError

    try:
        return resolve_block_device(spec)
    except DeviceError as exc:
        raise ValueError(str(exc)) from exc

