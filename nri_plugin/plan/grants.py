"""Never more than Kubernetes accounted for: an SLA against what the runtime granted the
container, and the node's per-pod caps.

The kubelet sets each container's CPU quota and memory limit from the pod's limits and its
CPU shares from the requests; a device plugin grants GPUs; the scheduler, LimitRange and
ResourceQuota count exactly these (nri_plugin.granted). An SLA may tighten them and choose
how the container uses them, but unless the node policy lists the namespace in
`permissions.exceed-runtime-limits` it never raises them:

* cpu.limit: at most the runtime's quota, compared as a rate (quota/period) so that a
  different period cannot hide a larger share;
* memory.max: at most the runtime's memory limit;
* cpu.exclusive: at most the whole CPUs of the container's CPU request, as logical CPUs
  (never rounded up to whole SMT cores; `cpu.exclusive-full-cores` refuses a count that
  does not fill them instead).

GPUs are not here: nri-sla never adds one, a container opens exactly its device plugin's
grant, and the SLA's gpu section is verified against that grant (best_fit). No runtime
value (unlimited) caps nothing. Whatever was granted, one pod's containers together stay
within the node's `pod-caps` (exclusive CPUs, real-time share).

Each `fit_*` returns the value to plan with (clamped to what is allowed) and, when the SLA
asked for more, the Shortfall naming both values: hard mode refuses the container with
it, soft mode warns and plans the clamped value.
"""

from __future__ import annotations

from nri_plugin.plan.model import ContainerPlan, Shortfall
from nri_plugin.sla.model import CpuSla, Sla
from nri_plugin.text.quantities import format_cpu, format_duration, format_size
from nri_plugin.value import replace

TYPE_CHECKING = False  # `typing` costs the OCI hook start-up time; only checkers need it
if TYPE_CHECKING:
    from nri_plugin.plan.allocator import Allocator
    from nri_plugin.plan.context import PlanContext

REASON = "limit"  # the metric label of every shortfall here
MIN_QUOTA_US = 1000  # the kernel refuses a CFS quota below 1ms
EXCEED = "exceed-runtime-limits"


def _exceed_allowed(ctx: PlanContext) -> bool:
    return ctx.config.allows(EXCEED, ctx.namespace)


def _using(soft: bool, applied: str) -> str:
    return f"; clamped to {applied}" if soft else ""


def fit_cpu_limit(cpu: CpuSla, ctx: PlanContext, soft: bool) -> tuple[CpuSla, Shortfall | None]:
    """cpu.limit within the runtime's CPU quota, as a rate."""
    granted = ctx.granted.quota_period
    quota, limit = cpu.quota_us, cpu.limit  # a quota has a limit (and a period)
    if (
        granted is None
        or quota is None
        or limit is None
        or cpu.period_us is None
        or _exceed_allowed(ctx)
    ):
        return cpu, None
    q0, p0 = granted
    period = cpu.period_us
    if quota * p0 <= q0 * period:  # quota/period <= q0/p0, exactly (no float rounding)
        return cpu, None
    at_period = q0 * period // p0
    if at_period >= MIN_QUOTA_US:  # the granted rate at the SLA's own period
        fitted = replace(cpu, limit=at_period / period)
    else:  # too short a period for that rate: the runtime's own quota and period
        fitted = replace(cpu, limit=q0 / p0, period_us=p0)
    allowed = format_cpu((q0 * 1000 // p0) / 1000)  # rounded down: never shows more
    shown = fitted.quota_us, fitted.period_us
    message = (
        f"{format_cpu(limit)} exceeds the {allowed} CPUs the runtime granted (the "
        f"pod's limit, quota {q0}us per {p0}us); allowed: at most {allowed}"
        f"{_using(soft, f'quota {shown[0]}us per {shown[1]}us')}"
    )
    return fitted, Shortfall("cpu.limit", message, REASON)


def fit_memory_max(requested: int, ctx: PlanContext, soft: bool) -> tuple[int, Shortfall | None]:
    """memory.max within the runtime's memory limit."""
    granted = ctx.granted.memory_limit
    if granted is None or requested <= granted or _exceed_allowed(ctx):
        return requested, None
    shown = format_size(granted)
    message = (
        f"{format_size(requested)} exceeds the {shown} the runtime granted (the pod's "
        f"limit); allowed: at most {shown}{_using(soft, shown)}"
    )
    return granted, Shortfall("memory.max", message, REASON)


def _cap_note(setting: str, cap: object, total: int, held: int) -> str:
    others = f", the pod's other containers hold {held}" if held else ""
    return f"the node's per-pod cap (node config pod-caps.{setting}: {cap} = {total}{others})"


def _request_limit(ctx: PlanContext) -> tuple[int, str] | None:
    """(whole CPUs, why) of the container's CPU request; None: no cap from the runtime."""
    millis = ctx.granted.cpu_request_millis
    if millis is None or _exceed_allowed(ctx):
        return None
    return millis // 1000, (
        f"the CPU request the runtime granted ({millis}m: {millis // 1000} whole CPUs)"
    )


def fit_exclusive(
    requested: int, ctx: PlanContext, allocator: Allocator, soft: bool
) -> tuple[int, Shortfall | None]:
    """cpu.exclusive within the container's CPU request and the per-pod cap."""
    cap = ctx.config.pod_caps.exclusive_cpus
    layout = allocator.layout
    cap_total = cap.of(len(layout.topology.online - layout.reserved))
    held = ctx.pod_usage.exclusive_cpus
    limits: list[tuple[int, str]] = [
        (max(cap_total - held, 0), _cap_note("exclusive-cpus", cap, cap_total, held))
    ]
    request = _request_limit(ctx)
    if request is not None:
        limits.insert(0, request)
    allowed, why = min(limits, key=lambda lim: lim[0])
    if requested > allowed:
        return allowed, _exclusive_shortfall(requested, allowed, why, soft)
    return requested, None


def fit_full_cores(
    count: int, width: int, ctx: PlanContext, soft: bool
) -> tuple[int, Shortfall | None]:
    """Under `cpu.exclusive-full-cores`, an exclusive count that does not fill whole cores
    of `width` CPUs: refused (hard) or none (soft: the container runs on the shared CPUs).
    Never rounded up: a grant above the count would hold CPUs nobody accounted for."""
    if not ctx.config.cpu.exclusive_full_cores or count % width == 0:
        return count, None
    message = (
        f"{count} does not fill whole cores of {width} CPUs (node policy "
        "cpu.exclusive-full-cores: exclusive CPUs are whole cores only); allowed: a "
        f"multiple of {width}{'; runs on the shared CPUs' if soft else ''}"
    )
    return 0, Shortfall("cpu.exclusive", message, REASON)


def _exclusive_shortfall(requested: int, allowed: int, why: str, soft: bool) -> Shortfall:
    message = (
        f"{requested} exceeds {why}; allowed: at most {allowed}"
        f"{_using(soft, str(allowed) if allowed else 'none')}"
    )
    return Shortfall("cpu.exclusive", message, REASON)


def grant_shortfalls(sla: Sla, ctx: PlanContext) -> list[Shortfall]:
    """What `sla` asks above what the runtime granted, before any fact of a node (no
    allocator, no pod caps): `nri-sla validate` with the pod's own resources. Under
    `ctx.config` (hard mode) every node with that policy refuses these."""
    soft = sla.enforcement == "soft"
    found: list[Shortfall | None] = []
    if sla.cpu is not None:
        found.append(fit_cpu_limit(sla.cpu, ctx, soft)[1])
        request = _request_limit(ctx)
        if sla.cpu.exclusive and request is not None and sla.cpu.exclusive > request[0]:
            found.append(_exclusive_shortfall(sla.cpu.exclusive, request[0], request[1], soft))
    if sla.memory is not None and sla.memory.max is not None:
        found.append(fit_memory_max(sla.memory.max, ctx, soft)[1])
    return [s for s in found if s is not None]


def fit_rt(runtime: int, period: int, ctx: PlanContext, soft: bool) -> tuple[int, Shortfall | None]:
    """The real-time budget within the per-pod RT share; 0: none left."""
    cap = ctx.config.pod_caps.rt_share
    held = ctx.pod_usage.rt_share
    if runtime * 1.0 / period <= cap - held + 1e-12:
        return runtime, None
    allowed = max(int((cap - held) * period), 0)
    others = f", the pod's other containers hold {held:.1%}" if held else ""
    shown = format_duration(allowed) if allowed else "none"
    message = (
        f"{format_duration(runtime)} per {format_duration(period)} "
        f"({runtime / period:.1%} of CPU time) exceeds the node's per-pod real-time "
        f"cap (node config pod-caps.rt-share: {cap:.1%}{others}); allowed: at most "
        f"{shown} per {format_duration(period)}{_using(soft, shown)}"
    )
    return allowed, Shortfall("cpu.rt-runtime", message, REASON)


def refit_plan(plan: ContainerPlan, ctx: PlanContext) -> tuple[ContainerPlan, list[Shortfall]]:
    """A planned container against new runtime values (UpdateContainer: a kubelet resize):
    its CPU quota and memory.max clamped to them. Exclusive CPUs follow the new request
    in the CPU pool (NodeState.resize_cpus), not here."""
    soft = plan.enforcement == "soft"
    shortfalls: list[Shortfall] = []
    changes: dict[str, int | None] = {}
    if plan.cpu_quota is not None and plan.cpu_period:
        cpu = CpuSla(limit=plan.cpu_quota / plan.cpu_period, period_us=plan.cpu_period)
        fitted, short = fit_cpu_limit(cpu, ctx, soft)
        if short is not None:
            shortfalls.append(short)
            changes.update(cpu_quota=fitted.quota_us, cpu_period=fitted.period_us)
    if plan.memory_max is not None:
        memory, short = fit_memory_max(plan.memory_max, ctx, soft)
        if short is not None:
            shortfalls.append(short)
            changes["memory_max"] = memory
    return (replace(plan, **changes) if changes else plan), shortfalls
