"""The GPUs of a node as weighted pairs, for choosing sets of them quickly.

A pair's weight orders first by NVLinks between the two GPUs, then by PCIe closeness
(same switch 3, same host bridge 2, same socket 1, across sockets 0), counted for every
pair: among GPUs that all have the same NVLinks (an NVSwitch box) the PCIe tree still
carries host transfers and GPUDirect traffic to NICs behind the same switch.
weight = links * link_unit + closeness, with `link_unit` a multiple of `scale` (above any
sum of closeness) large enough to leave room between the two for a NUMA-span term
(gpu_selection adds it): a set's summed weight splits back into (NVLinks, PCIe). Sets are
bit masks over GPU positions.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property

from nri_plugin.topology.gpus import Gpu, GpuInventory

PCIE_CLOSENESS = {"switch": 3, "hostbridge": 2, "numa": 1, "system": 0}
# a table of every subset's weight (2^n ints: 64k for 16 GPUs, built in 20-50 ms once per
# inventory) serves boxes up to this many GPUs
TABLE_GPUS = 16
_CACHE_SIZE = 8


def links(a: Gpu, b: Gpu) -> int:
    """NVLinks between a and b as either side reports them (a link joins both ends; a
    hand-written snapshot may list it on one side only)."""
    return max(a.links_to(b.index), b.links_to(a.index))


def pcie_closeness(a: Gpu, b: Gpu) -> int:
    """PCIE_CLOSENESS of the pair; without a PCIe fact, one NUMA node counts as one socket."""
    level = a.pcie_level(b.index)
    if level is None:
        level = "numa" if a.numa_node is not None and a.numa_node == b.numa_node else "system"
    return PCIE_CLOSENESS[level]


@dataclass(frozen=True)
class GpuGraph:
    indexes: tuple[int, ...]  # bit position -> GPU index
    numa: tuple[int | None, ...]  # bit position -> NUMA node
    links: tuple[tuple[int, ...], ...]  # NVLinks between positions
    closeness: tuple[tuple[int, ...], ...]  # PCIe closeness between positions
    scale: int
    adjacent: tuple[int, ...] = field(init=False)  # position -> mask of NVLink peers

    def __post_init__(self) -> None:
        object.__setattr__(
            self,
            "adjacent",
            tuple(sum(1 << j for j, n in enumerate(row) if n) for row in self.links),
        )

    @classmethod
    def of(cls, inventory: GpuInventory) -> GpuGraph:
        gpus = sorted(inventory.gpus, key=lambda g: g.index)
        pairs = len(gpus) * (len(gpus) - 1) // 2
        return cls(
            indexes=tuple(g.index for g in gpus),
            numa=tuple(g.numa_node for g in gpus),
            links=tuple(tuple(0 if a is b else links(a, b) for b in gpus) for a in gpus),
            closeness=tuple(
                tuple(0 if a is b else pcie_closeness(a, b) for b in gpus) for a in gpus
            ),
            scale=3 * pairs + 1,
        )

    @cached_property
    def link_unit(self) -> int:
        """One NVLink's weight: above `scale` times any NUMA span plus one."""
        return self.scale * (len(self.node_masks) + 1)

    @cached_property
    def weights(self) -> tuple[tuple[int, ...], ...]:
        return tuple(
            tuple(n * self.link_unit + c for n, c in zip(links, close, strict=True))
            for links, close in zip(self.links, self.closeness, strict=True)
        )

    @cached_property
    def position(self) -> dict[int, int]:
        return {index: pos for pos, index in enumerate(self.indexes)}

    def mask(self, indexes: Iterable[int]) -> int:
        """The mask of GPU indexes; unknown indexes are left out."""
        pos = self.position
        return sum(1 << pos[i] for i in set(indexes) if i in pos)

    def members(self, mask: int) -> tuple[int, ...]:
        """GPU indexes in the mask, ascending."""
        return tuple(self.indexes[p] for p in range(len(self.indexes)) if mask >> p & 1)

    @property
    def has_table(self) -> bool:
        """Whether sets are weighed by table lookups (small boxes) or pair by pair."""
        return len(self.indexes) <= TABLE_GPUS

    @cached_property
    def total_weight(self) -> int:
        return self.weight((1 << len(self.indexes)) - 1)

    @cached_property
    def table(self) -> list[int]:
        """Weight of every subset, by mask: each mask with top bit h adds h's weights to
        the lower bits (their own sums built the same way), 2^n steps in all."""
        table = [0] * (1 << len(self.indexes))
        for h, row in enumerate(self.weights):
            top = 1 << h
            to_top = [0] * top  # to_top[m]: summed weight from h to the GPUs of m
            for m in range(1, top):
                low = m & -m
                to_top[m] = to_top[m ^ low] + row[low.bit_length() - 1]
                table[top | m] = table[m] + to_top[m]
        return table

    def weight(self, mask: int) -> int:
        """Summed pair weights inside the mask."""
        if self.has_table:
            return self.table[mask]
        bits = [p for p in range(len(self.indexes)) if mask >> p & 1]
        w = self.weights
        return sum(w[a][b] for i, a in enumerate(bits) for b in bits[i + 1 :])

    def split(self, weight: int) -> tuple[int, int]:
        """(NVLinks, PCIe closeness) of a summed weight."""
        return divmod(weight, self.link_unit)

    def components(self, mask: int) -> list[int]:
        """The NVLink-connected components of the mask (NVLinks inside it only)."""
        found = []
        while mask:
            reach = frontier = mask & -mask
            while frontier:
                grown = 0
                while frontier:
                    low = frontier & -frontier
                    grown |= self.adjacent[low.bit_length() - 1]
                    frontier ^= low
                frontier = grown & mask & ~reach
                reach |= frontier
            found.append(reach)
            mask &= ~reach
        return found

    def connected(self, mask: int) -> bool:
        """Every GPU of the mask reaches every other over NVLinks inside the mask."""
        return len(self.components(mask)) <= 1

    @cached_property
    def node_masks(self) -> dict[int | None, int]:
        """NUMA node -> mask of its GPUs (None: GPUs whose node is unknown)."""
        nodes: dict[int | None, int] = {}
        for pos, node in enumerate(self.numa):
            nodes[node] = nodes.get(node, 0) | 1 << pos
        return nodes

    def numa_nodes(self, mask: int) -> int:
        """NUMA nodes the mask spans (unknown counts as one)."""
        if self.has_table:
            return self.numa_table[mask]
        return sum(1 for node in self.node_masks.values() if node & mask)

    @cached_property
    def numa_table(self) -> bytes:
        """NUMA nodes spanned by every subset, by mask (built like `table`)."""
        table = bytearray(1 << len(self.indexes))
        node_bits = {
            pos: nodes
            for nodes in self.node_masks.values()
            for pos in range(len(self.indexes))
            if nodes >> pos & 1
        }
        for m in range(1, len(table)):
            low = m & -m
            rest = m ^ low
            table[m] = table[rest] + (not rest & node_bits[low.bit_length() - 1])
        return bytes(table)


Facts = tuple[tuple[int, int | None, tuple[tuple[int, int], ...], tuple[tuple[int, str], ...]], ...]
_graphs: dict[Facts, GpuGraph] = {}
_last: list[tuple[GpuInventory, GpuGraph]] = []


def graph_of(inventory: GpuInventory) -> GpuGraph:
    """The inventory's graph, built once per set of facts it reads (indexes, NUMA nodes,
    links, PCIe levels): a rescan that finds the same GPUs reuses the graph and its subset
    table. The most recent inventory is recognised without reading its facts."""
    last = _last[0] if _last else None  # one read: other threads may replace it
    if last is not None and last[0] is inventory:
        return last[1]
    facts = tuple((g.index, g.numa_node, g.nvlink_links, g.pcie_levels) for g in inventory.gpus)
    graph = _graphs.get(facts)
    if graph is None:
        graph = GpuGraph.of(inventory)
        if len(_graphs) >= _CACHE_SIZE:
            _graphs.pop(next(iter(_graphs)))
        _graphs[facts] = graph
    _last[:] = [(inventory, graph)]
    return graph
