"""The one place the device plugin asks the project's GPU selection for a choice.

GetPreferredAllocation calls preferred_gpus() only, so a better scorer replaces what is
behind it without touching the gRPC side.
"""

from __future__ import annotations

from collections.abc import Sequence

from nri_plugin.plan.gpu_selection import choose_gpus
from nri_plugin.topology.gpus import Gpu, GpuInventory


def preferred_gpus(
    inventory: GpuInventory, available: Sequence[Gpu], must_include: Sequence[Gpu], size: int
) -> list[Gpu]:
    """`size` GPUs among `available` (which holds `must_include`), the pinned ones
    included, in index order: the best set by the selection's order (NVLinks, then fewest
    NUMA nodes, then PCIe locality, then what is left free; docs/placement.md), without
    a hard constraint, so that a set always exists. Callers check
    len(must_include) <= size <= len(available)."""
    choice = choose_gpus(
        inventory, [g.index for g in available], size, must_include=[g.index for g in must_include]
    )
    if choice is None:
        raise AssertionError("choose_gpus(topology='any') found no set among enough GPUs")
    by_index = {g.index: g for g in available}
    return [by_index[i] for i in sorted(choice.gpus)]
