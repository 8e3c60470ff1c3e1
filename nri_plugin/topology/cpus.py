"""CPUs, SMT siblings and NUMA nodes of this machine, read from sysfs.

Only facts: which CPUs are online, which CPUs share a physical core, and which CPUs and
memory belong to which NUMA node. Who uses what is `nri_plugin.plan.allocator`'s business.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from os import PathLike, fspath, listdir
from os.path import isdir, join

from nri_plugin.topology.cpulist import format_cpulist, parse_cpulist
from nri_plugin.topology.errors import CpuListError, TopologyError
from nri_plugin.value import Frozen, field


class NumaNode(Frozen):
    """One NUMA node: its online CPUs and its SLIT distances to the other nodes."""

    id: int
    cpus: frozenset[int]
    distances: Mapping[int, int] = field(default_factory=dict, compare=False)
    has_memory: bool = True


class Topology(Frozen):
    """Online CPUs grouped into physical cores and NUMA nodes.

    `cores` lists every physical core as the set of its online hardware threads (one
    element per core without SMT); `reserved` are CPUs the node keeps for system daemons
    (never given to containers as exclusive or aligned CPUs).
    """

    __slots__ = ("_core_of", "_node_of", "_nodes_by_id")  # derived lookups: no fields

    online: frozenset[int]
    nodes: tuple[NumaNode, ...]
    cores: tuple[frozenset[int], ...]
    reserved: frozenset[int] = frozenset()

    def __post_init__(self) -> None:
        core_of: dict[int, frozenset[int]] = {}
        for core in self.cores:
            for cpu in core:
                core_of[cpu] = core
        node_of: dict[int, int] = {}
        for node in self.nodes:
            for cpu in node.cpus:
                node_of[cpu] = node.id
        # derived lookups; object.__setattr__ because the value is frozen
        object.__setattr__(self, "_core_of", core_of)
        object.__setattr__(self, "_node_of", node_of)
        object.__setattr__(self, "_nodes_by_id", {n.id: n for n in self.nodes})

    @property
    def node_ids(self) -> tuple[int, ...]:
        return tuple(n.id for n in self.nodes)

    def node(self, node_id: int) -> NumaNode:
        try:
            return self._nodes_by_id[node_id]  # type: ignore[attr-defined]
        except KeyError:
            raise TopologyError(
                f"NUMA node {node_id} does not exist (nodes: {self.describe_nodes()})"
            ) from None

    def has_node(self, node_id: int) -> bool:
        return node_id in self._nodes_by_id  # type: ignore[attr-defined]

    def node_of(self, cpu: int) -> int | None:
        return self._node_of.get(cpu)  # type: ignore[attr-defined]

    def core_of(self, cpu: int) -> frozenset[int]:
        return self._core_of.get(cpu, frozenset({cpu}))  # type: ignore[attr-defined]

    def node_cores(self, node_id: int) -> tuple[frozenset[int], ...]:
        """The physical cores whose threads all belong to `node_id`, lowest CPU first."""
        cpus = self.node(node_id).cpus
        return tuple(sorted((c for c in self.cores if c <= cpus), key=min))

    @property
    def threads_per_core(self) -> int:
        return max((len(c) for c in self.cores), default=1)

    def describe_nodes(self) -> str:
        return ", ".join(f"{n.id} (CPUs {format_cpulist(n.cpus) or 'none'})" for n in self.nodes)


def _read(path: str) -> str:
    with open(path) as fh:
        return fh.read().strip()


def _read_cpulist(path: str) -> frozenset[int]:
    try:
        return parse_cpulist(_read(path))
    except CpuListError as exc:
        raise TopologyError(f"{path}: {exc}") from None


def read_topology(
    sysfs_root: str | PathLike[str] = "/sys", reserved: Iterable[int] = ()
) -> Topology:
    """Read online CPUs, SMT siblings and NUMA nodes under `sysfs_root`.

    Machines (or kernels built without CONFIG_NUMA) that have no node directories are one
    node 0 holding every online CPU.
    """
    # String paths, not pathlib: an OCI hook's cold run reads the topology for a placement
    # SLA and would import pathlib for it alone.
    sysfs_root = fspath(sysfs_root)
    cpu_dir = join(sysfs_root, "devices/system/cpu")
    online_file = join(cpu_dir, "online")
    try:
        online = _read_cpulist(online_file)
    except OSError as exc:
        raise TopologyError(f"cannot read online CPUs from {online_file}: {exc}") from None
    if not online:
        raise TopologyError(f"{online_file} lists no CPUs")

    cores: dict[frozenset[int], None] = {}  # ordered set
    for cpu in sorted(online):
        topo = join(cpu_dir, f"cpu{cpu}/topology")
        siblings = frozenset({cpu})
        # core_cpus_list is the newer name (5.x); thread_siblings_list the older one
        for name in ("core_cpus_list", "thread_siblings_list"):
            try:
                siblings = _read_cpulist(join(topo, name)) & online
                break
            except OSError:
                continue
        cores.setdefault(siblings | {cpu}, None)

    nodes = _read_nodes(join(sysfs_root, "devices/system/node"), online)
    return Topology(online, nodes, tuple(cores), frozenset(reserved) & online)


def _read_nodes(node_dir: str, online: frozenset[int]) -> tuple[NumaNode, ...]:
    ids: list[int] = []
    if isdir(node_dir):
        for name in listdir(node_dir):
            # "node<N>", by string tests: no pattern to compile on an OCI hook's cold run
            if name.startswith("node") and name[4:].isdecimal() and isdir(join(node_dir, name)):
                ids.append(int(name[4:]))
    ids.sort()
    if not ids:
        return (NumaNode(0, online, {0: 10}),)
    try:
        with_memory = _read_cpulist(join(node_dir, "has_memory"))
    except OSError:
        with_memory = frozenset(ids)
    nodes = []
    for node_id in ids:
        path = join(node_dir, f"node{node_id}")
        try:
            cpus = _read_cpulist(join(path, "cpulist")) & online
        except OSError:
            cpus = frozenset()
        distances: dict[int, int] = {}
        try:
            # one distance per online node, in node-id order (the kernel's SLIT row)
            row = [int(x) for x in _read(join(path, "distance")).split()]
            distances = dict(zip(ids, row, strict=False))
        except (OSError, ValueError):
            pass
        nodes.append(NumaNode(node_id, cpus, distances, node_id in with_memory))
    return tuple(nodes)
