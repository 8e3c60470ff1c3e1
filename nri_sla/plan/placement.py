"""GPU, MIG and exclusive-CPU placement: which container holds what on this node.

One `Allocator` per node keeps the ownership tables (GPU -> holders, MIG device -> owner,
exclusive CPU -> owner) under one lock, so two containers can never hold the same
exclusive GPU or CPU, whatever the interleaving of allocate, restore and release.

Selection is deterministic (same state + same request = same answer) and best-fit:
* topology constraint first (any | numa: one NUMA node | nvlink: pairwise NVLink peers);
* do not break a free NVLink group when a choice exists that leaves it whole;
* then the NUMA node with the fewest free GPUs that still fit (big holes stay big);
* inside a node, GPUs with the fewest free NVLink peers first, then the lowest index.
Exclusive CPUs are whole physical cores (every SMT sibling), taken from the GPUs' node,
else the requested nodes, else the best-fitting node without GPUs; highest cores first
because CPU 0 and its neighbours carry most kernel housekeeping and IRQ work.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from nri_sla.topology.cpulist import CpuListError, format_cpulist, parse_cpulist
from nri_sla.topology.cpus import Topology
from nri_sla.topology.gpus import Gpu, GpuInventory, MigInstance

TYPE_CHECKING = False  # `typing` costs the OCI hook start-up time; only checkers need it
if TYPE_CHECKING:
    from typing import Any

TOPOLOGIES = ("any", "numa", "nvlink")
_EXCLUSIVE, _SHARED, _RUNTIME = "exclusive", "shared", "runtime"
_CLIQUE_SEARCH_BUDGET = 20_000  # DFS steps; NVLink graphs are small, this only caps pathology


class PlacementError(Exception):
    """A request that cannot be placed (hard mode) or is malformed; says what is free."""

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


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


class Allocator:
    """Node-wide GPU / MIG / exclusive-CPU ownership. All public methods are thread-safe."""

    def __init__(self, topology: Topology, inventory: GpuInventory,
                 reserved_cpus: Iterable[int] = frozenset()) -> None:
        self.topology = topology
        self.inventory = inventory
        self.reserved = (frozenset(reserved_cpus) | topology.reserved) & topology.online
        self._lock = threading.RLock()
        self._gpu_holders: dict[int, dict[str, str]] = {}  # gpu index -> owner -> kind
        self._mig_owner: dict[str, str] = {}  # MIG uuid -> owner
        self._cpu_owner: dict[int, str] = {}  # exclusive CPU -> owner
        self._placements: dict[str, Placement] = {}
        # whole GPUs that can be handed out (a MIG-enabled GPU is only given as instances)
        self._whole_gpus = tuple(g for g in inventory.gpus if not g.mig_enabled)
        self._node_cores = {n.id: topology.node_cores(n.id) for n in topology.nodes}
        self._gpu_nodes = frozenset(g.numa_node for g in inventory.gpus
                                    if g.numa_node is not None)
        self._mem_nodes = frozenset(n.id for n in topology.nodes if n.has_memory)

    # --- queries --------------------------------------------------------------------------

    def placement_of(self, owner: str) -> Placement | None:
        with self._lock:
            return self._placements.get(owner)

    def owners(self) -> tuple[str, ...]:
        with self._lock:
            return tuple(self._placements)

    def gpus_in_use(self) -> dict[int, tuple[str, ...]]:
        """GPU index -> its holders (owners), for metrics; MIG devices by parent index."""
        with self._lock:
            used = {i: tuple(sorted(h)) for i, h in self._gpu_holders.items() if h}
            for uuid, owner in self._mig_owner.items():
                found = self.inventory.find_mig(uuid)
                if found:
                    used[found[0].index] = (*used.get(found[0].index, ()), owner)
            return used

    def migs_in_use(self) -> dict[str, str]:
        with self._lock:
            return dict(self._mig_owner)

    def exclusive_cpus_in_use(self) -> dict[int, str]:
        with self._lock:
            return dict(self._cpu_owner)

    def shared_cpus(self) -> frozenset[int]:
        """Online CPUs minus reserved minus every exclusive CPU: the pool that other SLA
        containers' cpusets use."""
        with self._lock:
            return self.topology.online - self.reserved - self._cpu_owner.keys()

    def current_cpus(self, owner: str) -> frozenset[int]:
        """An aligned container's cpuset recomputed now: its nodes' CPUs minus what other
        containers took as exclusive since (the planner pushes it as an update)."""
        with self._lock:
            p = self._placements.get(owner)
            if p is None or not p.cpus:
                return frozenset()
            if p.exclusive_cpus:
                return p.exclusive_cpus
            return self._node_cpus(p.mems or self._nodes_of_cpus(p.cpus), owner)

    # --- changes --------------------------------------------------------------------------

    def release(self, owner: str) -> bool:
        """Free everything `owner` holds; False when it held nothing."""
        with self._lock:
            placement = self._placements.pop(owner, None)
            for holders in self._gpu_holders.values():
                holders.pop(owner, None)
            for uuid in [u for u, o in self._mig_owner.items() if o == owner]:
                del self._mig_owner[uuid]
            for cpu in [c for c, o in self._cpu_owner.items() if o == owner]:
                del self._cpu_owner[cpu]
            return placement is not None

    def allocate(self, request: PlacementRequest, hard: bool = True) -> Placement:
        """Place `request`. hard: exactly as asked or PlacementError (state unchanged);
        soft: the best available, each shortfall in `warnings`."""
        _validate(request, self.topology)
        with self._lock:
            previous = self._placements.get(request.owner)
            if previous is not None:
                # a retried CreateContainer for the same owner replaces its old placement
                self.release(request.owner)
            try:
                placement = _Decision(self, request, hard).run()
            except PlacementError:
                if previous is not None:
                    self._commit(request.owner, previous, kind=self._kind(previous))
                raise
            self._commit(request.owner, placement, kind=self._kind(placement))
            return placement

    def restore(self, owner: str, record: Mapping[str, Any]) -> Placement:
        """Re-take what `owner` held according to its `to_record()` (plugin restart).

        Raises PlacementError when the record names unknown GPUs or something another
        owner already holds exclusively; the state is then unchanged.
        """
        placement = self._from_record(record)
        kind = self._kind(placement)
        with self._lock:
            self.release(owner)
            self._check_free(owner, placement, kind)
            self._commit(owner, placement, kind)
            return placement

    # --- internals ------------------------------------------------------------------------

    @staticmethod
    def _kind(p: Placement) -> str:
        return _RUNTIME if p.from_runtime else _SHARED if p.shared_gpus else _EXCLUSIVE

    def _commit(self, owner: str, p: Placement, kind: str) -> None:
        if p.mig is not None:
            self._mig_owner[p.mig.uuid] = owner
        else:
            for g in p.gpus:
                self._gpu_holders.setdefault(g.index, {})[owner] = kind
        for cpu in p.exclusive_cpus:
            self._cpu_owner[cpu] = owner
        self._placements[owner] = p

    def _check_free(self, owner: str, p: Placement, kind: str) -> None:
        if p.mig is not None:
            other = self._mig_owner.get(p.mig.uuid)
            if other not in (None, owner):
                raise PlacementError(f"MIG device {p.mig.uuid} is already held by {other}")
        elif kind != _RUNTIME:  # the device plugin is the authority for runtime GPUs
            for g in p.gpus:
                for other, other_kind in self._gpu_holders.get(g.index, {}).items():
                    if other != owner and (kind == _EXCLUSIVE or other_kind != _SHARED):
                        raise PlacementError(f"GPU {g.index} is already held by {other}")
        taken = {c: self._cpu_owner[c] for c in p.exclusive_cpus
                 if self._cpu_owner.get(c) not in (None, owner)}
        if taken:
            others = ", ".join(sorted(set(taken.values())))
            raise PlacementError(f"exclusive CPUs {format_cpulist(taken)} are already held "
                                 f"by {others}", field="cpu.exclusive")

    def _from_record(self, record: Mapping[str, Any]) -> Placement:
        if not isinstance(record, Mapping):
            raise PlacementError(f"placement record must be a mapping, got {record!r}")

        def cpus(key: str) -> frozenset[int]:
            try:
                return parse_cpulist(str(record.get(key, "")))
            except CpuListError as exc:
                raise PlacementError(f"placement record: {key}: {exc}") from None

        mig: MigInstance | None = None
        gpus: list[Gpu] = []
        if "mig" in record:
            found = self.inventory.find_mig(str(record["mig"]))
            if found is None:
                raise PlacementError(f"placement record: MIG device {record['mig']} is not "
                                     "on this node")
            gpus, mig = [found[0]], found[1]
        for ref in record.get("gpus", ()):
            gpu = self.inventory.find(str(ref))
            if gpu is None:
                raise PlacementError(f"placement record: GPU {ref} is not on this node "
                                     f"(GPUs: {describe_gpus(self.inventory.gpus)})")
            gpus.append(gpu)
        return Placement(
            gpus=tuple(gpus), mig=mig, exclusive_cpus=cpus("exclusive"), cpus=cpus("cpus"),
            mems=cpus("mems"), shared_gpus=bool(record.get("shared", False)),
            from_runtime=bool(record.get("runtime", False)),
            aligned=bool(record.get("aligned", False)),
        )

    def _free_cores(self, node_id: int) -> list[frozenset[int]]:
        blocked = self.reserved | self._cpu_owner.keys()
        return [c for c in self._node_cores.get(node_id, ()) if not (c & blocked)]

    def _node_cpus(self, nodes: Iterable[int], owner: str) -> frozenset[int]:
        cpus: set[int] = set()
        for n in nodes:
            if self.topology.has_node(n):
                cpus |= self.topology.node(n).cpus
        others = {c for c, o in self._cpu_owner.items() if o != owner}
        return frozenset(cpus - self.reserved - others)

    def _nodes_of_cpus(self, cpus: Iterable[int]) -> frozenset[int]:
        return frozenset(n for c in cpus if (n := self.topology.node_of(c)) is not None)


def _validate(r: PlacementRequest, topology: Topology) -> None:
    if r.topology not in TOPOLOGIES:
        raise PlacementError(f"gpu.topology: {r.topology!r} is not one of "
                             f"{', '.join(TOPOLOGIES)}", field="gpu.topology")
    if r.gpu_count is not None and (isinstance(r.gpu_count, bool) or r.gpu_count < 0):
        raise PlacementError(f"gpu.count: {r.gpu_count!r} must be a whole number >= 0",
                             field="gpu.count")
    if r.exclusive_cpus is not None and r.exclusive_cpus < 0:
        raise PlacementError(f"cpu.exclusive: {r.exclusive_cpus!r} must be >= 0",
                             field="cpu.exclusive")
    if r.mig_profile is not None and (r.gpu_count or 1) > 1:
        raise PlacementError(f"gpu.mig: one MIG instance per container; gpu.count "
                             f"{r.gpu_count} is not allowed with gpu.mig", field="gpu.mig")
    for n in r.numa_nodes or ():
        if not topology.has_node(n):
            raise PlacementError(f"numa.nodes: node {n} does not exist (nodes: "
                                 f"{topology.describe_nodes()})", field="numa.nodes")


class _Decision:
    """One allocate() call, run under the allocator's lock. Reads state, never writes it."""

    def __init__(self, alloc: Allocator, request: PlacementRequest, hard: bool) -> None:
        self.a = alloc
        self.r = request
        self.hard = hard
        self.warnings: list[str] = []

    def fail_or_warn(self, message: str, field: str) -> None:
        if self.hard:
            raise PlacementError(message, field=field)
        self.warnings.append(message)

    def run(self) -> Placement:
        r = self.r
        mig: MigInstance | None = None
        if r.from_runtime:
            gpus, mig = self.runtime_gpus()
        elif r.mig_profile is not None:
            gpus, mig = self.pick_mig()
        elif r.gpu_ids:
            gpus, mig = self.named_gpus()
        elif r.gpu_count:
            gpus = self.pick_gpus(r.gpu_count)
        else:
            gpus = ()
        gpu_nodes = _ordered_nodes(gpus, self.a.topology)
        align_nodes: tuple[int, ...] = ()
        if gpus and r.align and not gpu_nodes:
            self.fail_or_warn(f"gpu.align: the NUMA node of {describe_gpus(gpus)} is unknown "
                              "(the kernel reports -1); cpus/mems are not aligned", "gpu.align")
        if gpus and r.align and gpu_nodes:
            align_nodes = gpu_nodes
            if r.numa_nodes and not set(gpu_nodes) <= set(r.numa_nodes):
                self.fail_or_warn(
                    f"numa.nodes {format_cpulist(r.numa_nodes)} does not hold the GPUs "
                    f"({describe_gpus(gpus)}); cpus/mems follow the GPUs", "numa.nodes")
        elif r.numa_nodes:
            align_nodes = tuple(r.numa_nodes)
        exclusive = self.pick_cpus(r.exclusive_cpus or 0, align_nodes)
        if exclusive:
            cpus = exclusive
            mem_nodes = set(align_nodes) or self.a._nodes_of_cpus(exclusive)
        elif align_nodes:
            cpus = self.a._node_cpus(align_nodes, r.owner)
            mem_nodes = set(align_nodes)
            if not cpus:
                self.fail_or_warn(f"no shared CPU is left on NUMA node(s) "
                                  f"{format_cpulist(align_nodes)} (all reserved or exclusive)",
                                  "numa.nodes")
        else:
            cpus, mem_nodes = frozenset(), set()
        mems = frozenset(mem_nodes) & self.a._mem_nodes
        return Placement(gpus=tuple(gpus), mig=mig, exclusive_cpus=exclusive,
                         cpus=cpus, mems=mems,
                         warnings=tuple(self.warnings), shared_gpus=r.shared_gpus,
                         from_runtime=r.from_runtime, aligned=bool(align_nodes))

    # --- GPUs -----------------------------------------------------------------------------

    def free_gpus(self, on_requested_nodes: bool = True) -> list[Gpu]:
        """Whole GPUs this request may take: no holder (exclusive), or only shared holders
        (shared), restricted to the requested NUMA nodes unless told otherwise."""
        holders = self.a._gpu_holders
        nodes = set(self.r.numa_nodes) if self.r.numa_nodes and on_requested_nodes else None
        out = []
        for g in self.a._whole_gpus:
            held = holders.get(g.index)
            if held and (not self.r.shared_gpus or any(k != _SHARED for k in held.values())):
                continue
            if nodes is not None and g.numa_node not in nodes:
                continue
            out.append(g)
        return out

    def what(self, n: int, topology: str) -> str:
        kind = "shared " if self.r.shared_gpus else ""
        if topology == "nvlink" and n > 1:
            return f"{n} NVLink-connected {kind}GPUs"
        if topology == "numa" and n > 1:
            return f"{n} {kind}GPUs on one NUMA node"
        return _plural(n, f"{kind}GPU")

    def pick_gpus(self, n: int) -> tuple[Gpu, ...]:
        free = self.free_gpus()
        where = (f" on NUMA node(s) {format_cpulist(self.r.numa_nodes)}"
                 if self.r.numa_nodes else "")
        chosen = _choose(free, n, self.r.topology, self.a._gpu_holders, self.r.shared_gpus)
        if chosen is not None:
            return chosen
        message = f"requested {self.what(n, self.r.topology)}{where}; free: {describe_gpus(free)}"
        self.fail_or_warn(message, "gpu.count")
        # soft: relax the topology first, then the count
        order = TOPOLOGIES[: TOPOLOGIES.index(self.r.topology)][::-1]
        for topology in order:
            chosen = _choose(free, n, topology, self.a._gpu_holders, self.r.shared_gpus)
            if chosen is not None:
                self.warnings.append(f"gave {self.what(n, topology)} instead")
                return chosen
        if not free:
            return ()
        chosen = _choose(free, len(free), "any", self.a._gpu_holders, self.r.shared_gpus)
        self.warnings.append(f"gave {_plural(len(free), 'GPU')} instead of {n}")
        return chosen or ()

    def named_gpus(self) -> tuple[tuple[Gpu, ...], MigInstance | None]:
        inv, r = self.a.inventory, self.r
        gpus: list[Gpu] = []
        mig: MigInstance | None = None
        # named GPUs are checked against numa.nodes by alignment, with a clearer message
        free_gpus = self.free_gpus(on_requested_nodes=False)
        free = {g.index for g in free_gpus}
        for name in r.gpu_ids:
            found_mig = inv.find_mig(name)
            if found_mig is not None:
                owner = self.a._mig_owner.get(found_mig[1].uuid)
                if mig is not None or gpus:
                    self.fail_or_warn(f"gpu.ids: a MIG device ({name}) cannot be combined "
                                      "with other GPUs", "gpu.ids")
                    continue
                if owner is not None:
                    self.fail_or_warn(f"gpu.ids: MIG device {name} is held by {owner}",
                                      "gpu.ids")
                    continue
                gpus, mig = [found_mig[0]], found_mig[1]
                continue
            gpu = inv.find(name)
            if gpu is None:
                self.fail_or_warn(f"gpu.ids: {name!r} matches no GPU on this node "
                                  f"(GPUs: {describe_gpus(inv.gpus)}; name them by index, "
                                  "UUID or PCI bus id)", "gpu.ids")
            elif gpu.mig_enabled:
                self.fail_or_warn(f"gpu.ids: GPU {gpu.index} is in MIG mode; ask for a MIG "
                                  "profile (gpu.mig) or name a MIG device", "gpu.ids")
            elif gpu.index not in free:
                holders = ", ".join(sorted(self.a._gpu_holders.get(gpu.index, {}))) or "?"
                self.fail_or_warn(f"gpu.ids: GPU {gpu.index} is not available (held by "
                                  f"{holders}; free: {describe_gpus(free_gpus)})",
                                  "gpu.ids")
            elif mig is not None:
                self.fail_or_warn("gpu.ids: a MIG device cannot be combined with other GPUs",
                                  "gpu.ids")
            elif gpu not in gpus:
                gpus.append(gpu)
        if len(gpus) > 1 and mig is None and not _fits(gpus, self.r.topology):
            self.fail_or_warn(f"gpu.ids: GPUs {describe_gpus(gpus)} do not satisfy "
                              f"gpu.topology {self.r.topology}", "gpu.topology")
        return tuple(gpus), mig

    def pick_mig(self) -> tuple[tuple[Gpu, ...], MigInstance | None]:
        profile = self.r.mig_profile or ""
        nodes = set(self.r.numa_nodes) if self.r.numa_nodes else None
        free_by_gpu: list[tuple[Gpu, list[MigInstance]]] = []
        all_free: list[str] = []
        for g in self.a.inventory.gpus:
            if not g.mig_enabled or (nodes is not None and g.numa_node not in nodes):
                continue
            free = [m for m in g.mig_instances if m.uuid not in self.a._mig_owner]
            all_free += [f"{m.profile} on GPU {g.index}" for m in free]
            free_by_gpu.append((g, free))
        # best fit: the GPU with the fewest free instances that still has the profile
        candidates = sorted(((len(free), g.index, g, m) for g, free in free_by_gpu
                             for m in free if m.profile == profile), key=lambda t: t[:2])
        if candidates:
            _, _, gpu, mig = candidates[0]
            return (gpu,), mig
        self.fail_or_warn(f"requested a MIG {profile} instance; free MIG instances: "
                          f"{', '.join(all_free) or 'none'} (nri-sla does not create MIG "
                          "instances; the node admin does)", "gpu.mig")
        return (), None

    def runtime_gpus(self) -> tuple[tuple[Gpu, ...], MigInstance | None]:
        gpus, migs, unknown = resolve_runtime_devices(self.a.inventory, self.r.visible_devices,
                                                      self.r.cdi_devices)
        for name in unknown:
            self.fail_or_warn(f"gpu.from runtime: {name!r} matches no GPU on this node "
                              f"(GPUs: {describe_gpus(self.a.inventory.gpus)})", "gpu.from")
        for g in gpus:
            exclusive = [o for o, k in self.a._gpu_holders.get(g.index, {}).items()
                         if k == _EXCLUSIVE and o != self.r.owner]
            if exclusive:
                # the device plugin decided; report the double booking, do not refuse
                self.warnings.append(f"GPU {g.index} given by the runtime is also held "
                                     f"exclusively by {', '.join(exclusive)}")
        return gpus, migs[0] if len(migs) == 1 else None

    # --- CPUs -----------------------------------------------------------------------------

    def pick_cpus(self, n: int, align_nodes: Sequence[int]) -> frozenset[int]:
        if n <= 0:
            return frozenset()
        a = self.a
        if align_nodes:
            cores = [c for node in align_nodes for c in reversed(a._free_cores(node))]
            where = f"NUMA node(s) {format_cpulist(align_nodes)}"
        else:
            cores = self.best_node_cores(n)
            where = "this node"
        taken = _take_cores(cores, n)
        if taken is not None:
            return taken
        free = frozenset().union(*cores) if cores else frozenset()
        self.fail_or_warn(f"requested {n} exclusive CPUs on {where}; free whole cores there: "
                          f"{len(free)} CPUs ({format_cpulist(free) or 'none'})",
                          "cpu.exclusive")
        # soft: complete from the nearest other nodes
        rest = [c for node in self.nearest_nodes(align_nodes)
                for c in reversed(a._free_cores(node))]
        got = _take_cores(cores + rest, n)
        if got is None:
            got = frozenset().union(*(cores + rest)) if cores + rest else frozenset()
        self.warnings.append(f"gave {len(got)} exclusive CPUs ({format_cpulist(got) or 'none'})")
        return got

    def best_node_cores(self, n: int) -> list[frozenset[int]]:
        """Cores of the best single node for n CPUs: no GPUs there first, then the fewest
        free cores that still fit; else cores across nodes, fullest nodes first."""
        a = self.a
        free = {node.id: a._free_cores(node.id) for node in a.topology.nodes}
        fitting = [nid for nid, cores in free.items() if sum(map(len, cores)) >= n]
        if fitting:
            best = min(fitting, key=lambda nid: (nid in a._gpu_nodes, len(free[nid]), nid))
            return list(reversed(free[best]))
        order = sorted(free, key=lambda nid: (-len(free[nid]), nid))
        return [c for nid in order for c in reversed(free[nid])]

    def nearest_nodes(self, nodes: Sequence[int]) -> list[int]:
        topo = self.a.topology
        others = [n for n in topo.nodes if n.id not in set(nodes)]
        if not nodes:
            return [n.id for n in others]
        home = topo.node(nodes[0])
        return [n.id for n in sorted(others, key=lambda o: (home.distances.get(o.id, 255), o.id))]


def _take_cores(cores: Sequence[frozenset[int]], n: int) -> frozenset[int] | None:
    taken: set[int] = set()
    for core in cores:
        if len(taken) >= n:
            break
        taken |= core
    return frozenset(taken) if len(taken) >= n else None


def _ordered_nodes(gpus: Sequence[Gpu], topology: Topology) -> tuple[int, ...]:
    """NUMA nodes of the GPUs, the one holding most of them first. An unknown node (-1 in
    sysfs, common on one-socket boxes) is the only node when there is just one."""
    single = topology.nodes[0].id if len(topology.nodes) == 1 else None
    counts: dict[int, int] = {}
    for g in gpus:
        node = g.numa_node if g.numa_node is not None else single
        if node is not None:
            counts[node] = counts.get(node, 0) + 1
    return tuple(sorted(counts, key=lambda n: (-counts[n], n)))


def _fits(gpus: Sequence[Gpu], topology: str) -> bool:
    if topology == "numa":
        return len({g.numa_node for g in gpus}) == 1 and gpus[0].numa_node is not None
    if topology == "nvlink":
        return all(h.index in g.nvlink_peers for g in gpus for h in gpus if h is not g)
    return True


def _components(free: Sequence[Gpu]) -> dict[int, frozenset[int]]:
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


def _choose(free: Sequence[Gpu], n: int, topology: str, holders: Mapping[int, Mapping[str, str]],
            shared: bool) -> tuple[Gpu, ...] | None:
    """The best n GPUs among `free` under `topology`, or None when impossible."""
    if n > len(free):
        return None
    if n == 0:
        return ()
    comp = _components(free)
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

    candidates: list[tuple[Gpu, ...]] = []
    for node, gpus in by_node.items():
        if len(gpus) < n or (node is None and topology == "numa"):
            continue
        if topology == "nvlink" and n > 1:
            clique = _find_clique(gpus, n)
            if clique is not None:
                candidates.append(clique)
        else:
            candidates.append(tuple(gpus[:n]))
    if not candidates and topology == "nvlink" and n > 1:
        ordered = [g for node in sorted(by_node, key=lambda x: (-len(by_node[x]), x is None,
                                                                x or 0)) for g in by_node[node]]
        clique = _find_clique(ordered, n)
        if clique is not None:
            candidates.append(clique)
    if not candidates and topology == "any":
        # span nodes: fewest nodes, so take from the fullest nodes first
        ordered = [g for node in sorted(by_node, key=lambda x: (-len(by_node[x]), x is None,
                                                                x or 0)) for g in by_node[node]]
        candidates.append(tuple(ordered[:n]))
    if not candidates:
        return None
    best = min(candidates, key=cost)
    return tuple(sorted(best, key=lambda g: g.index))


def _find_clique(ordered: Sequence[Gpu], n: int) -> tuple[Gpu, ...] | None:
    """First n pairwise NVLink-connected GPUs in `ordered` order (depth-first)."""
    budget = [_CLIQUE_SEARCH_BUDGET]

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


# --- GPUs assigned by the runtime (device plugin) ------------------------------------------

_NOTHING = {"", "none", "void"}
CDI_GPU_PREFIX = "nvidia.com/gpu="


def resolve_runtime_devices(inventory: GpuInventory, visible_devices: str | None,
                            cdi_devices: Iterable[str] = ()
                            ) -> tuple[tuple[Gpu, ...], tuple[MigInstance, ...], tuple[str, ...]]:
    """GPUs (and MIG devices) named by NVIDIA_VISIBLE_DEVICES and CDI device names.

    NVIDIA_VISIBLE_DEVICES: "all", "none", "void", or a comma list of indexes, GPU UUIDs,
    MIG UUIDs or "<gpu>:<mig>" names. CDI: `nvidia.com/gpu=<index|uuid|all|gpu:mig>`;
    other vendors' CDI names are ignored. Returns (gpus, migs, unknown names); the GPUs
    include the parents of the MIG devices, in order of first mention.
    """
    names: list[str] = []
    if visible_devices is not None and visible_devices.strip().lower() not in _NOTHING:
        names += [t.strip() for t in visible_devices.split(",") if t.strip()]
    for cdi in cdi_devices:
        if cdi.startswith(CDI_GPU_PREFIX):
            names.append(cdi[len(CDI_GPU_PREFIX):].strip())
    gpus: dict[int, Gpu] = {}
    migs: list[MigInstance] = []
    unknown: list[str] = []
    for name in names:
        if name.lower() == "all":
            gpus.update((g.index, g) for g in inventory.gpus)
            continue
        found_mig = inventory.find_mig(name)
        if found_mig is not None:
            gpus.setdefault(found_mig[0].index, found_mig[0])
            if found_mig[1] not in migs:
                migs.append(found_mig[1])
            continue
        gpu = inventory.find(name)
        if gpu is None:
            unknown.append(name)
        else:
            gpus.setdefault(gpu.index, gpu)
    return tuple(gpus.values()), tuple(migs), tuple(unknown)
