"""Choosing one container's placement, best fit: GPUs (or a MIG device, or the GPUs the
runtime assigned), exclusive CPUs and the aligned cpus/mems.

A pure function of the node layout, a snapshot of holdings and the request: it never
changes state, so the Allocator can run it under its lock and commit the answer, or drop
it when it fails.
"""

from __future__ import annotations

from collections.abc import Sequence

from nri_plugin.plan.gpu_selection import choose_gpus, fits, ordered_nodes
from nri_plugin.plan.placement_values import (
    EXCLUSIVE,
    SHARED,
    TOPOLOGIES,
    Holdings,
    NodeLayout,
    Placement,
    PlacementError,
    PlacementRequest,
    describe_gpus,
    plural,
)
from nri_plugin.plan.runtime_gpus import resolve_runtime_devices
from nri_plugin.topology.cpulist import format_cpulist
from nri_plugin.topology.cpus import Topology
from nri_plugin.topology.gpus import Gpu, MigInstance


def validate_request(r: PlacementRequest, topology: Topology) -> None:
    """PlacementError naming the field when `r` is malformed, whatever the node holds."""
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


def choose_placement(layout: NodeLayout, holdings: Holdings, request: PlacementRequest,
                     hard: bool) -> Placement:
    """The best placement for a valid `request` (see validate_request). hard: exactly as
    asked or PlacementError; soft: the best available, each shortfall in `warnings`."""
    return _BestFit(layout, holdings, request, hard).run()


class _BestFit:
    """The working state of one choose_placement() call: the warnings gathered so far."""

    def __init__(self, layout: NodeLayout, holdings: Holdings, request: PlacementRequest,
                 hard: bool) -> None:
        self.node = layout
        self.held = holdings
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
        gpu_nodes = ordered_nodes(gpus, self.node.topology)
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
            mem_nodes = set(align_nodes) or self.node.nodes_of_cpus(exclusive)
        elif align_nodes:
            cpus = self.node.node_cpus(align_nodes, self.held.exclusive_cpus)
            mem_nodes = set(align_nodes)
            if not cpus:
                self.fail_or_warn(f"no shared CPU is left on NUMA node(s) "
                                  f"{format_cpulist(align_nodes)} (all reserved or exclusive)",
                                  "numa.nodes")
        else:
            cpus, mem_nodes = frozenset(), set()
        mems = frozenset(mem_nodes) & self.node.mem_nodes
        return Placement(gpus=tuple(gpus), mig=mig, exclusive_cpus=exclusive,
                         cpus=cpus, mems=mems,
                         warnings=tuple(self.warnings), shared_gpus=r.shared_gpus,
                         from_runtime=r.from_runtime, aligned=bool(align_nodes))

    # --- GPUs -----------------------------------------------------------------------------

    def free_gpus(self, on_requested_nodes: bool = True) -> list[Gpu]:
        """Whole GPUs this request may take: no holder (exclusive), or only shared holders
        (shared), restricted to the requested NUMA nodes unless told otherwise."""
        holders = self.held.gpus
        nodes = set(self.r.numa_nodes) if self.r.numa_nodes and on_requested_nodes else None
        out = []
        for g in self.node.whole_gpus:
            held = holders.get(g.index)
            if held and (not self.r.shared_gpus or any(k != SHARED for k in held.values())):
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
        return plural(n, f"{kind}GPU")

    def choose(self, free: Sequence[Gpu], n: int, topology: str) -> tuple[Gpu, ...] | None:
        by_index = {g.index: g for g in free}
        # shared requests pack onto GPUs other shared users hold: those are not "left free"
        shared = [i for i in by_index if self.held.gpus.get(i)] if self.r.shared_gpus else ()
        choice = choose_gpus(self.node.inventory, by_index, n, topology=topology,
                             shared=shared)
        return None if choice is None else tuple(by_index[i] for i in choice.gpus)

    def pick_gpus(self, n: int) -> tuple[Gpu, ...]:
        free = self.free_gpus()
        where = (f" on NUMA node(s) {format_cpulist(self.r.numa_nodes)}"
                 if self.r.numa_nodes else "")
        chosen = self.choose(free, n, self.r.topology)
        if chosen is not None:
            return chosen
        message = f"requested {self.what(n, self.r.topology)}{where}; free: {describe_gpus(free)}"
        self.fail_or_warn(message, "gpu.count")
        # soft: relax the topology first, then the count
        order = TOPOLOGIES[: TOPOLOGIES.index(self.r.topology)][::-1]
        for topology in order:
            chosen = self.choose(free, n, topology)
            if chosen is not None:
                self.warnings.append(f"gave {self.what(n, topology)} instead")
                return chosen
        if not free:
            return ()
        chosen = self.choose(free, len(free), "any")
        self.warnings.append(f"gave {plural(len(free), 'GPU')} instead of {n}")
        return chosen or ()

    def named_gpus(self) -> tuple[tuple[Gpu, ...], MigInstance | None]:
        inv, r = self.node.inventory, self.r
        gpus: list[Gpu] = []
        mig: MigInstance | None = None
        # named GPUs are checked against numa.nodes by alignment, with a clearer message
        free_gpus = self.free_gpus(on_requested_nodes=False)
        free = {g.index for g in free_gpus}
        for name in r.gpu_ids:
            found_mig = inv.find_mig(name)
            if found_mig is not None:
                owner = self.held.migs.get(found_mig[1].uuid)
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
            elif not gpu.health.healthy:
                self.fail_or_warn(f"gpu.ids: GPU {gpu.index} is {gpu.health}; it is not "
                                  "handed to new containers", "gpu.ids")
            elif gpu.mig_enabled or gpu.mig_unknown:
                self.fail_or_warn(f"gpu.ids: GPU {gpu.index} is in MIG mode; ask for a MIG "
                                  "profile (gpu.mig) or name a MIG device", "gpu.ids")
            elif gpu.index not in free:
                holders = ", ".join(sorted(self.held.gpus.get(gpu.index, {}))) or "?"
                self.fail_or_warn(f"gpu.ids: GPU {gpu.index} is not available (held by "
                                  f"{holders}; free: {describe_gpus(free_gpus)})",
                                  "gpu.ids")
            elif mig is not None:
                self.fail_or_warn("gpu.ids: a MIG device cannot be combined with other GPUs",
                                  "gpu.ids")
            elif gpu not in gpus:
                gpus.append(gpu)
        if len(gpus) > 1 and mig is None and not fits(inv, gpus, self.r.topology):
            self.fail_or_warn(f"gpu.ids: GPUs {describe_gpus(gpus)} do not satisfy "
                              f"gpu.topology {self.r.topology}", "gpu.topology")
        return tuple(gpus), mig

    def pick_mig(self) -> tuple[tuple[Gpu, ...], MigInstance | None]:
        profile = self.r.mig_profile or ""
        nodes = set(self.r.numa_nodes) if self.r.numa_nodes else None
        free_by_gpu: list[tuple[Gpu, list[MigInstance]]] = []
        all_free: list[str] = []
        for g in self.node.inventory.gpus:
            if not g.mig_enabled or not g.health.healthy \
                    or (nodes is not None and g.numa_node not in nodes):
                continue
            free = [m for m in g.mig_instances if m.uuid not in self.held.migs]
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
        gpus, migs, unknown = resolve_runtime_devices(
            self.node.inventory, self.r.visible_devices, self.r.cdi_devices)
        for name in unknown:
            self.fail_or_warn(f"gpu.from runtime: {name!r} matches no GPU on this node "
                              f"(GPUs: {describe_gpus(self.node.inventory.gpus)})", "gpu.from")
        for g in gpus:
            exclusive = [o for o, k in self.held.gpus.get(g.index, {}).items()
                         if k == EXCLUSIVE and o != self.r.owner]
            if exclusive:
                # the device plugin decided; report the double booking, do not refuse
                self.warnings.append(f"GPU {g.index} given by the runtime is also held "
                                     f"exclusively by {', '.join(exclusive)}")
        return gpus, migs[0] if len(migs) == 1 else None

    # --- CPUs -----------------------------------------------------------------------------

    def free_cores(self, node_id: int) -> list[frozenset[int]]:
        return self.node.free_cores(node_id, self.held.exclusive_cpus)

    def pick_cpus(self, n: int, align_nodes: Sequence[int]) -> frozenset[int]:
        if n <= 0:
            return frozenset()
        if align_nodes:
            cores = [c for node in align_nodes for c in reversed(self.free_cores(node))]
            where = f"NUMA node(s) {format_cpulist(align_nodes)}"
        else:
            cores = self.best_node_cores(n)
            where = "this node"
        taken = take_cores(cores, n)
        if taken is not None:
            return taken
        free = frozenset().union(*cores) if cores else frozenset()
        self.fail_or_warn(f"requested {n} exclusive CPUs on {where}; free whole cores there: "
                          f"{len(free)} CPUs ({format_cpulist(free) or 'none'})",
                          "cpu.exclusive")
        # soft: complete from the nearest other nodes
        rest = [c for node in self.nearest_nodes(align_nodes)
                for c in reversed(self.free_cores(node))]
        got = take_cores(cores + rest, n)
        if got is None:
            got = frozenset().union(*(cores + rest)) if cores + rest else frozenset()
        self.warnings.append(f"gave {len(got)} exclusive CPUs ({format_cpulist(got) or 'none'})")
        return got

    def best_node_cores(self, n: int) -> list[frozenset[int]]:
        """Cores of the best single node for n CPUs: no GPUs there first, then the fewest
        free cores that still fit; else cores across nodes, fullest nodes first."""
        free = {node.id: self.free_cores(node.id) for node in self.node.topology.nodes}
        fitting = [nid for nid, cores in free.items() if sum(map(len, cores)) >= n]
        if fitting:
            best = min(fitting, key=lambda nid: (nid in self.node.gpu_nodes, len(free[nid]), nid))
            return list(reversed(free[best]))
        order = sorted(free, key=lambda nid: (-len(free[nid]), nid))
        return [c for nid in order for c in reversed(free[nid])]

    def nearest_nodes(self, nodes: Sequence[int]) -> list[int]:
        topo = self.node.topology
        others = [n for n in topo.nodes if n.id not in set(nodes)]
        if not nodes:
            return [n.id for n in others]
        home = topo.node(nodes[0])
        return [n.id for n in sorted(others, key=lambda o: (home.distances.get(o.id, 255), o.id))]


def take_cores(cores: Sequence[frozenset[int]], n: int) -> frozenset[int] | None:
    taken: set[int] = set()
    for core in cores:
        if len(taken) >= n:
            break
        taken |= core
    return frozenset(taken) if len(taken) >= n else None
