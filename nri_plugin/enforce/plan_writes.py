"""ContainerPlan -> cgroupfs writes, for the plan's cgroup version (via enforce.mapping).

scope "all": every setting as files (the OCI hook, which has no NRI to lean on).
scope "direct": only what an NRI adjustment cannot carry on this node, written by the
plugin at StartContainer: on v1 the memory soft limit and blkio weight/throttles (v1 has
no `unified`), on v2 io.max for more than one device (the kernel takes one device per
write to io.max, and runc writes a `unified` value in a single write).
scope "runtime": the rest, what the plugin's adjustment has the runtime write (CPU
bandwidth, cpuset, memory limit, RT budget on v1; on v2 also `unified` memory.high,
io.weight and a single device's io.max), as the files it ends up in: the drift watch
reads these back and re-asserts them through the runtime.
"""

from __future__ import annotations

from nri_plugin.enforce.cgfile import CgroupWrite
from nri_plugin.enforce.mapping import (
    v1_cpu_writes,
    v1_io_writes,
    v1_memory_writes,
    v2_cpu_writes,
    v2_io_writes,
    v2_memory_writes,
)
from nri_plugin.errors import ProgrammingError
from nri_plugin.plan.model import ContainerPlan


def unified_io_max(plan: ContainerPlan) -> bool:
    """Whether io.max travels in the adjustment's `unified` map (v2, a single device)."""
    return plan.cgroup_version == 2 and len(plan.io_max) == 1


def cgroup_writes(plan: ContainerPlan, scope: str = "all", bfq: bool = False) -> list[CgroupWrite]:
    """The plan's settings as cgroupfs writes, in an order the kernel accepts.

    `bfq`: the node's block devices are scheduled by BFQ, so weights go to the bfq files.
    """
    if scope not in ("all", "direct", "runtime"):
        raise ProgrammingError(f"scope must be 'all', 'direct' or 'runtime', not {scope!r}")
    writes: list[CgroupWrite] = []
    everything = scope == "all"
    runtime = everything or scope == "runtime"
    direct = scope != "runtime"
    if plan.cgroup_version == 1:
        if runtime:
            writes += v1_cpu_writes(
                plan.cpu_quota,
                plan.cpu_period,
                plan.cpus,
                plan.mems,
                plan.rt_runtime,
                plan.rt_period,
            )
            writes += v1_memory_writes(max_bytes=plan.memory_max)
        if direct:
            writes += v1_memory_writes(high=plan.memory_soft_limit)
            writes += v1_io_writes(plan.io_weight, plan.io_max, bfq)
        return writes
    if everything:
        writes += v2_cpu_writes(plan.cpu_quota, plan.cpu_period, plan.cpus, plan.mems)
        writes += v2_memory_writes(plan.memory_high, plan.memory_max)
        writes += v2_io_writes(plan.io_weight, plan.io_max, bfq)
    elif runtime:
        writes += v2_cpu_writes(plan.cpu_quota, plan.cpu_period, plan.cpus, plan.mems)
        writes += v2_memory_writes(plan.memory_high, plan.memory_max)
        # As the adjustment's `unified` carries them (adjustment.fill_resources): runc
        # writes io.weight "default N" whatever the node's scheduler.
        writes += v2_io_writes(
            plan.io_weight, plan.io_max if unified_io_max(plan) else (), bfq=False
        )
    elif not unified_io_max(plan):
        writes += v2_io_writes(None, plan.io_max, bfq)
    return writes
