"""Placement requests for granted GPUs (what a device plugin granted, by index), choices
in a row over one inventory (what `nri-sla device-plugin` chooses), small inventories and
the GPUs a placement holds."""

from __future__ import annotations

from nri_plugin.plan.allocator import Allocator
from nri_plugin.plan.gpu_selection import choose_gpus
from nri_plugin.plan.placement_values import Placement, PlacementRequest
from nri_plugin.topology.gpus import Gpu, GpuInventory


def granted(
    alloc: Allocator, owner: str, *indexes: int, migs: tuple[str, ...] = (), **kw
) -> PlacementRequest:
    """`owner`'s request with GPUs `indexes` (and MIG devices by uuid or "<gpu>:<mig>")
    granted; the gpu section is there (wants_gpu) unless told otherwise."""
    inv = alloc.inventory
    kw.setdefault("wants_gpu", True)
    return PlacementRequest(
        owner,
        granted_gpus=tuple(inv.gpus[i] for i in indexes),
        granted_migs=tuple(inv.find_mig(m) for m in migs),
        **kw,
    )


def gpu_ids(p: Placement) -> list[int]:
    """The indexes of the GPUs a placement holds."""
    return [g.index for g in p.gpus]


def make_inventory(*specs: tuple[int, int | None, set[int]]) -> GpuInventory:
    """GPUs from (index, numa node, NVLink peers) triples."""
    return GpuInventory(
        tuple(
            Gpu(
                index=i,
                uuid=f"GPU-{i:04d}",
                pci_bus_id=f"0000:{0x10 + i:02x}:00.0",
                numa_node=node,
                minor=i,
                nvlink_peers=frozenset(peers),
            )
            for i, node, peers in specs
        ),
        "snapshot",
    )


class Node:
    """The GPUs chosen so far on one inventory: each choice takes them (exclusive) or packs
    onto GPUs already shared (shared)."""

    def __init__(self, inventory: GpuInventory) -> None:
        self.inventory = inventory
        self.whole = [g for g in inventory.gpus if not g.mig_enabled]
        self.holders: dict[int, dict[str, str]] = {}

    def free(self, numa_nodes=None, shared=False):
        return [
            g
            for g in self.whole
            if (
                not self.holders.get(g.index)
                or (shared and all(k == "shared" for k in self.holders[g.index].values()))
            )
            and (numa_nodes is None or g.numa_node in numa_nodes)
        ]

    def pick(self, n, topology="any", owner="c", numa_nodes=None, shared=False):
        free = [g.index for g in self.free(numa_nodes, shared)]
        packed = [i for i in free if self.holders.get(i)] if shared else ()
        choice = choose_gpus(self.inventory, free, n, topology=topology, shared=packed)
        if choice is None:
            return None
        for i in choice.gpus:
            self.holders.setdefault(i, {})[owner] = "shared" if shared else "exclusive"
        return sorted(choice.gpus)
