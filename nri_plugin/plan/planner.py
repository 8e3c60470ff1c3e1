"""plan_container: an SLA plus node facts become a ContainerPlan, or a refusal.

Every setting the SLA asks for is either planned exactly or becomes a Shortfall. In hard
mode any shortfall refuses the whole container; in soft mode shortfalls become warnings
and the rest is applied. Planning takes nothing: the allocator and the RT budget are
asked what would fit now, and the plan names it (its placement record, its RT time) for
the node to take when it admits the container (core.reservation).
"""

from __future__ import annotations

from nri_plugin.errors import SlaFailure
from nri_plugin.plan import grants
from nri_plugin.plan.context import PlanContext
from nri_plugin.plan.errors import RtBudgetExceeded
from nri_plugin.plan.model import ContainerPlan, IoLimit, MemoryPolicy, Shortfall, refusal
from nri_plugin.sla.model import Sla
from nri_plugin.value import replace

TYPE_CHECKING = False  # `typing` costs the OCI hook start-up time; only checkers need it
if TYPE_CHECKING:
    from typing import Any

    from nri_plugin.plan.runtime_gpus import GpuGrant

MEMORY_POLICY_NRI_VERSION = (0, 12)


def parse_nri_version(version: str | None) -> tuple[int, int] | None:
    if not version:
        return None
    parts = version.lstrip("v").split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return None


def no_grant_message(grant: GpuGrant, soft: bool) -> str:
    """Why a gpu section has nothing to verify: no device plugin granted a GPU (and an env
    naming GPUs is no grant: the pod author or the image wrote it)."""
    env = (
        f"; its env NVIDIA_VISIBLE_DEVICES={grant.env_only[:64]!r} is not a grant"
        if grant.env_only
        else ""
    )
    return (
        "no device plugin granted this container a GPU (resources.limits "
        f"nvidia.com/gpu or a MIG resource in the pod spec){env}"
        f"{'; no GPU is aligned' if soft else ''}"
    )


def sla_key(sla: Sla, prefix: str) -> str:
    """The annotation a message about `sla` names: the container's own document when it
    has one, else the pod's (else the prefix: an enforcement-only SLA)."""
    documents = [k for k in sla.keys if k.endswith("/pod") or "/container." in k]
    return documents[-1] if documents else prefix


class _Planner:
    def __init__(self, sla: Sla, ctx: PlanContext) -> None:
        self.sla = sla
        self.ctx = ctx
        self.key = sla_key(sla, ctx.config.annotation_prefix)
        self.settings: dict[str, Any] = {}
        self.shortfalls: list[Shortfall] = []
        self.placement_short = False  # placement fell short: no NUMA nodes to follow
        self.soft = sla.enforcement == "soft"

    def short(self, field_path: str, message: str, reason: str) -> None:
        self.shortfalls.append(Shortfall(field_path, message, reason))

    def within(self, fitted: tuple[Any, Shortfall | None]) -> Any:
        """The value a grants.fit_* allows; its shortfall, if any, is noted."""
        value, shortfall = fitted
        if shortfall is not None:
            self.shortfalls.append(shortfall)
        return value

    def allowed(self, permission: str, field_path: str) -> bool:
        if self.ctx.config.allows(permission, self.ctx.namespace):
            return True
        self.short(
            field_path,
            f"namespace {self.ctx.namespace!r} may not use {permission} "
            f"on this node (node config permissions.{permission})",
            "policy",
        )
        return False

    # -- sections ------------------------------------------------------------------
    def plan_cpu(self) -> None:
        cpu = self.sla.cpu
        if cpu is None:
            return
        if cpu.quota_us is not None:  # the parser checked it against the kernel's minimum
            cpu = self.within(grants.fit_cpu_limit(cpu, self.ctx, self.soft))
            self.settings.update(cpu_quota=cpu.quota_us, cpu_period=cpu.period_us)
        elif cpu.period_us is not None:
            self.settings["cpu_period"] = cpu.period_us
        if cpu.rt_runtime_us is not None:
            assert cpu.rt_period_us is not None  # the parser fills the default with the budget
            self.plan_rt(cpu.rt_runtime_us, cpu.rt_period_us)

    def plan_rt(self, runtime: int, period: int) -> None:
        if self.ctx.cgroup_version == 2:
            self.short(
                "cpu.rt-runtime",
                "real-time budget is not available on cgroup v2 nodes (allowed only on cgroup v1)",
                "unsupported",
            )
            return
        if not self.allowed("realtime", "cpu.rt-runtime"):
            return
        runtime = self.within(grants.fit_rt(runtime, period, self.ctx, self.soft))
        if not runtime:
            return
        if self.ctx.rt_budget is not None:
            # Only the plugin keeps an RT budget: the hook's cold run never loads it.
            from nri_plugin.plan.rt_budget import RtGrant

            try:
                self.ctx.rt_budget.check(self.ctx.owner, RtGrant(runtime, period))
            except RtBudgetExceeded as exc:
                self.short("cpu.rt-runtime", str(exc), "budget")
                return
        self.settings.update(rt_runtime=runtime, rt_period=period)

    def plan_placement(self) -> None:
        sla = self.sla
        wants_gpu = sla.gpu is not None
        wants_exclusive = sla.cpu.exclusive if sla.cpu is not None else None
        wants_nodes = sla.numa is not None and sla.numa.nodes is not None
        if not (wants_gpu or wants_exclusive or wants_nodes):
            return
        if wants_gpu and not self.allowed("gpus", "gpu"):
            return
        if wants_exclusive and not self.allowed("exclusive-cpus", "cpu.exclusive"):
            return
        allocator = self.ctx.allocator
        if allocator is None:
            self.short(
                "gpu" if wants_gpu else "numa",
                "no node topology is available to place this container",
                "unsupported",
            )
            return
        if wants_exclusive:
            exclusive = self.within(
                grants.fit_exclusive(wants_exclusive, self.ctx, allocator, self.soft)
            )
            if exclusive:
                exclusive = self.within(
                    grants.fit_full_cores(
                        exclusive, allocator.topology.threads_per_core, self.ctx, self.soft
                    )
                )
            sla = replace(sla, cpu=replace(sla.cpu, exclusive=exclusive or None))
        from nri_plugin.plan.runtime_gpus import resolve_grant  # placements only

        grant = resolve_grant(
            allocator.inventory,
            self.ctx.granted,
            self.ctx.config.gpu.grant_cdi_kinds,
            self.ctx.kubelet_gpu_ids,
        )
        if wants_gpu and grant.unknown:
            self.short(
                "gpu",
                f"the grant names {', '.join(map(repr, grant.unknown[:8]))}, "
                "which match no GPU on this node",
                "placement",
            )
        if wants_gpu and grant.empty:
            self.short("gpu", no_grant_message(grant, self.soft), "placement")
            sla = replace(sla, gpu=None)
        if sla.gpu is None and not (sla.cpu and sla.cpu.exclusive) and not wants_nodes:
            return  # nothing left to place once clamped
        from nri_plugin.plan.placement_settings import place

        outcome = place(sla, self.ctx, allocator, grant, hard=not self.soft)
        if outcome.error is not None:
            self.short(outcome.field, outcome.error, "placement")
            return
        self.settings.update(outcome.settings)
        for field_path, warning in outcome.warnings:
            self.short(field_path, warning, "placement")

    def plan_memory_policy(self) -> None:
        numa = self.sla.numa
        if numa is None or numa.memory_policy in (None, "none"):
            return
        mems = self.settings.get("mems")
        if mems is None:
            if self.placement_short:
                return  # the placement's own shortfall says why there are no nodes
            self.short(
                "numa.memory-policy",
                "needs NUMA nodes: set numa.nodes, cpu.exclusive or gpu with align",
                "unsupported",
            )
            return
        version = parse_nri_version(self.ctx.nri_version)
        if version is not None and version >= MEMORY_POLICY_NRI_VERSION:
            self.settings["memory_policy"] = MemoryPolicy(numa.memory_policy, mems)
        elif numa.memory_policy == "bind":
            # cpuset.mems confines allocations to the same nodes: bind holds, said once.
            self.short(
                "numa.memory-policy",
                f"bind is enforced through cpuset.mems={mems} "
                "(memory policy needs NRI v0.12, containerd 2.3)",
                "unsupported",
            )
            if self.sla.enforcement == "hard":
                self.shortfalls.pop()  # exact in effect: not a refusal
        else:
            runtime = f"NRI {self.ctx.nri_version}" if self.ctx.nri_version else "the OCI hook"
            self.short(
                "numa.memory-policy",
                f"{numa.memory_policy} needs NRI v0.12 "
                f"(containerd 2.3); {runtime} cannot set it (cpuset.mems={mems} "
                "applies)",
                "unsupported",
            )

    def plan_memory(self) -> None:
        mem = self.sla.memory
        if mem is None:
            return
        if mem.max is not None:
            self.settings["memory_max"] = self.within(
                grants.fit_memory_max(mem.max, self.ctx, self.soft)
            )
        if mem.high is not None:
            if self.ctx.cgroup_version == 2:
                self.settings["memory_high"] = mem.high
            else:
                self.short(
                    "memory.high",
                    "not available on cgroup v1 nodes (allowed only on "
                    "cgroup v2, soft mode writes memory.soft_limit_in_bytes instead)",
                    "unsupported",
                )
                self.settings["memory_soft_limit"] = mem.high

    def plan_io(self) -> None:
        io = self.sla.io
        if io is None:
            return
        if io.weight is not None:
            if self.ctx.io_weight_supported:
                self.settings["io_weight"] = io.weight
            else:
                self.short(
                    "io.weight",
                    "no proportional IO controller is active on this node "
                    "(io.weight needs the BFQ scheduler or io.cost)",
                    "unsupported",
                )
        if io.max and self.allowed("io-max", "io.max"):
            limits = []
            for i, rule in enumerate(io.max):
                try:
                    major, minor = self.resolve(rule.device)
                except (SlaFailure, OSError, ValueError) as exc:
                    self.short(f"io.max[{i}].device", str(exc), "device")
                    continue
                limits.append(
                    IoLimit(
                        major, minor, rule.read_bps, rule.write_bps, rule.read_iops, rule.write_iops
                    )
                )
            self.settings["io_max"] = tuple(limits)

    def resolve(self, device: str) -> tuple[int, int]:
        if self.ctx.resolve_device is not None:  # raises an SlaFailure or OSError, named
            return self.ctx.resolve_device(device)
        major, _, minor = device.partition(":")
        return int(major), int(minor)  # no resolver: MAJ:MIN as written, else ValueError

    # -- outcome -------------------------------------------------------------------
    def finish(self) -> ContainerPlan:
        if self.sla.enforcement == "hard" and self.shortfalls:
            raise refusal(self.key, self.shortfalls)
        return ContainerPlan(
            self.sla.enforcement,
            self.ctx.cgroup_version,
            **self.settings,
            warnings=tuple(s.render(self.key) for s in self.shortfalls),
            reasons=tuple(s.reason for s in self.shortfalls),
            key=self.key,
        )


def plan_container(sla: Sla, ctx: PlanContext) -> ContainerPlan:
    """Plan one container; nothing is taken for it. Raises PlanError in hard mode when
    anything falls short."""
    planner = _Planner(sla, ctx)
    planner.plan_cpu()
    before = len(planner.shortfalls)
    planner.plan_placement()
    planner.placement_short = len(planner.shortfalls) > before
    planner.plan_memory_policy()
    planner.plan_memory()
    planner.plan_io()
    return planner.finish()
