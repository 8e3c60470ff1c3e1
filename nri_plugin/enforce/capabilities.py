"""What this node's kernel can enforce, detected one way for the plugin and the OCI hook.

io weights: cgroup v2 (io.weight under io.cost, or io.bfq.weight) or BFQ scheduling some
disk on v1 (blkio.bfq.weight); CFQ's blkio.weight is gone from current kernels. When BFQ
schedules any disk, weights go to the bfq files. Decided for the node, not per container:
the plugin plans at CreateContainer, before the container's cgroup exists.
"""

from __future__ import annotations

from nri_plugin.enforce.blockdev import any_bfq
from nri_plugin.value import Frozen


class NodeCapabilities(Frozen):
    """What this node can enforce."""

    io_weight: bool  # an io.weight in an SLA can be enforced here
    bfq: bool  # weights are written to the bfq files


def detect_capabilities(cgroup_version: int, sysfs_root: str = "/sys") -> NodeCapabilities:
    bfq = any_bfq(sysfs_root)
    return NodeCapabilities(io_weight=bfq or cgroup_version == 2, bfq=bfq)
