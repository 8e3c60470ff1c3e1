"""ContainerPlan -> NRI ContainerAdjustment: the part of a plan the runtime applies itself.

Never a device, CDI name or GPU env: a container opens exactly the GPUs its device plugin
granted (nri-sla only verifies that grant and aligns CPUs and memory to it).

What NRI cannot express on the node (cgroup v1: memory soft limit, blkio weight and
throttles) is left to the direct writer at StartContainer (`plan_writes.cgroup_writes`
with scope "direct"). A `unified` key is never put into an adjustment on a cgroup v1
node: runc refuses the whole container for it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from nri_plugin.enforce.mapping import v2_io_max_line
from nri_plugin.enforce.plan_writes import unified_io_max
from nri_plugin.nri.pb import nri_pb2 as pb
from nri_plugin.plan.model import ContainerPlan

REMOVE_MARK = "-"  # containerd/nri MarkForRemoval
_MPOL_MODES = {
    "bind": pb.MPOL_BIND,
    "preferred": pb.MPOL_PREFERRED,
    "interleave": pb.MPOL_INTERLEAVE,
}


def build_adjustment(
    plan: ContainerPlan,
    hooks: Mapping[str, list[dict[str, Any]]] | None = None,
) -> pb.ContainerAdjustment:
    """The adjustment for a plan, with the given OCI hooks ({Hooks field: [{path, args,
    env, timeout}]}, nri_plugin.hookspec.hook_spec); the annotations are per container
    (`annotated`)."""
    adj = pb.ContainerAdjustment()
    for stage, entries in (hooks or {}).items():
        for entry in entries:
            hook = getattr(adj.hooks, stage).add(
                path=entry["path"], args=entry["args"], env=entry.get("env", [])
            )
            if entry.get("timeout"):
                hook.timeout.value = entry["timeout"]
    fill_resources(adj.linux.resources, plan)
    if plan.memory_policy is not None:
        policy = adj.linux.memory_policy
        policy.mode = _MPOL_MODES[plan.memory_policy.mode]
        policy.nodes = plan.memory_policy.nodes
    return adj


def annotated(
    annotations: Mapping[str, str],
    remove: Iterable[str] = (),
    settings: pb.ContainerAdjustment | None = None,
) -> pb.ContainerAdjustment:
    """An adjustment that sets `annotations`, removes the keys in `remove` (NRI's
    convention: the key with a "-" in front, value empty, deletes it from the spec) and
    carries a copy of `settings` (build_adjustment's result, left unchanged)."""
    adj = pb.ContainerAdjustment()
    # Item by item: the constructor's `annotations=` (and the map's update) go through
    # collections.abc's MutableMapping.update in Python, twice as slow for one or two keys.
    into = adj.annotations
    for key, value in annotations.items():
        into[key] = value
    for key in remove:
        into[REMOVE_MARK + key] = ""
    if settings is not None:
        adj.MergeFrom(settings)
    return adj


def fill_resources(resources: pb.LinuxResources, plan: ContainerPlan) -> None:
    """The plan's cgroup settings that NRI carries on this node (CPU, memory, `unified`
    on v2 only, RT on v1 only)."""
    cpu = resources.cpu
    if plan.cpu_quota is not None:
        cpu.quota.value = plan.cpu_quota
    if plan.cpu_period is not None:
        cpu.period.value = plan.cpu_period
    if plan.cpus:
        cpu.cpus = plan.cpus
    if plan.mems:
        cpu.mems = plan.mems
    if plan.rt_runtime is not None and plan.cgroup_version == 1:
        cpu.realtime_runtime.value = plan.rt_runtime
        cpu.realtime_period.value = plan.rt_period_in_force
    if plan.memory_max is not None:
        resources.memory.limit.value = plan.memory_max
    if plan.cgroup_version == 2:
        if plan.memory_high is not None:
            resources.unified["memory.high"] = str(plan.memory_high)
        if plan.io_weight is not None:
            resources.unified["io.weight"] = f"default {plan.io_weight}"
        line = v2_io_max_line(plan.io_max[0]) if unified_io_max(plan) else None
        if line:
            resources.unified["io.max"] = line


def build_update(container_id: str, plan: ContainerPlan) -> pb.ContainerUpdate:
    """The plan's settings again for an existing container (UpdateContainer: the SLA
    stays in force when kubelet updates the container's resources)."""
    update = pb.ContainerUpdate(container_id=container_id)
    fill_resources(update.linux.resources, plan)
    return update
