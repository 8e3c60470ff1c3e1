"""Placement values: what a container asks of the node, what it got, and the node and its
holdings as a placement choice reads them. Imports nothing from the rest of `plan`, so the
allocator and the best-fit choice can both depend on it without depending on each other.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from nri_plugin.topology.cpulist import format_cpulist
from nri_plugin.topology.cpus import Topology
from nri_plugin.topology.gpus import Gpu, GpuInventory, MigInstance
from nri_plugin.value import Frozen, field

TYPE_CHECKING = False  # `typing` costs the OCI hook start-up time; only checkers need it
if TYPE_CHECKING:
    from typing import Any

TOPOLOGIES = ("any", "numa", "nvlink")
GRANTED = "granted"  # how a container holds a GPU: its device plugin granted it


class PlacementRequest(Frozen):
    """What one container asks of the node (the planner maps an Sla onto this).

    GPUs are never chosen here: `granted_gpus` / `granted_migs` are what a device plugin
    granted the container (nri_plugin.plan.runtime_gpus), and with `wants_gpu` (the SLA
    has a gpu section) the other gpu fields are requirements on that grant: gpu_ids name
    GPUs by index, UUID or PCI bus id, or MIG devices by "MIG-" UUID or "<gpu>:<mig>".
    """

    owner: str
    wants_gpu: bool = False
    gpu_count: int | None = None
    gpu_ids: tuple[str, ...] = ()
    mig_profile: str | None = None
    topology: str = "any"
    align: bool = True
    exclusive_cpus: int | None = None
    numa_nodes: tuple[int, ...] | None = None
    cpus_needed: int = 0  # whole CPUs its CPU request needs: an aligned cpuset holds them
    full_cores: bool = False  # exclusive CPUs as whole cores only (cpu.exclusive-full-cores)
    granted_gpus: tuple[Gpu, ...] = ()
    granted_migs: tuple[tuple[Gpu, MigInstance], ...] = ()  # (parent, MIG device)


class Placement(Frozen):
    """What a container holds: its granted whole GPUs and MIG devices (with their parent
    GPUs), its exclusive CPUs and the aligned cpus/mems. Empty `cpus`/`mems` mean "not
    constrained by placement" (the container follows the shared pool)."""

    gpus: tuple[Gpu, ...] = ()
    migs: tuple[tuple[Gpu, MigInstance], ...] = ()
    exclusive_cpus: frozenset[int] = frozenset()
    cpus: frozenset[int] = frozenset()
    mems: frozenset[int] = frozenset()
    warnings: tuple[str, ...] = ()
    aligned: bool = field(default=False, compare=False)

    @property
    def touched(self) -> tuple[Gpu, ...]:
        """The whole GPUs and the MIG devices' parents, each once, by index."""
        gpus = {g.index: g for g in self.gpus}
        for parent, _ in self.migs:
            gpus.setdefault(parent.index, parent)
        return tuple(gpus[i] for i in sorted(gpus))

    def to_record(self) -> dict[str, Any]:
        """Compact JSON-able form for the `sla.nri.io/applied` annotation."""
        record: dict[str, Any] = {}
        if self.gpus:
            record["gpus"] = [g.ref for g in self.gpus]
        if self.migs:
            record["migs"] = [m.uuid for _, m in self.migs]
        if self.exclusive_cpus:
            record["exclusive"] = format_cpulist(self.exclusive_cpus)
        if self.cpus:
            record["cpus"] = format_cpulist(self.cpus)
        if self.mems:
            record["mems"] = format_cpulist(self.mems)
        if self.aligned:
            record["aligned"] = True
        return record


def cpus_needed(request_millis: int | None) -> int:
    """Whole CPUs a CPU request needs, rounded up; at least one (a cpuset is never
    empty, and a container without a request still runs)."""
    return max(1, -(-(request_millis or 0) // 1000))


def describe_gpus(gpus: Iterable[Gpu]) -> str:
    """ "GPU 2, 3 (NUMA 0), GPU 6 (NUMA 1)"; "none" for no GPUs."""
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


def describe_grant(gpus: Iterable[Gpu], migs: Iterable[MigInstance]) -> str:
    """One container's grant, each device by index and UUID: "GPU 1 (GPU-..., NUMA 0),
    MIG 1g.10gb MIG-... on GPU 0"; "no GPU". Messages a pod author sees use this: it
    names only that container's own devices."""
    parts = [
        f"GPU {g.index} ({g.uuid or g.pci_bus_id or 'no UUID'}, "
        f"NUMA {'?' if g.numa_node is None else g.numa_node})"
        for g in gpus
    ]
    parts += [f"MIG {m.profile} {m.uuid} on GPU {m.gpu_index}" for m in migs]
    return ", ".join(parts) or "no GPU"


def plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


class CpuFloor(Frozen):
    """Of `cpus`, at least `need` must stay out of every exclusive set: running containers
    whose cpuset is drawn from them need that many for their CPU requests (or, for a
    cpuset someone else pinned, every one of them). nri_plugin.plan.cpupool makes them."""

    cpus: frozenset[int]
    need: int


class Holdings(Frozen):
    """Who holds what at one moment: copies the Allocator hands out under its lock, so a
    placement choice reads one consistent state and cannot change the allocator's tables."""

    gpus: Mapping[int, Mapping[str, str]] = field(default_factory=dict)  # index -> owner -> kind
    migs: Mapping[str, Mapping[str, str]] = field(default_factory=dict)  # uuid -> owner -> kind
    exclusive_cpus: frozenset[int] = frozenset()


class NodeLayout(Frozen):
    """The node as placement sees it. Fixed for an allocator's life, so what derives from
    the topology and inventory is computed once instead of on every choice."""

    topology: Topology
    inventory: GpuInventory
    reserved: frozenset[int]
    node_cores: Mapping[int, tuple[frozenset[int], ...]]
    gpu_nodes: frozenset[int]
    mem_nodes: frozenset[int]

    @classmethod
    def of(
        cls, topology: Topology, inventory: GpuInventory, reserved_cpus: Iterable[int] = frozenset()
    ) -> NodeLayout:
        return cls(
            topology=topology,
            inventory=inventory,
            reserved=(frozenset(reserved_cpus) | topology.reserved) & topology.online,
            node_cores={n.id: topology.node_cores(n.id) for n in topology.nodes},
            gpu_nodes=frozenset(g.numa_node for g in inventory.gpus if g.numa_node is not None),
            mem_nodes=frozenset(n.id for n in topology.nodes if n.has_memory),
        )

    def node_cpus(self, nodes: Iterable[int], taken: Iterable[int]) -> frozenset[int]:
        """The CPUs of `nodes` less the reserved ones and those in `taken`."""
        cpus: set[int] = set()
        for n in nodes:
            if self.topology.has_node(n):
                cpus |= self.topology.node(n).cpus
        return frozenset(cpus.difference(self.reserved, taken))

    def nodes_of_cpus(self, cpus: Iterable[int]) -> frozenset[int]:
        return frozenset(n for c in cpus if (n := self.topology.node_of(c)) is not None)
