"""Choosing GPUs: pure functions over the free GPUs and the NVLink graph (deterministic)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from nri_plugin.topology.cpus import Topology
from nri_plugin.topology.gpus import Gpu

CLIQUE_SEARCH_BUDGET = 20_000  # DFS steps; NVLink graphs are small, this only caps pathology


def ordered_nodes(gpus: Sequence[Gpu], topology: Topology) -> tuple[int, ...]:
    """NUMA nodes of the GPUs, the one holding most of them first. An unknown node (-1 in
    sysfs, common on one-socket boxes) is the only node when there is just one."""
    single = topology.nodes[0].id if len(topology.nodes) == 1 else None
    counts: dict[int, int] = {}
    for g in gpus:
        node = g.numa_node if g.numa_node is not None else single
        if node is not None:
            counts[node] = counts.get(node, 0) + 1
    return tuple(sorted(counts, key=lambda n: (-counts[n], n)))


def fits(gpus: Sequence[Gpu], topology: str) -> bool:
    if topology == "numa":
        return len({g.numa_node for g in gpus}) == 1 and gpus[0].numa_node is not None
    if topology == "nvlink":
        return all(h.index in g.nvlink_peers for g in gpus for h in gpus if h is not g)
    return True


def components(free: Sequence[Gpu]) -> dict[int, frozenset[int]]:
    """GPU index -> its connected component in the NVLink graph of the free GPUs."""
    free_ids = {g.index for g in free}
    peers = {g.index: g.nvlink_peers & free_ids for g in free}
    comp: dict[int, frozenset[int]] = {}
    for g in free:
        if g.index in comp:
            continue
        seen, stack = {g.index}, [g.index]
        while stack:
            for p in peers[stack.pop()]:
                if p not in seen:
                    seen.add(p)
                    stack.append(p)
        group = frozenset(seen)
        for i in group:
            comp[i] = group
    return comp


def choose(free: Sequence[Gpu], n: int, topology: str, holders: Mapping[int, Mapping[str, str]],
            shared: bool) -> tuple[Gpu, ...] | None:
    """The best n GPUs among `free` under `topology`, or None when impossible."""
    if n > len(free):
        return None
    if n == 0:
        return ()
    comp = components(free)
    free_ids = set(comp)

    def key(g: Gpu) -> tuple[int, ...]:
        # shared requests pack onto GPUs that are already shared (frees stay free);
        # fewest free NVLink peers first keeps well-connected groups for NVLink requests
        unshared = 0 if (shared and holders.get(g.index)) else 1
        return (unshared, len(comp[g.index]), len(g.nvlink_peers & free_ids), g.index)

    by_node: dict[int | None, list[Gpu]] = {}
    for g in sorted(free, key=key):
        by_node.setdefault(g.numa_node, []).append(g)

    def cost(pick: Sequence[Gpu]) -> tuple[int, int, int, int, int, tuple[int, ...]]:
        ids = {g.index for g in pick}
        # 1. free NVLink groups split by this choice; 2. for requests that do not need
        # NVLink, NVLinked GPUs used up (a whole free pair is still a pair lost);
        # 3. NUMA nodes spanned; 4. best fit: free GPUs on those nodes; 5. peers cut off
        broken = {comp[i] for i in ids if len(comp[i]) > 1 and not comp[i] <= ids}
        linked = 0 if topology == "nvlink" else sum(len(comp[i]) > 1 for i in ids)
        nodes = {g.numa_node for g in pick}
        node_free = sum(len(by_node[x]) for x in nodes)
        peers_lost = sum(len(g.nvlink_peers & free_ids - ids) for g in pick)
        return (len(broken), linked, len(nodes), node_free, peers_lost, tuple(sorted(ids)))

    def fullest_first() -> list[Gpu]:
        # across nodes, the fullest first: a choice spanning nodes then spans the fewest
        order = sorted(by_node, key=lambda x: (-len(by_node[x]), x is None, x or 0))
        return [g for node in order for g in by_node[node]]

    candidates: list[tuple[Gpu, ...]] = []
    for node, gpus in by_node.items():
        if len(gpus) < n or (node is None and topology == "numa"):
            continue
        if topology == "nvlink" and n > 1:
            clique = find_clique(gpus, n)
            if clique is not None:
                candidates.append(clique)
        else:
            candidates.append(tuple(gpus[:n]))
    if not candidates and topology == "nvlink" and n > 1:
        clique = find_clique(fullest_first(), n)
        if clique is not None:
            candidates.append(clique)
    if not candidates and topology == "any":
        candidates.append(tuple(fullest_first()[:n]))
    if not candidates:
        return None
    best = min(candidates, key=cost)
    return tuple(sorted(best, key=lambda g: g.index))


def find_clique(ordered: Sequence[Gpu], n: int) -> tuple[Gpu, ...] | None:
    """First n pairwise NVLink-connected GPUs in `ordered` order (depth-first)."""
    budget = [CLIQUE_SEARCH_BUDGET]

    def extend(chosen: list[Gpu], rest: list[Gpu]) -> list[Gpu] | None:
        if len(chosen) == n:
            return chosen
        for i, g in enumerate(rest):
            budget[0] -= 1
            if budget[0] < 0 or len(chosen) + len(rest) - i < n:
                return None
            found = extend([*chosen, g], [h for h in rest[i + 1:] if h.index in g.nvlink_peers])
            if found is not None:
                return found
        return None

    found = extend([], list(ordered))
    return tuple(found) if found is not None else None

