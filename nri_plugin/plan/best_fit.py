"""One container's placement: its granted GPUs verified against the SLA, its exclusive
CPUs chosen best fit, and the cpus/mems aligned to the GPUs' NUMA nodes.

GPUs are never chosen here (the kubelet and its device plugin are the GPU accountant):
the SLA's gpu section is a requirement on the grant, and a grant that lacks it is
refused (hard) or warned about (soft), naming only this container's granted devices.

A pure function of the node layout, a snapshot of holdings and the request: it never
changes state, so the Allocator can run it under its lock and commit the answer, or drop
it when it fails.
"""

from __future__ import annotations

from collections.abc import Sequence

from nri_plugin.ops.corelog import CoreLogger
from nri_plugin.plan.placement_values import (
    TOPOLOGIES,
    CpuFloor,
    Holdings,
    NodeLayout,
    Placement,
    PlacementError,
    PlacementRequest,
    describe_gpus,
    describe_grant,
    plural,
)
from nri_plugin.topology.cpulist import format_cpulist
from nri_plugin.topology.cpus import Topology
from nri_plugin.topology.gpu_health import UNHEALTHY
from nri_plugin.topology.gpus import Gpu

_PLACEMENT_LOG = CoreLogger("nri_sla.placement")

TYPE_CHECKING = False  # only checkers need it
if TYPE_CHECKING:
    from types import ModuleType


def _tell_operator(message: str, *args: object) -> None:
    """The operator's picture of a shortfall (what is free where): the pod's message names
    only its own request, its grant and the node policy (docs/security.md, "What a tenant
    learns"). Through a CoreLogger: the OCI hook imports placement on every placement
    SLA's cold run and must stay light (tests/topology/test_cpus.py)."""
    _PLACEMENT_LOG.info(message, *args)


def _gpu_selection() -> ModuleType:
    """GPU selection (NVLink graphs, NUMA fits), imported for GPU placements only: a
    CPU/NUMA-only SLA, e.g. the OCI hook's first container of an SLA, skips it."""
    from nri_plugin.plan import gpu_selection

    return gpu_selection


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


# Why an exclusive request that free cores could meet is not met; it names only the
# node policy, never the containers it protects.
SQUEEZE = ("taking them would leave running containers fewer CPUs than their CPU requests "
           "(node policy: exclusive CPUs never shrink another container's cpuset below its "
           "request)")


def choose_placement(layout: NodeLayout, holdings: Holdings, request: PlacementRequest,
                     hard: bool, floors: Sequence[CpuFloor] = ()) -> Placement:
    """The best placement for a valid `request` (see validate_request). hard: exactly as
    asked or PlacementError; soft: the best available, each shortfall in `warnings`.
    `floors`: what exclusive CPUs must leave to the running containers (never taken)."""
    return _BestFit(layout, holdings, request, hard, floors).run()


class _BestFit:
    """The working state of one choose_placement() call: the warnings gathered so far."""

    def __init__(self, layout: NodeLayout, holdings: Holdings, request: PlacementRequest,
                 hard: bool, floors: Sequence[CpuFloor] = ()) -> None:
        self.node = layout
        self.held = holdings
        self.r = request
        self.hard = hard
        self.warnings: list[str] = []
        # Per floor: its CPUs not reserved or exclusive now, and how many of them exclusive
        # CPUs may still take (negative: none, the floor is already short).
        blocked = layout.reserved | holdings.exclusive_cpus
        self.budgets = [(f.cpus - blocked, len(f.cpus - blocked) - f.need) for f in floors]

    def fail_or_warn(self, message: str, field: str) -> None:
        if self.hard:
            raise PlacementError(message, field=field)
        self.warnings.append(message)

    def run(self) -> Placement:
        r = self.r
        placement = Placement(gpus=r.granted_gpus, migs=r.granted_migs)
        gpus = placement.touched
        if r.wants_gpu:
            self.verify_grant(gpus)
        gpu_nodes = _gpu_selection().ordered_nodes(gpus, self.node.topology) if gpus else ()
        align_nodes: tuple[int, ...] = ()
        if gpus and r.align and not gpu_nodes:
            self.fail_or_warn(f"gpu.align: the NUMA node of {describe_gpus(gpus)} is unknown "
                              "(the kernel reports -1); cpus/mems are not aligned", "gpu.align")
        if gpus and r.align and gpu_nodes:
            align_nodes = gpu_nodes
            if r.numa_nodes and not set(gpu_nodes) <= set(r.numa_nodes):
                self.fail_or_warn(
                    f"numa.nodes {format_cpulist(r.numa_nodes)} does not hold the granted "
                    f"GPUs ({describe_gpus(gpus)}); cpus/mems follow the GPUs", "numa.nodes")
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
                _tell_operator("no shared CPU left for %s on NUMA node(s) %s: all reserved or "
                         "exclusive", r.owner or "a container", format_cpulist(align_nodes))
                self.fail_or_warn(f"NUMA node(s) {format_cpulist(align_nodes)} have no CPU "
                                  "this container can be given now", "numa.nodes")
            elif len(cpus) < r.cpus_needed:
                self.fail_or_warn(f"the CPU request needs {r.cpus_needed} whole CPUs; NUMA "
                                  f"node(s) {format_cpulist(align_nodes)} cannot give this "
                                  "container that many outside exclusive sets", "numa.nodes")
        else:
            cpus, mem_nodes = frozenset(), set()
        mems = frozenset(mem_nodes) & self.node.mem_nodes
        return Placement(gpus=r.granted_gpus, migs=r.granted_migs, exclusive_cpus=exclusive,
                         cpus=cpus, mems=mems, warnings=tuple(self.warnings),
                         aligned=bool(align_nodes))

    # --- the grant against the SLA ---------------------------------------------------------

    def verify_grant(self, touched: Sequence[Gpu]) -> None:
        """Each gpu requirement the grant does not meet: a refusal (hard) or a warning."""
        r = self.r
        whole = [g for g in r.granted_gpus if not g.mig_enabled]
        migs = [m for _, m in r.granted_migs]
        granted = f"granted: {describe_grant(r.granted_gpus, migs)}"
        if r.gpu_count and len(whole) < r.gpu_count:
            self.fail_or_warn(f"gpu.count: asks for {plural(r.gpu_count, 'whole GPU')}; the "
                              f"grant has {len(whole)} ({granted})", "gpu.count")
        inventory = self.node.inventory
        for name in r.gpu_ids:
            found_mig = inventory.find_mig(name)
            gpu = inventory.find(name) if found_mig is None else None
            if found_mig is None and gpu is None:
                self.fail_or_warn(f"gpu.ids: {name!r} names no GPU on this node ({granted})",
                                  "gpu.ids")
            elif found_mig is not None and found_mig[1] not in migs:
                self.fail_or_warn(f"gpu.ids: MIG device {name} is not granted to this "
                                  f"container ({granted})", "gpu.ids")
            elif gpu is not None and gpu not in whole:
                self.fail_or_warn(f"gpu.ids: GPU {name} is not granted to this container "
                                  f"({granted})", "gpu.ids")
        if r.mig_profile is not None and r.mig_profile not in {m.profile for m in migs}:
            self.fail_or_warn(f"gpu.mig: asks for a MIG {r.mig_profile} device; none is "
                              f"granted ({granted})", "gpu.mig")
        for gpu in touched:
            # The kubelet grants only what its device plugin calls healthy, but not every
            # device plugin watches XIDs: a GPU that needs a reset fails the SLA, one whose
            # facts NVML could not read this time only warns.
            if gpu.health.state == UNHEALTHY:
                self.fail_or_warn(f"gpu: granted GPU {gpu.index} is {gpu.health} and needs a "
                                  f"reset ({granted})", "gpu")
            elif not gpu.health.healthy:
                self.warnings.append(f"gpu: granted GPU {gpu.index} is {gpu.health}")
        if len(touched) > 1 and r.topology != "any" and not _gpu_selection().fits(
                inventory, touched, r.topology):
            lacks = ("are not all on one NUMA node" if r.topology == "numa"
                     else "are not connected to each other over NVLink")
            self.fail_or_warn(f"gpu.topology: {r.topology}: the granted GPUs {lacks} "
                              f"({granted})", "gpu.topology")

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
        taken = take_cores(cores, n, self.budgets)
        if len(taken) >= n:
            return taken
        if len(take_cores(cores, n)) >= n:
            self.fail_or_warn(f"requested {n} exclusive CPUs on {where}; {SQUEEZE}",
                              "cpu.exclusive")
        else:
            free = frozenset().union(*cores) if cores else frozenset()
            _tell_operator("exclusive CPUs short for %s: %d asked on %s, free whole cores there: "
                     "%d CPUs (%s)", self.r.owner or "a container", n, where, len(free),
                     format_cpulist(free) or "none")
            self.fail_or_warn(f"requested {n} exclusive CPUs on {where}; not that many whole "
                              "cores can be given there now", "cpu.exclusive")
        # soft: complete from the nearest other nodes
        rest = [c for node in self.nearest_nodes(align_nodes)
                for c in reversed(self.free_cores(node))]
        got = take_cores(cores + rest, n, self.budgets)
        self.warnings.append(f"gave {len(got)} exclusive CPUs ({format_cpulist(got) or 'none'})")
        return got

    def best_node_cores(self, n: int) -> list[frozenset[int]]:
        """Cores of the best single node for n CPUs: no GPUs there first, then the fewest
        free cores that still fit; else cores across nodes, fullest nodes first."""
        free = {node.id: self.free_cores(node.id) for node in self.node.topology.nodes}
        fitting = [nid for nid, cores in free.items()
                   if len(take_cores(list(reversed(cores)), n, self.budgets)) >= n]
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


def take_cores(cores: Sequence[frozenset[int]], n: int,
               budgets: Sequence[tuple[frozenset[int], int]] = ()) -> frozenset[int]:
    """Whole cores, in order, until there are at least n CPUs (fewer when the cores run
    out); a core that would take more of a floor's CPUs than its budget allows is
    skipped."""
    left = [budget for _, budget in budgets]
    taken: set[int] = set()
    for core in cores:
        if len(taken) >= n:
            break
        costs = [len(core & cpus) for cpus, _ in budgets]
        if any(cost > left[i] for i, cost in enumerate(costs) if cost):
            continue
        left = [budget - cost for budget, cost in zip(left, costs, strict=True)]
        taken |= core
    return frozenset(taken)
