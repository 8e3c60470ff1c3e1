"""OneShotNode: the OCI hook's node, made for one container and gone with its run.

It keeps no books: no other container is known to it (no pod usage, no CPU pool, no RT
budget: no event would tell it a container ended), and nothing it decides is admitted.
An allocator is built only when the SLA asks for placement, to choose on this node's
topology and verify the GPU grant; a CPU/memory-only run never loads one.
"""

from __future__ import annotations

from nri_plugin.core.node import Node
from nri_plugin.enforce.blockdev import resolve_block_device
from nri_plugin.errors import InternalFailure
from nri_plugin.plan.context import PodUsage

TYPE_CHECKING = False  # `typing` costs the OCI hook start-up time; only checkers need it
if TYPE_CHECKING:
    from collections.abc import Callable

    from nri_plugin.config import NodeConfig
    from nri_plugin.enforce.capabilities import NodeCapabilities
    from nri_plugin.plan.allocator import Allocator
    from nri_plugin.plan.placement_values import CpuFloor
    from nri_plugin.sla.model import Sla

    AllocatorFactory = Callable[[bool], Allocator]  # (GPUs needed) -> Allocator

NO_USAGE = PodUsage()


class OneShotNode(Node):
    """A node for one decision; `allocator_factory` (None: placement is refused) builds
    the allocator an SLA asking for placement needs."""

    rt_budget = None  # no RT budget: the planner grants RT time within the caps alone

    def __init__(self, config: NodeConfig, cgroup_version: int, *,
                 allocator_factory: AllocatorFactory | None = None,
                 capabilities: NodeCapabilities | None = None,
                 resolve_device: Callable[[str], tuple[int, int]] | None = resolve_block_device
                 ) -> None:
        super().__init__(config, cgroup_version, capabilities=capabilities,
                         resolve_device=resolve_device)
        self.allocator_factory = allocator_factory

    def allocator_for(self, sla: Sla) -> Allocator | None:
        """An allocator of this node when `sla` asks for placement, else None."""
        wants = (sla.gpu is not None or sla.numa is not None
                 or (sla.cpu is not None and bool(sla.cpu.exclusive)))
        if not wants or self.allocator_factory is None:
            return None
        try:
            return self.allocator_factory(sla.gpu is not None)
        except OSError as exc:  # sysfs trouble: the node's, not the SLA's
            raise InternalFailure(f"node topology: {exc}") from exc

    def pod_usage(self, pod: str, owner: str) -> PodUsage:
        """Nothing: a one-shot node knows no other container."""
        return NO_USAGE

    def cpu_floors(self, owner: str) -> tuple[CpuFloor, ...]:
        """None: a one-shot node knows no other container's cpuset."""
        return ()
