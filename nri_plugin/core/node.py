"""Node: what every node that decides is, whichever front-end holds it; OneShotNode: the
OCI hook's, made for one container and gone with its run.

A node is its config, its cgroup version and capabilities, how it resolves io.max
devices, and the decisions it remembers (core.decision). Two kinds build on it and say by
their type which books they keep: the plugin's long-lived NodeState (core.nodestate:
allocator, CPU pool, RT budget, records) and the hook's OneShotNode, here, which keeps
none: no other container is known to it (no pod usage, no CPU pool, no RT budget: no
event would tell it a container ended), and nothing it decides is admitted. It builds an
allocator only when the SLA asks for placement, to choose on this node's topology and
verify the GPU grant; a CPU/memory-only run never loads one. The decision reads the
books through the same three questions on both (allocator_for, pod_usage, cpu_floors).
"""

from __future__ import annotations

from nri_plugin.enforce.blockdev import resolve_block_device
from nri_plugin.enforce.capabilities import NodeCapabilities
from nri_plugin.errors import InternalFailure
from nri_plugin.plan.context import PodUsage

TYPE_CHECKING = False  # `typing` costs the OCI hook start-up time; only checkers need it
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from nri_plugin.config.values import NodeConfig
    from nri_plugin.core.inputs import DecisionInputs, NodeInputs
    from nri_plugin.plan.allocator import Allocator
    from nri_plugin.plan.placement_values import CpuFloor
    from nri_plugin.sla.model import Sla

    AllocatorFactory = Callable[[bool], Allocator]  # (GPUs needed) -> Allocator

NO_USAGE = PodUsage()


class Node:
    """The config, facts and capabilities a decision on this node depends on."""

    def __init__(
        self,
        config: NodeConfig,
        cgroup_version: int,
        *,
        capabilities: NodeCapabilities | None = None,
        resolve_device: Callable[[str], tuple[int, int]] | None = resolve_block_device,
    ) -> None:
        self.config = config
        self.cgroup_version = cgroup_version
        self.capabilities = capabilities or NodeCapabilities(io_weight=True, bfq=False)
        self.resolve_device = resolve_device
        # Reusable decisions by their inputs (core.decision.decide; bounded there).
        self.reusable: dict[DecisionInputs, Any] = {}
        # The node's part of those inputs and the config it was made for (decision.node_inputs).
        self.inputs: tuple[NodeConfig | None, NodeInputs | None] = (None, None)

    @property
    def prefix(self) -> str:
        return self.config.annotation_prefix

    def reconfigure(self, config: NodeConfig) -> None:
        """Decide with `config` from now on (a reload: nri_plugin.plugin.config_reload says which
        of its keys may differ from the config the node was built with). The remembered
        decisions were made under the old one and are dropped."""
        self.config = config
        self.reusable.clear()


class OneShotNode(Node):
    """A node for one decision; `allocator_factory` (None: placement is refused) builds
    the allocator an SLA asking for placement needs."""

    rt_budget = None  # no RT budget: the planner grants RT time within the caps alone

    def __init__(
        self,
        config: NodeConfig,
        cgroup_version: int,
        *,
        allocator_factory: AllocatorFactory | None = None,
        capabilities: NodeCapabilities | None = None,
        resolve_device: Callable[[str], tuple[int, int]] | None = resolve_block_device,
    ) -> None:
        super().__init__(
            config, cgroup_version, capabilities=capabilities, resolve_device=resolve_device
        )
        self.allocator_factory = allocator_factory

    def allocator_for(self, sla: Sla) -> Allocator | None:
        """An allocator of this node when `sla` asks for placement, else None."""
        wants = (
            sla.gpu is not None
            or sla.numa is not None
            or (sla.cpu is not None and bool(sla.cpu.exclusive))
        )
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
