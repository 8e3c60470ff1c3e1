"""The one place the device plugin asks the project's GPU selection for a choice.

GetPreferredAllocation calls preferred_gpus() only, so a better scorer replaces what is
behind it without touching the gRPC side.
"""

from __future__ import annotations

from collections.abc import Sequence

from nri_plugin.plan.gpu_selection import choose_gpus
from nri_plugin.topology.gpus import Gpu, GpuInventory

# Tried in this order: the best NVLink-connected set, else one NUMA node, else the best
# set anywhere (each scored by links, PCIe distance and what it leaves free).
_PREFERENCES = ("nvlink", "numa", "any")


def preferred_gpus(inventory: GpuInventory, available: Sequence[Gpu],
                   must_include: Sequence[Gpu], size: int) -> list[Gpu]:
    """`size` GPUs among `available` (which holds `must_include`), the pinned ones
    included, in index order. Callers check len(must_include) <= size <= len(available)."""
    free = [g.index for g in available]
    pinned = [g.index for g in must_include]
    for topology in _PREFERENCES:
        choice = choose_gpus(inventory, free, size, must_include=pinned, topology=topology)
        if choice is not None:
            by_index = {g.index: g for g in available}
            return [by_index[i] for i in sorted(choice.gpus)]
    raise AssertionError("choose_gpus(topology='any') found no set among enough GPUs")
