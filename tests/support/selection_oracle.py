"""An exhaustive oracle for GPU selection, written apart from the chooser: every subset of
the free GPUs, each scored straight from the inventory's facts (link counts, PCIe levels,
NUMA nodes), in the order docs/placement.md documents."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import combinations

from nri_plugin.topology.gpus import Gpu, GpuInventory

CLOSENESS = {"switch": 3, "hostbridge": 2, "numa": 1, "system": 0}


def closeness(a: Gpu, b: Gpu) -> int:
    level = a.pcie_level(b.index)
    if level is None:  # no PCIe fact: one NUMA node is one socket
        return 1 if a.numa_node is not None and a.numa_node == b.numa_node else 0
    return CLOSENESS[level]


def sums(gpus: Iterable[Gpu]) -> tuple[int, int]:
    """(NVLinks summed over every pair, PCIe closeness summed over every pair)."""
    pairs = list(combinations(list(gpus), 2))
    return (sum(a.links_to(b.index) for a, b in pairs), sum(closeness(a, b) for a, b in pairs))


def connected(gpus: list[Gpu]) -> bool:
    if not gpus:
        return True
    ids = {g.index for g in gpus}
    by_id = {g.index: g for g in gpus}
    seen, todo = {gpus[0].index}, [gpus[0].index]
    while todo:
        for peer in by_id[todo.pop()].nvlink_peers & ids - seen:
            seen.add(peer)
            todo.append(peer)
    return seen == ids


def feasible(gpus: list[Gpu], topology: str) -> bool:
    if topology == "numa":
        return len({g.numa_node for g in gpus}) == 1 and gpus[0].numa_node is not None
    if topology == "nvlink":
        return connected(gpus)
    return True


def key(chosen: list[Gpu], free: list[Gpu]) -> tuple:
    ids = {g.index for g in chosen}
    inside = sums(chosen)
    left = sums(g for g in free if g.index not in ids)
    return (
        -inside[0],
        len({g.numa_node for g in chosen}),
        -inside[1],
        -left[0],
        -left[1],
        tuple(sorted(ids)),
    )


def best(
    inventory: GpuInventory,
    free: Iterable[int],
    count: int,
    topology: str,
    must: Iterable[int] = (),
) -> tuple | None:
    """The best key among every feasible set, or None."""
    pool = [g for g in inventory.gpus if g.index in set(free)]
    need = set(must)
    keys = [
        key(list(c), pool)
        for c in combinations(pool, count)
        if need <= {g.index for g in c} and feasible(list(c), topology)
    ]
    return min(keys) if keys else None


def free_states(inventory: GpuInventory) -> Iterator[frozenset[int]]:
    """Every subset of the GPUs, as the free set of one moment."""
    ids = [g.index for g in inventory.gpus]
    for n in range(len(ids) + 1):
        for c in combinations(ids, n):
            yield frozenset(c)


def greedy(inventory: GpuInventory, free: Iterable[int], count: int, topology: str) -> tuple | None:
    """The best-first search rescored from scratch at every step: from each free GPU,
    add the GPU giving the best key (for nvlink one linked to the set); the best key."""
    pool = [g for g in inventory.gpus if g.index in set(free)]
    found = []
    for seed in pool:
        chosen = [seed]
        while len(chosen) < count:
            ids = {g.index for g in chosen}
            options = [
                g
                for g in pool
                if g.index not in ids
                and (
                    topology != "nvlink"
                    or any(g.index in c.nvlink_peers or c.index in g.nvlink_peers for c in chosen)
                )
            ]
            if topology == "numa":
                options = [g for g in options if g.numa_node == seed.numa_node]
            if not options:
                break
            # best by the score before the indexes, lowest index on ties
            chosen.append(min(options, key=lambda g: (key([*chosen, g], pool)[:5], g.index)))
        if len(chosen) == count and feasible(chosen, topology):
            found.append(key(chosen, pool))
    return min(found) if found else None
