"""Pure mappings from SLA values to direct cgroup writes (v1 and v2).

Used where NRI cannot carry a setting (cgroup v1: soft limit, blkio weight, throttles) and by
the OCI hook, which writes everything itself. Values are plain ints already validated by
nri_plugin.sla; device rules are already resolved to MAJ:MIN (blockdev.resolve_block_device).

Weight scaling (v2 io.weight is 1..10000 with default 100):
* BFQ (v1 blkio.bfq.weight, v2 io.bfq.weight): 1..1000, default 100. Piecewise linear
  through the three anchors 1->1, 100->100, 10000->1000, so the default stays the default
  and the order of weights is kept: w<=100 -> w; w>100 -> 100 + (w-100)*900/9900.
* CFQ (v1 blkio.weight, kernels before 5.0): 10..1000, default 500. Same idea with anchors
  1->10, 100->500, 10000->1000.
Results are rounded to the nearest integer.
"""

from __future__ import annotations

from nri_plugin.enforce.cgfile import CgroupWrite
from nri_plugin.errors import ProgrammingError
from nri_plugin.plan.model import IoLimit

IO_WEIGHT_MIN, IO_WEIGHT_DEFAULT, IO_WEIGHT_MAX = 1, 100, 10000
BFQ_WEIGHT_MIN, BFQ_WEIGHT_DEFAULT, BFQ_WEIGHT_MAX = 1, 100, 1000
CFQ_WEIGHT_MIN, CFQ_WEIGHT_DEFAULT, CFQ_WEIGHT_MAX = 10, 500, 1000


def _check_io_weight(weight: int) -> None:
    if not IO_WEIGHT_MIN <= weight <= IO_WEIGHT_MAX:
        raise ProgrammingError(f"io.weight {weight} outside {IO_WEIGHT_MIN}..{IO_WEIGHT_MAX}")


def _piecewise(w: int, lo: int, mid: int, hi: int) -> int:
    if w <= IO_WEIGHT_DEFAULT:
        span = IO_WEIGHT_DEFAULT - IO_WEIGHT_MIN
        return round(lo + (w - IO_WEIGHT_MIN) * (mid - lo) / span)
    span = IO_WEIGHT_MAX - IO_WEIGHT_DEFAULT
    return round(mid + (w - IO_WEIGHT_DEFAULT) * (hi - mid) / span)


def io_weight_to_bfq(weight: int) -> int:
    """io.weight 1..10000 -> BFQ weight 1..1000 (100 stays 100)."""
    _check_io_weight(weight)
    return _piecewise(weight, BFQ_WEIGHT_MIN, BFQ_WEIGHT_DEFAULT, BFQ_WEIGHT_MAX)


def io_weight_to_cfq(weight: int) -> int:
    """io.weight 1..10000 -> v1 blkio.weight 10..1000 (100 -> 500, CFQ's default)."""
    _check_io_weight(weight)
    return _piecewise(weight, CFQ_WEIGHT_MIN, CFQ_WEIGHT_DEFAULT, CFQ_WEIGHT_MAX)


# --------------------------------------------------------------------------- memory


def v1_memory_writes(high: int | None = None, max_bytes: int | None = None) -> list[CgroupWrite]:
    """memory.max -> memory.limit_in_bytes; memory.high -> memory.soft_limit_in_bytes.

    v1 has no throttle point: the soft limit only steers reclaim under global pressure, so
    callers in hard mode refuse memory.high on v1 and soft mode warns (design.md).
    """
    writes = []
    if max_bytes is not None:
        writes.append(CgroupWrite("memory", "memory.limit_in_bytes", str(max_bytes)))
    if high is not None:
        writes.append(CgroupWrite("memory", "memory.soft_limit_in_bytes", str(high)))
    return writes


def v2_memory_writes(high: int | None = None, max_bytes: int | None = None) -> list[CgroupWrite]:
    writes = []
    if max_bytes is not None:
        writes.append(CgroupWrite("memory", "memory.max", str(max_bytes)))
    if high is not None:
        writes.append(CgroupWrite("memory", "memory.high", str(high)))
    return writes


# --------------------------------------------------------------------------- cpu


def v1_cpu_writes(
    quota_us: int | None = None,
    period_us: int | None = None,
    cpus: str | None = None,
    mems: str | None = None,
    rt_runtime_us: int | None = None,
    rt_period_us: int | None = None,
) -> list[CgroupWrite]:
    """CPU bandwidth, RT budget and cpuset for v1, in an order the kernel accepts.

    Period before quota (the quota is checked against the period); rt_period before
    rt_runtime (runtime may not exceed the period); mems before cpus does not matter for a
    container dir, but both need the parent's set already (runc/kubelet did that).
    The RT budget of ancestors must be raised first: see rt.raise_rt_ancestors.
    """
    writes = []
    if period_us is not None:
        writes.append(CgroupWrite("cpu", "cpu.cfs_period_us", str(period_us)))
    if quota_us is not None:
        writes.append(CgroupWrite("cpu", "cpu.cfs_quota_us", str(quota_us)))
    if rt_period_us is not None:
        writes.append(CgroupWrite("cpu", "cpu.rt_period_us", str(rt_period_us)))
    if rt_runtime_us is not None:
        writes.append(CgroupWrite("cpu", "cpu.rt_runtime_us", str(rt_runtime_us)))
    if mems is not None:
        writes.append(CgroupWrite("cpuset", "cpuset.mems", mems))
    if cpus is not None:
        writes.append(CgroupWrite("cpuset", "cpuset.cpus", cpus))
    return writes


def v2_cpu_writes(
    quota_us: int | None = None,
    period_us: int | None = None,
    cpus: str | None = None,
    mems: str | None = None,
) -> list[CgroupWrite]:
    """cpu.max "QUOTA PERIOD" ("max" without quota); no RT budget exists on v2."""
    writes = []
    if quota_us is not None or period_us is not None:
        quota = "max" if quota_us is None or quota_us < 0 else str(quota_us)
        value = quota if period_us is None else f"{quota} {period_us}"
        writes.append(CgroupWrite("cpu", "cpu.max", value))
    if mems is not None:
        writes.append(CgroupWrite("cpuset", "cpuset.mems", mems))
    if cpus is not None:
        writes.append(CgroupWrite("cpuset", "cpuset.cpus", cpus))
    return writes


# --------------------------------------------------------------------------- io

_V1_THROTTLE = (
    ("read_bps", "blkio.throttle.read_bps_device"),
    ("write_bps", "blkio.throttle.write_bps_device"),
    ("read_iops", "blkio.throttle.read_iops_device"),
    ("write_iops", "blkio.throttle.write_iops_device"),
)
_V2_KEYS = (
    ("read_bps", "rbps"),
    ("write_bps", "wbps"),
    ("read_iops", "riops"),
    ("write_iops", "wiops"),
)


def v1_io_writes(
    weight: int | None, rules_resolved: list[IoLimit] | tuple[IoLimit, ...], bfq: bool
) -> list[CgroupWrite]:
    """io.weight -> blkio.bfq.weight (bfq) or blkio.weight (CFQ); io.max -> one
    blkio.throttle.* write per device and limit ("MAJ:MIN value": one rule per write(2))."""
    writes = []
    if weight is not None:
        if bfq:
            writes.append(CgroupWrite("blkio", "blkio.bfq.weight", str(io_weight_to_bfq(weight))))
        else:
            writes.append(CgroupWrite("blkio", "blkio.weight", str(io_weight_to_cfq(weight))))
    for rule in rules_resolved:
        for attr, file in _V1_THROTTLE:
            value = getattr(rule, attr)
            if value is not None:
                writes.append(CgroupWrite("blkio", file, f"{rule.major}:{rule.minor} {value}"))
    return writes


def v2_io_max_line(rule: IoLimit) -> str | None:
    """ "MAJ:MIN rbps=N wbps=N ..." with only the limits given (others stay as they are);
    None when the rule sets nothing."""
    parts = [
        f"{key}={getattr(rule, attr)}" for attr, key in _V2_KEYS if getattr(rule, attr) is not None
    ]
    return f"{rule.major}:{rule.minor} " + " ".join(parts) if parts else None


def v2_io_writes(
    weight: int | None, rules_resolved: list[IoLimit] | tuple[IoLimit, ...], bfq: bool
) -> list[CgroupWrite]:
    """io.weight "default N" (iocost, 1..10000) or io.bfq.weight "default N" (1..1000, scaled)
    when BFQ schedules the devices; io.max one line per device per write."""
    writes = []
    if weight is not None:
        if bfq:
            writes.append(CgroupWrite("io", "io.bfq.weight", f"default {io_weight_to_bfq(weight)}"))
        else:
            _check_io_weight(weight)
            writes.append(CgroupWrite("io", "io.weight", f"default {weight}"))
    for rule in rules_resolved:
        line = v2_io_max_line(rule)
        if line:
            writes.append(CgroupWrite("io", "io.max", line))
    return writes
