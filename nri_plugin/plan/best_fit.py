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
from nri_plugin.plan.errors import PlacementError
from nri_plugin.plan.placement_values import (
    TOPOLOGIES,
    CpuFloor,
    Holdings,
    NodeLayout,
    Placement,
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
        raise PlacementError(
            f"gpu.topology: {r.topology!r} is not one of {', '.join(TOPOLOGIES)}",
            field="gpu.topology",
        )
    if r.gpu_count is not None and (isinstance(r.gpu_count, bool) or r.gpu_count < 0):
        raise PlacementError(
            f"gpu.count: {r.gpu_count!r} must be a whole number >= 0", field="gpu.count"
        )
    if r.exclusive_cpus is not None and r.exclusive_cpus < 0:
        raise PlacementError(
            f"cpu.exclusive: {r.exclusive_cpus!r} must be >= 0", field="cpu.exclusive"
        )
    if r.mig_profile is not None and (r.gpu_count or 1) > 1:
        raise PlacementError(
            f"gpu.mig: one MIG instance per container; gpu.count "
            f"{r.gpu_count} is not allowed with gpu.mig",
            field="gpu.mig",
        )
    for n in r.numa_nodes or ():
        if not topology.has_node(n):
            raise PlacementError(
                f"numa.nodes: node {n} does not exist (nodes: {topology.describe_nodes()})",
                field="numa.nodes",
            )


# Why an exclusive request that free cores could meet is not met; it names only the
# node policy, never the containers it protects.
SQUEEZE = (
    "taking them would leave running containers fewer CPUs than their CPU requests "
    "(node policy: exclusive CPUs never shrink another container's cpuset below its "
    "request)"
)


def choose_placement(
    layout: NodeLayout,
    holdings: Holdings,
    request: PlacementRequest,
    hard: bool,
    floors: Sequence[CpuFloor] = (),
) -> Placement:
    """The best placement for a valid `request` (see validate_request). hard: exactly as
    asked or PlacementError; soft: the best available, each shortfall in `warnings`.
    `floors`: what exclusive CPUs must leave to the running containers (never taken)."""
    return _BestFit(layout, holdings, request, hard, floors).run()


class _BestFit:
    """The working state of one choose_placement() call: the warnings gathered so far."""

    def __init__(
        self,
        layout: NodeLayout,
        holdings: Holdings,
        request: PlacementRequest,
        hard: bool,
        floors: Sequence[CpuFloor] = (),
    ) -> None:
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
            self.fail_or_warn(
                f"gpu.align: the NUMA node of {describe_gpus(gpus)} is unknown "
                "(the kernel reports -1); cpus/mems are not aligned",
                "gpu.align",
            )
        if gpus and r.align and gpu_nodes:
            align_nodes = gpu_nodes
            if r.numa_nodes and not set(gpu_nodes) <= set(r.numa_nodes):
                self.fail_or_warn(
                    f"numa.nodes {format_cpulist(r.numa_nodes)} does not hold the granted "
                    f"GPUs ({describe_gpus(gpus)}); cpus/mems follow the GPUs",
                    "numa.nodes",
                )
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
                _tell_operator(
                    "no shared CPU left for %s on NUMA node(s) %s: all reserved or exclusive",
                    r.owner or "a container",
                    format_cpulist(align_nodes),
                )
                self.fail_or_warn(
                    f"NUMA node(s) {format_cpulist(align_nodes)} have no CPU "
                    "this container can be given now",
                    "numa.nodes",
                )
            elif len(cpus) < r.cpus_needed:
                self.fail_or_warn(
                    f"the CPU request needs {r.cpus_needed} whole CPUs; NUMA "
                    f"node(s) {format_cpulist(align_nodes)} cannot give this "
                    "container that many outside exclusive sets",
                    "numa.nodes",
                )
        else:
            cpus, mem_nodes = frozenset(), set()
        mems = frozenset(mem_nodes) & self.node.mem_nodes
        return Placement(
            gpus=r.granted_gpus,
            migs=r.granted_migs,
            exclusive_cpus=exclusive,
            cpus=cpus,
            mems=mems,
            warnings=tuple(self.warnings),
            aligned=bool(align_nodes),
        )

    # --- the grant against the SLA ---------------------------------------------------------

    def verify_grant(self, touched: Sequence[Gpu]) -> None:
        """Each gpu requirement the grant does not meet: a refusal (hard) or a warning."""
        r = self.r
        whole = [g for g in r.granted_gpus if not g.mig_enabled]
        migs = [m for _, m in r.granted_migs]
        granted = f"granted: {describe_grant(r.granted_gpus, migs)}"
        if r.gpu_count and len(whole) < r.gpu_count:
            self.fail_or_warn(
                f"gpu.count: asks for {plural(r.gpu_count, 'whole GPU')}; the "
                f"grant has {len(whole)} ({granted})",
                "gpu.count",
            )
        inventory = self.node.inventory
        for name in r.gpu_ids:
            found_mig = inventory.find_mig(name)
            gpu = inventory.find(name) if found_mig is None else None
            if found_mig is None and gpu is None:
                self.fail_or_warn(
                    f"gpu.ids: {name!r} names no GPU on this node ({granted})", "gpu.ids"
                )
            elif found_mig is not None and found_mig[1] not in migs:
                self.fail_or_warn(
                    f"gpu.ids: MIG device {name} is not granted to this container ({granted})",
                    "gpu.ids",
                )
            elif gpu is not None and gpu not in whole:
                self.fail_or_warn(
                    f"gpu.ids: GPU {name} is not granted to this container ({granted})", "gpu.ids"
                )
        if r.mig_profile is not None and r.mig_profile not in {m.profile for m in migs}:
            self.fail_or_warn(
                f"gpu.mig: asks for a MIG {r.mig_profile} device; none is granted ({granted})",
                "gpu.mig",
            )
        for gpu in touched:
            # The kubelet grants only what its device plugin calls healthy, but not every
            # device plugin watches XIDs: a GPU that needs a reset fails the SLA, one whose
            # facts NVML could not read this time only warns.
            if gpu.health.state == UNHEALTHY:
                self.fail_or_warn(
                    f"gpu: granted GPU {gpu.index} is {gpu.health} and needs a reset ({granted})",
                    "gpu",
                )
            elif not gpu.health.healthy:
                self.warnings.append(f"gpu: granted GPU {gpu.index} is {gpu.health}")
        if (
            len(touched) > 1
            and r.topology != "any"
            and not _gpu_selection().fits(inventory, touched, r.topology)
        ):
            lacks = (
                "are not all on one NUMA node"
                if r.topology == "numa"
                else "are not connected to each other over NVLink"
            )
            self.fail_or_warn(
                f"gpu.topology: {r.topology}: the granted GPUs {lacks} ({granted})", "gpu.topology"
            )

    # --- CPUs -----------------------------------------------------------------------------

    def free_parts(self, node_id: int) -> list[tuple[frozenset[int], bool]]:
        """`node_id`'s cores as (their CPUs in no exclusive set, whether that is the whole
        core), highest core first; a core with a reserved CPU is never one (its siblings
        share the housekeeping CPU's execution units). Full-cores nodes: whole cores only."""
        layout = self.node
        held, reserved = self.held.exclusive_cpus, layout.reserved
        parts = []
        for core in reversed(layout.node_cores.get(node_id, ())):
            if core & reserved:
                continue
            free = core - held if held else core
            if free and (len(free) == len(core) or not self.r.full_cores):
                parts.append((free, len(free) == len(core)))
        return parts

    def pick_cpus(self, n: int, align_nodes: Sequence[int]) -> frozenset[int]:
        if n <= 0:
            return frozenset()
        if align_nodes:
            parts = [p for node in align_nodes for p in self.free_parts(node)]
            where = f"NUMA node(s) {format_cpulist(align_nodes)}"
        else:
            parts = self.best_node_parts(n)
            where = "this node"
        taken = take_cpus(parts, n, self.budgets, self.r.full_cores)
        if len(taken) >= n:
            return taken
        unit = "whole cores" if self.r.full_cores else "CPUs"
        if len(take_cpus(parts, n, (), self.r.full_cores)) >= n:
            self.fail_or_warn(
                f"requested {n} exclusive CPUs on {where}; {SQUEEZE}", "cpu.exclusive"
            )
        else:
            free = frozenset().union(*(p for p, _ in parts))
            _tell_operator(
                "exclusive CPUs short for %s: %d asked on %s, free %s there: %d CPUs (%s)",
                self.r.owner or "a container",
                n,
                where,
                unit,
                len(free),
                format_cpulist(free) or "none",
            )
            self.fail_or_warn(
                f"requested {n} exclusive CPUs on {where}; not that many "
                f"{unit} can be given there now",
                "cpu.exclusive",
            )
        # soft: complete from the nearest other nodes
        rest = [p for node in self.nearest_nodes(align_nodes) for p in self.free_parts(node)]
        got = take_cpus(parts + rest, n, self.budgets, self.r.full_cores)
        self.warnings.append(f"gave {len(got)} exclusive CPUs ({format_cpulist(got) or 'none'})")
        return got

    def best_node_parts(self, n: int) -> list[tuple[frozenset[int], bool]]:
        """Free cores of the best single node for n CPUs: no GPUs there first, then the
        fewest free CPUs that still fit; else cores across nodes, fullest nodes first."""
        free = {node.id: self.free_parts(node.id) for node in self.node.topology.nodes}
        count = {nid: sum(len(p) for p, _ in parts) for nid, parts in free.items()}
        fitting = [
            nid
            for nid, parts in free.items()
            if count[nid] >= n and len(take_cpus(parts, n, self.budgets, self.r.full_cores)) >= n
        ]
        if fitting:
            best = min(fitting, key=lambda nid: (nid in self.node.gpu_nodes, count[nid], nid))
            return free[best]
        order = sorted(free, key=lambda nid: (-count[nid], nid))
        return [p for nid in order for p in free[nid]]

    def nearest_nodes(self, nodes: Sequence[int]) -> list[int]:
        topo = self.node.topology
        others = [n for n in topo.nodes if n.id not in set(nodes)]
        if not nodes:
            return [n.id for n in others]
        home = topo.node(nodes[0])
        return [n.id for n in sorted(others, key=lambda o: (home.distances.get(o.id, 255), o.id))]


def take_cpus(
    parts: Sequence[tuple[frozenset[int], bool]],
    n: int,
    budgets: Sequence[tuple[frozenset[int], int]] = (),
    whole_only: bool = False,
) -> frozenset[int]:
    """n CPUs (fewer when they run out), counted as Kubernetes counts them: logical CPUs,
    never rounded up to a whole core. `parts`: each core's free CPUs and whether that is
    the whole core, in order of preference. Whole cores first while one fits in what is
    left, then single CPUs, from cores already split first (a whole core is split last).
    `whole_only` (node policy cpu.exclusive-full-cores): whole cores alone. A CPU that
    would take more of a floor's CPUs than its budget allows is skipped."""
    left = [budget for _, budget in budgets]
    taken: set[int] = set()

    def take(cpus: frozenset[int]) -> None:
        costs = [len(cpus & floor) for floor, _ in budgets]
        if any(cost > left[i] for i, cost in enumerate(costs) if cost):
            return
        for i, cost in enumerate(costs):
            left[i] -= cost
        taken.update(cpus)

    for part, whole in parts:
        if whole and len(taken) + len(part) <= n:
            take(part)
    if whole_only:
        return frozenset(taken)
    split = [part for part, whole in parts if not whole] + [
        part for part, whole in parts if whole and not part & taken
    ]
    for part in split:
        for cpu in sorted(part, reverse=True):
            if len(taken) >= n:
                return frozenset(taken)
            take(frozenset((cpu,)))
    return frozenset(taken)
