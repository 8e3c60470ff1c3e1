"""The one decide/apply core both front-ends (the NRI plugin and the OCI hook) call.

annotations -> SLA (nri_plugin.sla) -> plan (nri_plugin.plan) -> cgroup writes and RT
room (nri_plugin.enforce). `decide` gives one `Decision` per container; `NodeState` holds
what outlives a container (config, cgroup facts, capabilities, allocator, RT budget).
What differs between the front-ends is only how the plan reaches the kernel: the plugin
answers with an NRI adjustment and writes the rest at StartContainer, the hook writes
everything itself.
"""

from nri_plugin.core.decision import Decision, decide
from nri_plugin.core.nodestate import NodeState, build_node, node_allocator

__all__ = ["Decision", "NodeState", "build_node", "decide", "node_allocator"]
