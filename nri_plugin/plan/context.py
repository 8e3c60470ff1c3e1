"""PlanContext: what the planner is told about the node and the container.

A value on its own module so the planner and the modules it delegates to
(`placement_settings`) can all read it without importing one another.
"""

from __future__ import annotations

from nri_plugin.config.values import NodeConfig
from nri_plugin.granted import GrantedResources
from nri_plugin.value import Frozen, field

TYPE_CHECKING = False  # `typing` costs the OCI hook start-up time; only checkers need it
if TYPE_CHECKING:
    from collections.abc import Callable

    from nri_plugin.plan.allocator import Allocator
    from nri_plugin.plan.placement_values import CpuFloor
    from nri_plugin.plan.rt_budget import RtBudget


class PodUsage(Frozen):
    """What the pod's other containers hold now (the per-pod caps count them too)."""

    exclusive_cpus: int = 0
    rt_share: float = 0.0


class PlanContext(Frozen):
    """What the planner needs to know about the node and the container."""

    cgroup_version: int
    namespace: str = ""
    config: NodeConfig = field(default_factory=NodeConfig)
    owner: str = ""
    allocator: Allocator | None = None  # None: no node topology, placement is refused
    rt_budget: RtBudget | None = None
    nri_version: str | None = None  # None: no NRI (the hook path)
    # MAJ:MIN of an io.max device; raises an SlaFailure (DeviceError) or OSError naming it
    resolve_device: Callable[[str], tuple[int, int]] | None = None
    io_weight_supported: bool = True
    # What the runtime set for the container (kubelet limits, device-plugin GPU evidence);
    # the default, nothing set, caps nothing (only the node's per-pod caps apply).
    granted: GrantedResources = field(default_factory=GrantedResources)
    # Device ids the kubelet reports for the container (PodResources: GPU UUIDs, MIG
    # UUIDs, indexes), more grant evidence for runtime_gpus.resolve_grant.
    kubelet_gpu_ids: tuple[str, ...] = ()
    pod_usage: PodUsage = field(default_factory=PodUsage)
    # What exclusive CPUs must leave to the node's running containers (plan.cpupool).
    cpu_floors: tuple[CpuFloor, ...] = ()
