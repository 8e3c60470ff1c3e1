"""Node: what every node that decides is, whichever front-end holds it.

Its config, its cgroup version and capabilities, how it resolves io.max devices, and the
decisions it remembers (core.decision). Two kinds build on it and say by their type which
books they keep: the plugin's long-lived NodeState (core.nodestate: allocator, CPU pool,
RT budget, records) and the OCI hook's OneShotNode (core.oneshot: none). The decision
reads the books through the same three questions on both (allocator_for, pod_usage,
cpu_floors).
"""

from __future__ import annotations

from nri_plugin.enforce.blockdev import resolve_block_device
from nri_plugin.enforce.capabilities import NodeCapabilities

TYPE_CHECKING = False  # `typing` costs the OCI hook start-up time; only checkers need it
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from nri_plugin.config import NodeConfig
    from nri_plugin.core.inputs import DecisionInputs, NodeInputs


class Node:
    """The config, facts and capabilities a decision on this node depends on."""

    def __init__(self, config: NodeConfig, cgroup_version: int, *,
                 capabilities: NodeCapabilities | None = None,
                 resolve_device: Callable[[str], tuple[int, int]] | None = resolve_block_device
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
