"""The one place the device plugin asks the project's GPU selection for a choice.

GetPreferredAllocation calls preferred_gpus() only, so a better scorer replaces what is
behind it without touching the gRPC side.
"""

from __future__ import annotations

from collections.abc import Sequence

from nri_plugin.plan.gpu_selection import choose
from nri_plugin.topology.gpus import Gpu, GpuInventory

# Tried in this order when nothing is pinned: the best NVLink-connected set, else one
# NUMA node, else the least fragmenting set anywhere.
_PREFERENCES = ("nvlink", "numa", "any")


def preferred_gpus(inventory: GpuInventory, available: Sequence[Gpu],
                   must_include: Sequence[Gpu], size: int) -> list[Gpu]:
    """`size` GPUs among `available` (which holds `must_include`), the pinned ones
    included, best connected first, in index order. `inventory` is the whole node, for
    scorers that weigh what the choice leaves to others. Callers check
    len(must_include) <= size <= len(available)."""
    del inventory  # today's scorer looks at the available GPUs only
    if not must_include:
        for topology in _PREFERENCES:
            picked = choose(available, size, topology, holders={}, shared=False)
            if picked is not None:
                return list(picked)
    chosen = list(must_include)
    rest = [g for g in available if g not in chosen]
    while len(chosen) < size:
        # the GPU with most NVLink peers among those already chosen, then most on their
        # NUMA nodes, then the lowest index
        best = max(rest, key=lambda g: (sum(c.index in g.nvlink_peers for c in chosen),
                                        sum(c.numa_node == g.numa_node for c in chosen),
                                        -g.index))
        chosen.append(best)
        rest.remove(best)
    return sorted(chosen, key=lambda g: g.index)
