"""Placement requests for granted GPUs (what a device plugin granted, by index), and
choices in a row over one inventory (what `nri-sla device-plugin` chooses)."""

from __future__ import annotations

from nri_plugin.plan.allocator import Allocator
from nri_plugin.plan.gpu_selection import choose
from nri_plugin.plan.placement_values import PlacementRequest
from nri_plugin.topology.gpus import GpuInventory


def granted(alloc: Allocator, owner: str, *indexes: int, migs: tuple[str, ...] = (),
            **kw) -> PlacementRequest:
    """`owner`'s request with GPUs `indexes` (and MIG devices by uuid or "<gpu>:<mig>")
    granted; the gpu section is there (wants_gpu) unless told otherwise."""
    inv = alloc.inventory
    kw.setdefault("wants_gpu", True)
    return PlacementRequest(owner, granted_gpus=tuple(inv.gpus[i] for i in indexes),
                            granted_migs=tuple(inv.find_mig(m) for m in migs), **kw)


class Node:
    """The GPUs chosen so far on one inventory: each choice takes them (exclusive) or packs
    onto GPUs already shared (shared)."""

    def __init__(self, inventory: GpuInventory) -> None:
        self.whole = [g for g in inventory.gpus if not g.mig_enabled]
        self.holders: dict[int, dict[str, str]] = {}

    def free(self, numa_nodes=None, shared=False):
        return [g for g in self.whole
                if (not self.holders.get(g.index)
                    or (shared and all(k == "shared" for k in self.holders[g.index].values())))
                and (numa_nodes is None or g.numa_node in numa_nodes)]

    def pick(self, n, topology="any", owner="c", numa_nodes=None, shared=False):
        chosen = choose(self.free(numa_nodes, shared), n, topology, self.holders, shared)
        if chosen is None:
            return None
        for g in chosen:
            self.holders.setdefault(g.index, {})[owner] = "shared" if shared else "exclusive"
        return [g.index for g in chosen]
