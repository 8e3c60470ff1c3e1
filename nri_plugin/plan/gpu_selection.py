"""Choosing GPUs: pure, deterministic functions over a node's GPUs and which are free.

The score of a set, compared in this order (see docs/placement.md, "GPU selection"):
1. hard constraints: `numa`: all on one (known) NUMA node; `nvlink`: the set is connected
   over NVLinks inside it (not every pair linked: the best connected set wins by 2.);
2. NVLink bandwidth inside the set: the sum of NVLinks over its pairs;
3. fewest NUMA nodes spanned;
4. PCIe locality inside the set: PCIe closeness summed over its pairs (same switch 3 >
   same host bridge 2 > same socket 1 > across sockets 0);
5. what is left free stays connected: NVLinks, then PCIe closeness, summed over the GPUs
   left free (so a free NVLink pair or PCIe-switch pair is not broken when an equal set
   exists);
6. lowest GPU indexes.

Every combination is scored when there are at most `EXHAUSTIVE_LIMIT` of them (any
request on a box of up to 16 GPUs); beyond that a best-first search grows a set from each
free GPU (or from `must_include`) one best GPU at a time.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import combinations
from math import comb

from nri_plugin.errors import ProgrammingError
from nri_plugin.plan.gpu_graph import GpuGraph, graph_of
from nri_plugin.plan.placement_values import TOPOLOGIES
from nri_plugin.topology.cpus import Topology
from nri_plugin.topology.gpus import Gpu, GpuInventory

EXHAUSTIVE_LIMIT = 12_870  # C(16, 8): every request on a 16-GPU box is searched exhaustively


@dataclass(frozen=True)
class GpuScore:
    """A GPU set's score components; `key()` orders sets best first."""

    nvlink_links: int  # NVLinks between the set's GPUs (each pair's links summed)
    pcie: int  # PCIe closeness summed over the set's pairs without NVLink
    left_nvlink_links: int  # the same sums over the GPUs left free
    left_pcie: int
    numa_nodes: int
    gpus: tuple[int, ...]

    def key(self) -> tuple[int, int, int, int, int, tuple[int, ...]]:
        return (
            -self.nvlink_links,
            self.numa_nodes,
            -self.pcie,
            -self.left_nvlink_links,
            -self.left_pcie,
            self.gpus,
        )

    def describe(self) -> str:
        return (
            f"NVLinks inside {self.nvlink_links}, NUMA nodes {self.numa_nodes}, PCIe "
            f"closeness {self.pcie}; left free: NVLinks {self.left_nvlink_links}, PCIe "
            f"closeness {self.left_pcie}"
        )


@dataclass(frozen=True)
class GpuChoice:
    gpus: tuple[int, ...]
    score: GpuScore
    search: str  # "exhaustive" or "best-first"
    evaluated: int  # sets scored


def score_gpu_set(
    inventory: GpuInventory, gpus: Iterable[int], free: Iterable[int], *, shared: Iterable[int] = ()
) -> GpuScore:
    """The score of `gpus` taken out of `free`; `shared` GPUs (free for a shared request,
    already held by other shared users) do not count as left free."""
    graph = graph_of(inventory)
    chosen = graph.mask(gpus)
    unheld = graph.mask(free) & ~graph.mask(shared)
    return _score(graph, chosen, unheld)


def _score(graph: GpuGraph, chosen: int, unheld: int) -> GpuScore:
    inside = graph.split(graph.weight(chosen))
    left = graph.split(graph.weight(unheld & ~chosen))
    return GpuScore(
        inside[0], inside[1], left[0], left[1], graph.numa_nodes(chosen), graph.members(chosen)
    )


def choose_gpus(
    inventory: GpuInventory,
    free: Iterable[int],
    count: int,
    *,
    must_include: Iterable[int] = (),
    topology: str = "any",
    shared: Iterable[int] = (),
    exhaustive_limit: int = EXHAUSTIVE_LIMIT,
) -> GpuChoice | None:
    """The best `count` GPUs (indexes) out of `free` under `topology` ("any", "numa",
    "nvlink"), holding `must_include`; None when no set satisfies the constraints.
    `shared`: GPUs of `free` already held by shared users (see score_gpu_set)."""
    if topology not in TOPOLOGIES:
        raise ProgrammingError(f"topology {topology!r} is not one of {', '.join(TOPOLOGIES)}")
    graph = graph_of(inventory)
    free_mask = graph.mask(free)
    must = graph.mask(must_include)
    if set(must_include) - set(graph.members(free_mask)) or count < 0:
        return None
    if bin(must).count("1") > count or bin(free_mask).count("1") < count:
        return None
    search = _Search(graph, free_mask & ~graph.mask(shared), topology)
    if count == 0:
        pools = [(0, 0)]  # the empty set satisfies every constraint
    elif topology == "numa":
        # GPUs of an unknown node never satisfy `numa`
        pools = [
            (free_mask & gpus, must)
            for node, gpus in sorted((n, m) for n, m in graph.node_masks.items() if n is not None)
            if must & ~gpus == 0
        ]
    elif topology == "nvlink":
        # a connected set lies inside one NVLink component of the free GPUs
        pools = [
            (part, must)
            for part in graph.components(free_mask)
            if must & ~part == 0 and bin(part).count("1") >= count
        ]
    else:
        pools = [(free_mask, must)]
    rest = count - bin(must).count("1")
    sizes = [comb(bin(pool & ~m).count("1"), rest) for pool, m in pools]
    if sum(sizes) <= exhaustive_limit:
        for pool, m in pools:
            search.exhaustive(pool & ~m, m, rest)
        kind = "exhaustive"
    else:
        for pool, m in pools:
            search.best_first(pool, m, count)
        kind = "best-first"
    if search.best is None:
        return None
    score = _score(graph, search.best, search.unheld)
    return GpuChoice(score.gpus, score, kind, search.evaluated)


def lower_indexes(a: int, b: int) -> bool:
    """Whether set a's sorted GPU positions come first: of two sets of one size, the one
    holding the lowest position where they differ (positions follow GPU indexes)."""
    differ = a ^ b
    return bool(differ & -differ & a)


class _Search:
    """The best set found so far under one request's constraints."""

    def __init__(self, graph: GpuGraph, unheld: int, topology: str) -> None:
        self.graph = graph
        self.unheld = unheld
        self.nvlink = topology == "nvlink"
        self.bound = graph.total_weight + 1  # above any weight left free
        # inside's NVLinks, then this minus the NUMA span (in `scale` units, below one
        # NVLink's weight and above any PCIe sum), then inside's PCIe
        self.spans = len(graph.node_masks) + 1
        self.best: int | None = None
        self.best_value = 0
        self.evaluated = 0

    def value(self, mask: int) -> int:
        """The score before the indexes (NVLinks inside, NUMA span, PCIe inside, what is
        left free) as one comparable number."""
        g = self.graph
        inside = g.weight(mask) + (self.spans - g.numa_nodes(mask)) * g.scale
        return inside * self.bound + g.weight(self.unheld & ~mask)

    def offer(self, mask: int, value: int) -> None:
        """Keep `mask` if it beats the best so far: value, then lowest indexes; the
        NVLink check last, as it costs most."""
        if self.best is not None and (
            value < self.best_value
            or (value == self.best_value and not lower_indexes(mask, self.best))
        ):
            return
        if self.nvlink and not self.graph.connected(mask):
            return
        self.best, self.best_value = mask, value

    def exhaustive(self, pool: int, must: int, rest: int) -> None:
        bits = [1 << p for p in range(len(self.graph.indexes)) if pool >> p & 1]
        masks = [must + sum(c) for c in combinations(bits, rest)]
        self.evaluated += len(masks)
        if not masks:
            return
        if self.graph.has_table:  # the hot loop of a big request: table lookups only
            g = self.graph
            table, numa, bound, unheld = g.table, g.numa_table, self.bound, self.unheld
            spans, scale = self.spans, g.scale
            scored = [
                ((table[m] + (spans - numa[m]) * scale) * bound + table[unheld & ~m], m)
                for m in masks
            ]
        else:
            scored = [(self.value(m), m) for m in masks]
        if not self.nvlink:
            top = max(scored)[0]
            for v, m in scored:
                if v == top:
                    self.offer(m, v)
            return
        # nvlink: best first, until the values drop below a connected set's; offer()
        # checks connectivity only for a set that would beat the best so far
        scored.sort(reverse=True)
        for v, m in scored:
            if self.best is not None and v < self.best_value:
                break
            self.offer(m, v)

    def best_first(self, pool: int, must: int, count: int) -> None:
        n = len(self.graph.indexes)
        seeds = [must] if must else [1 << p for p in range(n) if pool >> p & 1]
        for seed in seeds:
            mask = self.grow(seed, pool, count)
            if bin(mask).count("1") == count:
                self.offer(mask, self.value(mask))

    def grow(self, mask: int, pool: int, count: int) -> int:
        """Add to `mask`, one at a time, the GPU of `pool` giving the best value (the
        lowest index on ties); for nvlink only GPUs linked to the set. Sums are kept per
        GPU, so a step costs O(GPUs), not a rescoring of every pair."""
        g, n = self.graph, len(self.graph.indexes)
        w = g.weights
        inside, left = g.weight(mask), g.weight(self.unheld & ~mask)
        members = [p for p in range(n) if mask >> p & 1]
        # to_set[p]: p's weight to the set; to_left[p]: p's weight to the free rest
        to_set = [sum(w[q][p] for q in members) for p in range(n)]
        to_left = [
            sum(w[p][q] for q in range(n) if self.unheld >> q & 1 and not mask >> q & 1)
            for p in range(n)
        ]
        reach = 0
        for q in members:
            reach |= g.adjacent[q]
        while len(members) < count:
            options = pool & ~mask & (reach if self.nvlink else -1)
            best = None
            for p in range(n):
                if options >> p & 1:
                    lost = to_left[p] if self.unheld >> p & 1 else 0
                    span = self.spans - g.numa_nodes(mask | 1 << p)
                    value = (inside + to_set[p] + span * g.scale) * self.bound + left - lost
                    if best is None or value > best[0]:
                        best = (value, p, lost)
            self.evaluated += bin(options).count("1")
            if best is None:
                break
            _, q, lost = best
            inside, left = inside + to_set[q], left - lost
            mask |= 1 << q
            members.append(q)
            reach |= g.adjacent[q]
            for p in range(n):
                to_set[p] += w[q][p]
                if self.unheld >> q & 1:
                    to_left[p] -= w[p][q]
        return mask


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


def fits(inventory: GpuInventory, gpus: Sequence[Gpu], topology: str) -> bool:
    """Whether named GPUs satisfy the hard constraint of `topology`."""
    if topology == "numa":
        return len({g.numa_node for g in gpus}) == 1 and gpus[0].numa_node is not None
    if topology == "nvlink":
        graph = graph_of(inventory)
        return graph.connected(graph.mask(g.index for g in gpus))
    return True
