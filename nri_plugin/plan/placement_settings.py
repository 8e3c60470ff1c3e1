"""Placement into the plan: the SLA's gpu / cpu.exclusive / numa fields and the
container's GPU grant become an Allocator request, and the placement it would choose
becomes plan settings (cpus, mems, the record), warnings or an error; nothing is taken
(the node takes the record when it admits the container). Nothing here adds a GPU to
the container: it opens exactly its grant."""

from __future__ import annotations

from nri_plugin.plan.errors import PlacementError
from nri_plugin.plan.placement_values import PlacementRequest, cpus_needed
from nri_plugin.topology.cpulist import format_cpulist
from nri_plugin.value import Value

TYPE_CHECKING = False  # `typing` costs the OCI hook start-up time; only checkers need it
if TYPE_CHECKING:
    from typing import Any

    from nri_plugin.plan.allocator import Allocator
    from nri_plugin.plan.context import PlanContext
    from nri_plugin.plan.runtime_gpus import GpuGrant
    from nri_plugin.sla.model import Sla


class PlacementOutcome(Value):
    """The allocator's answer as plan settings, warnings, or an error."""

    __slots__ = ("error", "field", "settings", "warnings")

    def __init__(
        self,
        settings: dict[str, Any] | None = None,
        warnings: tuple[tuple[str, str], ...] = (),  # (field, message)
        error: str | None = None,
        field: str = "gpu",
    ) -> None:
        self.settings = {} if settings is None else settings
        self.warnings = warnings
        self.error = error
        self.field = field


def split_field(message: str, default: str) -> tuple[str, str]:
    """The allocator's messages lead with the SLA field ("gpu.ids: ..."): split it off, so
    the planner names it once."""
    head, sep, rest = message.partition(": ")
    if sep and head and " " not in head:
        return head, rest
    return default, message


def placement_request(sla: Sla, ctx: PlanContext, grant: GpuGrant) -> PlacementRequest:
    gpu, cpu, numa = sla.gpu, sla.cpu, sla.numa
    return PlacementRequest(
        owner=ctx.owner,
        wants_gpu=gpu is not None,
        gpu_count=gpu.count if gpu else None,
        gpu_ids=gpu.ids if gpu else (),
        mig_profile=gpu.mig if gpu else None,
        topology=gpu.topology if gpu else "any",
        align=gpu.align if gpu else True,
        exclusive_cpus=cpu.exclusive if cpu else None,
        numa_nodes=numa.nodes if numa else None,
        granted_gpus=grant.gpus,
        granted_migs=grant.migs,
        cpus_needed=cpus_needed(ctx.granted.cpu_request_millis),
        full_cores=ctx.config.cpu.exclusive_full_cores,
    )


def place(
    sla: Sla, ctx: PlanContext, allocator: Allocator, grant: GpuGrant, hard: bool
) -> PlacementOutcome:
    """Verify the grant, choose exclusive CPUs and align with `allocator` (the context's:
    there is one where there is something to place); settings are plan fields (cpus,
    mems, the placement record)."""
    try:
        placement = allocator.choose(
            placement_request(sla, ctx, grant), hard=hard, floors=ctx.cpu_floors
        )
    except PlacementError as exc:
        field_name, message = split_field(exc.message, exc.field)
        return PlacementOutcome(error=message, field=field_name)
    settings: dict[str, Any] = {"placement_record": placement.to_record()}
    if placement.cpus:
        settings["cpus"] = format_cpulist(placement.cpus)
    if placement.mems:
        settings["mems"] = format_cpulist(placement.mems)
    field_name = (
        "gpu" if sla.gpu else ("cpu.exclusive" if sla.cpu and sla.cpu.exclusive else "numa.nodes")
    )
    warnings = tuple(split_field(w, field_name) for w in placement.warnings)
    return PlacementOutcome(settings, warnings, field=field_name)
