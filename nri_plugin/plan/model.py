"""Values the planner produces: what one container gets, independent of how it is applied.

A ContainerPlan is neutral: `nri_plugin.enforce` turns it into an NRI ContainerAdjustment
and/or cgroupfs writes, depending on the path (plugin or hook) and the cgroup version.
"""

from __future__ import annotations

from nri_plugin.plan.errors import PlanError
from nri_plugin.sla.model import DEFAULT_RT_PERIOD_US
from nri_plugin.value import Frozen, field

TYPE_CHECKING = False  # `typing` costs the OCI hook start-up time; only checkers need it
if TYPE_CHECKING:
    from typing import Any


class Shortfall(Frozen):
    """One requested setting that cannot be applied as asked."""

    field: str
    message: str
    reason: str  # metric label: policy | limit | unsupported | placement | device | budget

    def render(self, key: str) -> str:
        return f"{key}: {self.field}: {self.message}"


def refusal(key: str, shortfalls: list[Shortfall]) -> PlanError:
    """Hard mode: one refusal naming the first shortfall, and the others after it."""
    first = shortfalls[0]
    more = "; ".join(s.render(key) for s in shortfalls[1:])
    return PlanError(
        key, first.field, first.message + (f" (also: {more})" if more else ""), first.reason
    )


class IoLimit(Frozen):
    """io.max for one block device, resolved to MAJ:MIN."""

    major: int
    minor: int
    read_bps: int | None = None
    write_bps: int | None = None
    read_iops: int | None = None
    write_iops: int | None = None


class MemoryPolicy(Frozen):
    """A NUMA memory policy for the container (NRI's LinuxMemoryPolicy)."""

    mode: str  # bind | preferred | interleave
    nodes: str  # cpulist-style node list, e.g. "0-1"


class ContainerPlan(Frozen):
    """Everything one container gets. None means "leave as the runtime has it"."""

    enforcement: str
    cgroup_version: int
    cpu_quota: int | None = None
    cpu_period: int | None = None
    cpus: str | None = None
    mems: str | None = None
    rt_runtime: int | None = None
    rt_period: int | None = None
    memory_max: int | None = None
    memory_high: int | None = None
    # v1 only, soft mode: memory.high has no v1 file, the soft limit stands in for it.
    memory_soft_limit: int | None = None
    memory_policy: MemoryPolicy | None = None
    io_weight: int | None = None
    io_max: tuple[IoLimit, ...] = ()
    placement_record: dict[str, Any] | None = None
    warnings: tuple[str, ...] = ()
    reasons: tuple[str, ...] = field(default=())  # metric labels of the warnings
    key: str = ""  # the annotation the SLA came from, for messages found later

    @property
    def rt_period_in_force(self) -> int:
        """The real-time period the budget is per: the plan's, else the kernel's default."""
        return self.rt_period or DEFAULT_RT_PERIOD_US
