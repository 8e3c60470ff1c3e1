"""Placement values: what a container asks of the node, what it got, and the node and its
holdings as a placement choice reads them. Imports nothing from the rest of `plan`, so the
allocator and the best-fit choice can both depend on it without depending on each other.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from nri_plugin.errors import Refused
from nri_plugin.topology.cpulist import format_cpulist
from nri_plugin.topology.cpus import Topology
from nri_plugin.topology.gpus import Gpu, GpuInventory, MigInstance

TYPE_CHECKING = False  # `typing` costs the OCI hook start-up time; only checkers need it
if TYPE_CHECKING:
    from typing import Any

TOPOLOGIES = ("any", "numa", "nvlink")
# How a GPU is held: by one container, shared, or assigned by the runtime (align only).
EXCLUSIVE, SHARED, RUNTIME = "exclusive", "shared", "runtime"


class PlacementError(Refused):
    """A request that cannot be placed (hard mode) or is malformed, or GPUs that cannot be
    injected as configured; the message says what is free or what is missing."""

    reason = "placement"

    def __init__(self, message: str, field: str = "gpu") -> None:
        self.message = message
        self.field = field
        super().__init__(message)


@dataclass(frozen=True)
class PlacementRequest:
    """What one container asks of the node (the planner maps an Sla onto this).

    gpu_ids name GPUs by index, UUID or PCI bus id, or MIG devices by "MIG-" UUID or
    "<gpu>:<mig index>". from_runtime: the GPUs were assigned by a device plugin; they are
    read from `visible_devices` (NVIDIA_VISIBLE_DEVICES) and `cdi_devices` and only
    aligned, never chosen.
    """

    owner: str
    gpu_count: int | None = None
    gpu_ids: tuple[str, ...] = ()
    mig_profile: str | None = None
    topology: str = "any"
    align: bool = True
    exclusive_cpus: int | None = None
    numa_nodes: tuple[int, ...] | None = None
    shared_gpus: bool = False
    from_runtime: bool = False
    visible_devices: str | None = None
    cdi_devices: tuple[str, ...] = ()


@dataclass(frozen=True)
class Placement:
    """What a container got. Empty `cpus`/`mems` mean "not constrained by placement"
    (the container follows the shared pool)."""

    gpus: tuple[Gpu, ...] = ()
    mig: MigInstance | None = None
    exclusive_cpus: frozenset[int] = frozenset()
    cpus: frozenset[int] = frozenset()
    mems: frozenset[int] = frozenset()
    warnings: tuple[str, ...] = ()
    shared_gpus: bool = False
    from_runtime: bool = False
    aligned: bool = field(default=False, compare=False)

    def to_record(self) -> dict[str, Any]:
        """Compact JSON-able form for the `sla.nri.io/applied` annotation."""
        record: dict[str, Any] = {}
        if self.gpus and self.mig is None:
            record["gpus"] = [g.ref for g in self.gpus]
        if self.mig is not None:
            record["mig"] = self.mig.uuid
        if self.exclusive_cpus:
            record["exclusive"] = format_cpulist(self.exclusive_cpus)
        if self.cpus:
            record["cpus"] = format_cpulist(self.cpus)
        if self.mems:
            record["mems"] = format_cpulist(self.mems)
        if self.shared_gpus:
            record["shared"] = True
        if self.from_runtime:
            record["runtime"] = True
        if self.aligned:
            record["aligned"] = True
        return record


def describe_gpus(gpus: Iterable[Gpu]) -> str:
    """"GPU 2, 3 (NUMA 0), GPU 6 (NUMA 1)"; "none" for no GPUs."""
    by_node: dict[int | None, list[int]] = {}
    for g in sorted(gpus, key=lambda g: g.index):
        by_node.setdefault(g.numa_node, []).append(g.index)
    if not by_node:
        return "none"
    parts = []
    for node in sorted(by_node, key=lambda n: (n is None, n or 0)):
        where = "NUMA ?" if node is None else f"NUMA {node}"
        parts.append(f"GPU {', '.join(map(str, by_node[node]))} ({where})")
    return ", ".join(parts)


def plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"




@dataclass(frozen=True)
class Holdings:
    """Who holds what at one moment: copies the Allocator hands out under its lock, so a
    placement choice reads one consistent state and cannot change the allocator's tables."""

    gpus: Mapping[int, Mapping[str, str]] = field(default_factory=dict)  # index -> owner -> kind
    migs: Mapping[str, str] = field(default_factory=dict)  # MIG uuid -> owner
    exclusive_cpus: frozenset[int] = frozenset()


@dataclass(frozen=True)
class NodeLayout:
    """The node as placement sees it. Fixed for an allocator's life, so what derives from
    the topology and inventory is computed once instead of on every choice."""

    topology: Topology
    inventory: GpuInventory
    reserved: frozenset[int]
    # GPUs a new container may get whole (Gpu.offered_whole): a MIG-enabled GPU is only
    # handed out as instances, one whose MIG mode is unknown or that is not healthy never
    whole_gpus: tuple[Gpu, ...]
    node_cores: Mapping[int, tuple[frozenset[int], ...]]
    gpu_nodes: frozenset[int]
    mem_nodes: frozenset[int]

    @classmethod
    def of(cls, topology: Topology, inventory: GpuInventory,
           reserved_cpus: Iterable[int] = frozenset()) -> NodeLayout:
        return cls(
            topology=topology,
            inventory=inventory,
            reserved=(frozenset(reserved_cpus) | topology.reserved) & topology.online,
            whole_gpus=tuple(g for g in inventory.gpus if g.offered_whole),
            node_cores={n.id: topology.node_cores(n.id) for n in topology.nodes},
            gpu_nodes=frozenset(g.numa_node for g in inventory.gpus if g.numa_node is not None),
            mem_nodes=frozenset(n.id for n in topology.nodes if n.has_memory),
        )

    def free_cores(self, node_id: int, taken: Iterable[int]) -> list[frozenset[int]]:
        """Whole cores of `node_id` with no reserved CPU and none in `taken`."""
        blocked = self.reserved.union(taken)
        return [c for c in self.node_cores.get(node_id, ()) if not (c & blocked)]

    def node_cpus(self, nodes: Iterable[int], taken: Iterable[int]) -> frozenset[int]:
        """The CPUs of `nodes` less the reserved ones and those in `taken`."""
        cpus: set[int] = set()
        for n in nodes:
            if self.topology.has_node(n):
                cpus |= self.topology.node(n).cpus
        return frozenset(cpus.difference(self.reserved, taken))

    def nodes_of_cpus(self, cpus: Iterable[int]) -> frozenset[int]:
        return frozenset(n for c in cpus if (n := self.topology.node_of(c)) is not None)
