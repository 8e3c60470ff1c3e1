"""The Allocator: which container holds which GPU, MIG device and exclusive CPU on this node.

One `Allocator` per node keeps the ownership tables (GPU -> holders, MIG device ->
holders, exclusive CPU -> owner) under one lock, so two containers can never hold the
same exclusive CPU, whatever the interleaving of allocate, restore and release.

GPUs are never chosen here: a container holds exactly what its device plugin granted
(nri_plugin.plan.runtime_gpus), shared or not, so that status and metrics see every
holder; two holders of one GPU are the kubelet's doing and are reported, not refused
(nri_plugin.plugin.registry). Records written when nri-sla chose GPUs (GPUs nri-sla chose) are
restored the same way: those containers keep them until they end.

The placement itself is `best_fit.choose_placement`, a pure function of the node layout,
a `Holdings` snapshot taken under the lock and the request; the allocator commits its
answer. Exclusive CPUs are exactly the count granted, as logical CPUs (whole cores while
one fits, then single SMT threads; whole cores only under `cpu.exclusive-full-cores`),
taken from the GPUs' node, else the requested nodes, else the best-fitting node without
GPUs; highest cores first because CPU 0 and its neighbours carry most kernel
housekeeping and IRQ work.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from nri_plugin.plan.best_fit import choose_placement, validate_request
from nri_plugin.plan.errors import PlacementError
from nri_plugin.plan.placement_values import (
    GRANTED,
    CpuFloor,
    Holdings,
    NodeLayout,
    Placement,
    PlacementRequest,
    describe_gpus,
)
from nri_plugin.topology.cpulist import format_cpulist, parse_cpulist
from nri_plugin.topology.cpus import Topology
from nri_plugin.topology.errors import CpuListError
from nri_plugin.topology.gpus import Gpu, GpuInventory, MigInstance
from nri_plugin.value import Frozen, replace

try:
    # threading.RLock is this C lock wherever the C module has one; `threading` itself
    # (weakrefs, the thread registry) is one more import on an OCI hook's cold run.
    from _thread import RLock
except ImportError:  # pragma: no cover - other interpreters
    from threading import RLock

TYPE_CHECKING = False  # `typing` costs the OCI hook start-up time; only checkers need it
if TYPE_CHECKING:
    from typing import Any


class InventoryChange(Frozen):
    """What a rescan found: GPUs gone (with who holds each), GPUs new to the node, and
    vanished GPUs that are listed again while still held."""

    vanished: tuple[tuple[Gpu, tuple[str, ...]], ...] = ()
    appeared: tuple[Gpu, ...] = ()
    back: tuple[Gpu, ...] = ()


class Allocator:
    """Node-wide GPU / MIG / exclusive-CPU ownership. All public methods are thread-safe."""

    def __init__(
        self,
        topology: Topology,
        inventory: GpuInventory,
        reserved_cpus: Iterable[int] = frozenset(),
    ) -> None:
        self._reserved = frozenset(reserved_cpus)
        self.layout = NodeLayout.of(topology, inventory, self._reserved)
        self._listed = frozenset(g.identity for g in inventory.gpus)
        self._lock = RLock()
        self._gpu_holders: dict[int, dict[str, str]] = {}  # gpu index -> owner -> kind
        # GPUs a rescan no longer lists while containers held them (by Gpu.identity):
        # still theirs, never in the layout, so never chosen; kept until a rescan or
        # restore finds them unheld (prune_missing) or listed again.
        self._missing: dict[str, Gpu] = {}
        self._missing_holders: dict[str, dict[str, str]] = {}  # identity -> owner -> kind
        self._known: GpuInventory | None = None  # known_inventory() until they change
        self._mig_holders: dict[str, dict[str, str]] = {}  # MIG uuid -> owner -> kind
        self._cpu_owner: dict[int, str] = {}  # exclusive CPU -> owner
        self._snapshot: Holdings | None = None  # holdings() until the next change
        self._placements: dict[str, Placement] = {}
        # Bumped whenever some container's cpuset may have moved: a placement with CPUs
        # committed or released, exclusive CPUs given back, a new layout. The CPU pool
        # re-checks every member only when it moved (nri_plugin.plan.cpupool).
        self._cpu_generation = 0

    # --- queries --------------------------------------------------------------------------

    @property
    def topology(self) -> Topology:
        return self.layout.topology

    @property
    def inventory(self) -> GpuInventory:
        return self.layout.inventory

    def holdings(self) -> Holdings:
        """A snapshot of who holds what; later changes do not show in it. Copied once per
        change, not per placement choice (a refusal then costs no copy at all)."""
        with self._lock:
            if self._snapshot is None:
                self._snapshot = Holdings(
                    gpus={i: dict(h) for i, h in self._gpu_holders.items() if h},
                    migs={u: dict(h) for u, h in self._mig_holders.items() if h},
                    exclusive_cpus=frozenset(self._cpu_owner),
                )
            return self._snapshot

    def _holdings_but(self, owner: str) -> Holdings:
        """holdings() as if `owner` held nothing (under the lock)."""
        if owner not in self._placements:
            return self.holdings()
        return Holdings(
            gpus={
                i: {o: k for o, k in h.items() if o != owner}
                for i, h in self._gpu_holders.items()
                if h.keys() - {owner}
            },
            migs={
                u: {o: k for o, k in h.items() if o != owner}
                for u, h in self._mig_holders.items()
                if h.keys() - {owner}
            },
            exclusive_cpus=frozenset(c for c, o in self._cpu_owner.items() if o != owner),
        )

    # These two read one attribute or one dict entry, which the GIL makes atomic: no lock
    # (they run several times per CreateContainer and per synchronized container).
    @property
    def cpu_generation(self) -> int:
        return self._cpu_generation

    def placement_of(self, owner: str) -> Placement | None:
        return self._placements.get(owner)

    def owners(self) -> tuple[str, ...]:
        with self._lock:
            return tuple(self._placements)

    def gpus_in_use(self) -> dict[int, tuple[str, ...]]:
        """GPU index -> its holders (owners), for metrics; MIG devices by parent index."""
        with self._lock:
            used = {i: set(h) for i, h in self._gpu_holders.items() if h}
            for uuid, holders in self._mig_holders.items():
                found = self.inventory.find_mig(uuid)
                if found and holders:
                    used.setdefault(found[0].index, set()).update(holders)
            return {i: tuple(sorted(h)) for i, h in used.items()}

    def missing_gpus(self) -> dict[str, tuple[str, ...]]:
        """Held GPUs the inventory no longer lists (and held MIG devices gone with their
        GPU): their identity (or MIG uuid) -> holders."""
        with self._lock:
            missing = {key: tuple(sorted(h)) for key, h in self._missing_holders.items() if h}
            for uuid, holders in self._mig_holders.items():
                if holders and self.inventory.find_mig(uuid) is None:
                    missing[uuid] = tuple(sorted(holders))
            return missing

    def known_inventory(self) -> GpuInventory:
        """The GPUs a record may name: the inventory's and the vanished ones still known
        (listed first, so that an index names a GPU of the inventory)."""
        with self._lock:
            if not self._missing:
                return self.inventory
            if self._known is None:  # one per change: restore asks for every record
                self._known = GpuInventory(
                    (*self._missing.values(), *self.inventory.gpus),
                    self.inventory.source,
                    self.inventory.degraded_reason,
                )
            return self._known

    def migs_in_use(self) -> dict[str, tuple[str, ...]]:
        """MIG uuid -> its holders."""
        with self._lock:
            return {u: tuple(sorted(h)) for u, h in self._mig_holders.items() if h}

    def exclusive_cpus_in_use(self) -> dict[int, str]:
        with self._lock:
            return dict(self._cpu_owner)

    def shared_cpus(self) -> frozenset[int]:
        """Online CPUs minus reserved minus every exclusive CPU: the pool that other SLA
        containers' cpusets use."""
        with self._lock:
            return self.topology.online - self.layout.reserved - self._cpu_owner.keys()

    def current_cpus(self, owner: str) -> frozenset[int]:
        """An aligned container's cpuset recomputed now: its nodes' CPUs minus what other
        containers took as exclusive since (the planner pushes it as an update)."""
        with self._lock:
            p = self._placements.get(owner)
            if p is None or not p.cpus:
                return frozenset()
            if p.exclusive_cpus:
                return p.exclusive_cpus
            others = [c for c, o in self._cpu_owner.items() if o != owner]
            return self.layout.node_cpus(p.mems or self.layout.nodes_of_cpus(p.cpus), others)

    # --- changes --------------------------------------------------------------------------

    def release(self, owner: str) -> bool:
        """Free everything `owner` holds; False when it held nothing."""
        with self._lock:
            placement = self._placements.pop(owner, None)
            if placement is None:  # every holding is committed with its placement
                return False
            self._snapshot = None
            if placement.cpus or placement.exclusive_cpus:
                self._cpu_generation += 1
            for holders in self._gpu_holders.values():
                holders.pop(owner, None)
            for holders in self._missing_holders.values():
                holders.pop(owner, None)
            for uuid in [u for u, h in self._mig_holders.items() if owner in h]:
                del self._mig_holders[uuid][owner]
                if not self._mig_holders[uuid]:
                    del self._mig_holders[uuid]
            for cpu in [c for c, o in self._cpu_owner.items() if o == owner]:
                del self._cpu_owner[cpu]
            return True

    def choose(
        self, request: PlacementRequest, hard: bool = True, floors: Sequence[CpuFloor] = ()
    ) -> Placement:
        """Where `request` would be placed now, nothing taken (take() holds it). hard:
        exactly as asked or PlacementError; soft: the best available, each shortfall in
        `warnings`. `floors`: what its exclusive CPUs must leave to running containers
        (nri_plugin.plan.cpupool). What the owner holds already counts as free: a retried
        CreateContainer for the same owner replaces its old placement."""
        validate_request(request, self.topology)
        with self._lock:
            return choose_placement(
                self.layout, self._holdings_but(request.owner), request, hard, floors
            )

    def allocate(
        self, request: PlacementRequest, hard: bool = True, floors: Sequence[CpuFloor] = ()
    ) -> Placement:
        """choose() and take() in one step, under one lock."""
        with self._lock:
            placement = self.choose(request, hard, floors)
            self.take(request.owner, placement)
            return placement

    def take(self, owner: str, placement: Placement) -> None:
        """`owner` holds `placement` (in place of what it held). Raises PlacementError
        when its exclusive CPUs are another owner's; the state is then unchanged. GPUs are
        never refused: the container can open them whoever else holds them too."""
        with self._lock:
            self._check_free(owner, placement)
            self.release(owner)
            self._commit(owner, placement)

    def shrink_exclusive(
        self, owner: str, at_most: int, full_cores: bool = False
    ) -> frozenset[int]:
        """Give back `owner`'s exclusive CPUs beyond `at_most` (its request shrank),
        counted as logical CPUs: the highest cores are kept, as they were taken first, and
        a core is split rather than kept whole beyond the count (`full_cores`: whole cores
        only, so fewer when `at_most` does not fill them; never more). An aligned
        container keeps its NUMA nodes' shared CPUs, any other one joins the shared pool.
        Returns the CPUs given back."""
        with self._lock:
            p = self._placements.get(owner)
            if p is None or len(p.exclusive_cpus) <= at_most:
                return frozenset()
            cores = sorted(
                {self.topology.core_of(c) for c in p.exclusive_cpus}, key=min, reverse=True
            )
            kept: list[int] = []
            for core in cores:
                mine = sorted(core & p.exclusive_cpus, reverse=True)
                if full_cores and len(kept) + len(mine) > at_most:
                    break
                kept += mine[: at_most - len(kept)]
            given = p.exclusive_cpus.difference(kept)
            for cpu in given:
                del self._cpu_owner[cpu]
            self._snapshot = None
            self._cpu_generation += 1
            cpus = frozenset(kept)
            if not cpus and p.aligned:
                cpus = self.layout.node_cpus(
                    p.mems or self.layout.nodes_of_cpus(p.cpus), self._cpu_owner
                )
            self._placements[owner] = replace(p, exclusive_cpus=frozenset(kept), cpus=cpus)
            return given

    def restore(self, owner: str, record: Mapping[str, Any]) -> Placement:
        """Take what a `to_record()` names for `owner`: what it held (plugin restart), or
        what its plan chose (the admission of a new container).

        Raises PlacementError when the record names unknown GPUs or exclusive CPUs another
        owner already holds; the state is then unchanged. GPUs are never refused: the
        container can open them whoever else holds them too.
        """
        placement = self._from_record(record)
        self.take(owner, placement)
        return placement

    def rescan(self, inventory: GpuInventory) -> InventoryChange:
        """Take a fresh read of the node's GPUs while containers hold some.

        Indices follow the new read (NVML and sysfs renumber when a GPU leaves the bus);
        every holding follows its GPU by identity. A held GPU that is no longer listed
        stays its holders' (their containers run on) and is never offered; one listed
        anew is offered at once; a vanished one listed again is offered once released.
        """
        with self._lock:
            before = {g.identity: g for g in self.inventory.gpus}
            now = {g.identity: g for g in inventory.gpus}
            was_missing = set(self._missing)
            for owner, p in list(self._placements.items()):
                migs = tuple(
                    inventory.find_mig(m.uuid) or (now.get(g.identity, g), m) for g, m in p.migs
                )
                gpus = tuple(now.get(g.identity, g) for g in p.gpus)
                self._placements[owner] = replace(p, gpus=gpus, migs=migs)
            self.layout = NodeLayout.of(self.topology, inventory, self._reserved)
            self._cpu_generation += 1
            self._listed = frozenset(now)
            self._gpu_holders, self._missing_holders = {}, {}
            self._missing = {k: g for k, g in self._missing.items() if k not in now}
            self._known = None
            for owner, p in self._placements.items():
                self._hold_gpus(owner, p)
            self._snapshot = None
            vanished = tuple(
                (g, tuple(sorted(self._missing_holders.get(k, {}))))
                for k, g in before.items()
                if k not in now
            )
            self.prune_missing()
            return InventoryChange(
                vanished=vanished,
                appeared=tuple(
                    g for k, g in now.items() if k not in before and k not in was_missing
                ),
                back=tuple(g for k, g in now.items() if k in was_missing),
            )

    def prune_missing(self) -> None:
        """Forget vanished GPUs nobody holds any more (released, or not restored)."""
        with self._lock:
            for key in [k for k, h in self._missing_holders.items() if not h]:
                del self._missing_holders[key]
            for key in [k for k in self._missing if k not in self._missing_holders]:
                del self._missing[key]
                self._known = None

    # --- internals ------------------------------------------------------------------------

    def _hold_gpus(self, owner: str, p: Placement) -> None:
        """Record `owner` as a holder of `p`'s whole GPUs (by index while the inventory
        lists one, by identity among the missing otherwise) and of its MIG devices."""
        for g in p.gpus:
            key = g.identity
            if key in self._listed:
                self._gpu_holders.setdefault(g.index, {})[owner] = GRANTED
            else:
                if key not in self._missing:
                    self._missing[key] = g
                    self._known = None
                self._missing_holders.setdefault(key, {})[owner] = GRANTED
        for _, m in p.migs:
            self._mig_holders.setdefault(m.uuid, {})[owner] = GRANTED

    def _commit(self, owner: str, p: Placement) -> None:
        self._snapshot = None
        if p.cpus or p.exclusive_cpus:
            self._cpu_generation += 1
        self._hold_gpus(owner, p)
        for cpu in p.exclusive_cpus:
            self._cpu_owner[cpu] = owner
        self._placements[owner] = p

    def _check_free(self, owner: str, p: Placement) -> None:
        taken = {
            c: self._cpu_owner[c]
            for c in p.exclusive_cpus
            if self._cpu_owner.get(c) not in (None, owner)
        }
        if taken:
            others = ", ".join(sorted(set(taken.values())))
            raise PlacementError(
                f"exclusive CPUs {format_cpulist(taken)} are already held by {others}",
                field="cpu.exclusive",
            )

    def _from_record(self, record: Mapping[str, Any]) -> Placement:
        if not isinstance(record, Mapping):
            raise PlacementError(f"placement record must be a mapping, got {record!r}")

        def cpus(key: str) -> frozenset[int]:
            try:
                return parse_cpulist(str(record.get(key, "")))
            except CpuListError as exc:
                raise PlacementError(f"placement record: {key}: {exc}") from None

        migs: list[tuple[Gpu, MigInstance]] = []
        gpus: list[Gpu] = []
        known = self.known_inventory()
        # "mig": one MIG device, as records written when nri-sla chose GPUs name it
        mig_refs = [*record.get("migs", ()), *([record["mig"]] if "mig" in record else [])]
        for ref in mig_refs:
            found = known.find_mig(str(ref))
            if found is None:
                raise PlacementError(f"placement record: MIG device {ref} is not on this node")
            migs.append(found)
        for ref in record.get("gpus", ()):
            gpu = known.find(str(ref))
            if gpu is None:
                raise PlacementError(
                    f"placement record: GPU {ref} is not on this node "
                    f"(GPUs: {describe_gpus(self.inventory.gpus)})"
                )
            gpus.append(gpu)
        return Placement(
            gpus=tuple(gpus),
            migs=tuple(migs),
            exclusive_cpus=cpus("exclusive"),
            cpus=cpus("cpus"),
            mems=cpus("mems"),
            aligned=bool(record.get("aligned", False)),
        )
