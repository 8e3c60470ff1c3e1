"""The node's CPU pool: the cpuset every container the runtime reports should have.

Each container, with or without an SLA, is one of four kinds:

* exclusive: its own CPUs, which the Allocator gave it and no other cpuset holds (and
  the shared pool too when they are fewer than its request: soft mode clamped them);
* aligned: the CPUs of its NUMA nodes, less the reserved and the exclusive ones;
* shared: every online CPU less the exclusive ones (a container without an SLA, or one
  whose SLA places nothing);
* pinned: created with a cpuset someone else chose (the kubelet's static CPU manager):
  left as it is, and none of its CPUs ever becomes exclusive.

The pool is the truth nri-sla re-asserts: `changes` says which containers' cpusets must
move since they were last told, and the plugin sends those through UpdateContainers: in
an answer to a create, stop or resize only those on CPUs that became exclusive (found in
proportion to them); CPUs given back reach the others at the drift pass or a Synchronize
(`changes(widen=True)`), off any container's own request. A container's cpuset never
shrinks below what its CPU request needs: `floors` are what an exclusive request must
leave to the others (the Allocator refuses or clamps the request instead of squeezing
them).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache

from nri_plugin.plan.allocator import Allocator
from nri_plugin.plan.placement_values import CpuFloor, cpus_needed
from nri_plugin.topology.cpulist import NO_CPUS, parse_cpulist
from nri_plugin.topology.errors import CpuListError

__all__ = ["CpuPool", "PoolMember", "ReportedCpusets", "cpus_needed", "unpinned_member"]


@dataclass(frozen=True, slots=True)
class PoolMember:
    """One container as the pool sees it: the whole CPUs its request needs, and the
    cpuset someone else pinned it to (empty: nri-sla's to set)."""

    need: int
    pinned: frozenset[int] = NO_CPUS


@lru_cache(maxsize=256)
def unpinned_member(request_millis: int | None) -> PoolMember:
    """The member for a container nri-sla sets the cpuset of, with this CPU request: one
    shared (frozen) value per request instead of a new one per CreateContainer (a frozen
    dataclass sets each field through object.__setattr__); replicas ask the same."""
    return PoolMember(cpus_needed(request_millis))


class CpuPool:
    """Every live container's place in the node's CPUs. The exclusive sets and the
    aligned nodes are the Allocator's; the members (and what each was last told) are
    the pool's. Used from the plugin's event loop only.

    Like the Allocator's holdings, the pool's books by container id are a ledger, not
    container state (which is the plugin registry's): what each member needs and the
    cpuset the runtime was last sent for it, the one thing `changes` compares against.
    That cpuset is kept here, not in the registry entry's `current_plan`: every
    container has one, with or without an SLA (only SLA containers have a plan); a
    move sent through `changes` updates it, while the plan keeps the cpuset it was
    created with (the drift watch asks `current` for the one in force); and for most
    members it is the shared pool's own set object, one for all of them instead of a
    copy each. The node's release clears it with the member (`leave`)."""

    def __init__(self, allocator: Allocator) -> None:
        self.allocator = allocator
        self._members: dict[str, PoolMember] = {}
        self._told: dict[str, frozenset[int]] = {}  # the cpuset each was last given
        # The members by the cpuset they were told (most share the shared pool's one set
        # object): whom CPUs that became exclusive reach, found without a look at the
        # others (`changes`).
        self._groups: dict[frozenset[int], set[str]] = {}
        # `changes` looks at members only when the allocator's CPUs moved since the last
        # time (its cpu_generation); otherwise only at the members joined (and not
        # answered) since (a CreateContainer without exclusive CPUs then costs nothing per
        # live container). `_narrowed`: the generation of the last look, with the
        # exclusive CPUs (and owners) it saw; `_widened`: that of the last look at all.
        self._narrowed: int | None = None
        self._widened: int | None = None
        self._seen: dict[int, str] = {}
        self._unchecked: set[str] = set()
        # For `floors` without a look at every member: how many unpinned members need
        # each count of CPUs, and the pinned ones.
        self._needs: dict[int, int] = {}
        self._pinned: set[str] = set()
        # The shared pool as of an allocator generation: one set object, which every
        # member told it shares (most of them), instead of one copy per member.
        self._shared: tuple[int, frozenset[int]] | None = None

    def __len__(self) -> int:
        return len(self._members)

    def join(self, owner: str, member: PoolMember, told: frozenset[int] | None = None) -> None:
        """`owner` is a live container (again); `told`: the cpuset it has now, when known."""
        self._count(self._members.get(owner), -1)
        self._members[owner] = member
        self._count(member, 1)
        if member.pinned:
            self._pinned.add(owner)
        else:
            self._pinned.discard(owner)
        self._unchecked.add(owner)
        if told is not None:
            self._tell(owner, told)

    def member(self, owner: str) -> PoolMember | None:
        return self._members.get(owner)

    def leave(self, owner: str) -> None:
        self._count(self._members.pop(owner, None), -1)
        self._pinned.discard(owner)
        self._forget(owner)
        self._unchecked.discard(owner)

    def clear(self) -> None:
        self._members.clear()
        self._needs.clear()
        self._pinned.clear()
        self._told.clear()
        self._groups.clear()
        self._unchecked.clear()
        self._narrowed = self._widened = None
        self._seen = {}

    def _count(self, member: PoolMember | None, step: int) -> None:
        if member is None:
            return
        if member.pinned:
            return  # (`join` and `leave` keep `_pinned` themselves)
        left = self._needs.get(member.need, 0) + step
        if left:
            self._needs[member.need] = left
        else:
            del self._needs[member.need]

    def _tell(self, owner: str, cpus: frozenset[int]) -> None:
        self._forget(owner)
        self._told[owner] = cpus
        self._groups.setdefault(cpus, set()).add(owner)

    def _forget(self, owner: str) -> None:
        told = self._told.pop(owner, None)
        if told is not None:
            group = self._groups[told]
            group.discard(owner)
            if not group:
                del self._groups[told]

    def told(self, owner: str) -> frozenset[int] | None:
        """The cpuset `owner` was last told (None: never)."""
        return self._told.get(owner)

    def current(self, owner: str) -> frozenset[int]:
        """The cpuset `owner` has now: the one it was last told (CPUs given back reach
        it at the next widening `changes`), else the one it should have (`cpuset`)."""
        told = self._told.get(owner)
        return told if told is not None else self.cpuset(owner)

    def cpuset(self, owner: str, need: int | None = None) -> frozenset[int]:
        """The cpuset `owner` should have now (the shared pool for a container the pool
        does not know); `need`: for a CPU request of that many whole CPUs instead of its
        own (a resize)."""
        member = self._members.get(owner)
        if member is not None and member.pinned:
            return member.pinned
        placement = self.allocator.placement_of(owner)
        if placement is None or not placement.cpus:
            return self.shared()
        cpus = self.allocator.current_cpus(owner)
        if need is None:
            need = member.need if member is not None else 0
        if placement.exclusive_cpus and len(cpus) < need:
            cpus |= self.shared()
        return cpus

    def shared(self) -> frozenset[int]:
        """The shared pool: every online CPU that is not exclusive. Reserved CPUs are in
        it: they are never exclusive, not kept from containers. Computed once per change of
        the exclusive sets (the allocator's cpu_generation): every member asks."""
        generation = self.allocator.cpu_generation
        if self._shared is None or self._shared[0] != generation:
            online = self.allocator.topology.online
            exclusive = self.allocator.exclusive_cpus_in_use()
            # Nothing exclusive: the online set itself, so that the answers' comparisons
            # with it (answer_cpuset's) end at `is` instead of a lookup per online CPU.
            self._shared = (generation, online.difference(exclusive) if exclusive else online)
        return self._shared[1]

    def answer(self, owner: str) -> frozenset[int]:
        """The cpuset `owner` should have now (`cpuset`), counted as told: its
        CreateContainer or UpdateContainer answer carries it."""
        cpus = self.cpuset(owner)
        shared = self.shared()
        self._tell(owner, shared if cpus is shared or cpus == shared else cpus)
        # Told what it should have at this generation: until the allocator's CPUs move
        # or it joins again, nothing can change its cpuset, so the next `changes` skips
        # it (else every CreateContainer would recompute the previous one's, excluded
        # from its own `changes`).
        self._unchecked.discard(owner)
        return cpus

    def changes(self, exclude: str = "", widen: bool = True) -> dict[str, frozenset[int]]:
        """Members (but `exclude`) whose cpuset is not what they were last told: container
        id -> the cpuset to send; each counts as told from now on.

        widen=False (an answer to a create, stop or resize: the runtime applies it inside
        that container's request): only the members whose cpuset holds a CPU that became
        another's exclusive CPU since, found through the cpusets they were told, in time
        proportional to them and the node's CPUs, not to the members. CPUs given back
        stay out of every cpuset until a widening call (the drift pass, a Synchronize),
        and the next exclusive request takes them first without moving anyone.
        widen=True: every member compared with the cpuset it should have, the given-back
        CPUs included (once per move of the allocator's CPUs)."""
        generation = self.allocator.cpu_generation
        owners = [o for o in self._unchecked if o in self._members]
        if widen and generation != self._widened:
            owners = list(self._members)
        elif generation != self._narrowed:
            exclusive = self.allocator.exclusive_cpus_in_use()
            seen = self._seen
            taken = {cpu for cpu, owner in exclusive.items() if seen.get(cpu) != owner}
            if taken:
                owners += [
                    o
                    for cpus, group in self._groups.items()
                    if not cpus.isdisjoint(taken)
                    for o in group
                ]
        # `exclude` is left to the next time only if it was due: answered since it joined
        # (what a CreateContainer's own answer does), it is not
        due = exclude in owners
        if generation != self._narrowed:
            self._seen = self.allocator.exclusive_cpus_in_use()
        self._narrowed = generation
        if widen:
            self._widened = generation
        self._unchecked = {exclude} if due and exclude in self._members else set()
        changed = {}
        for owner in dict.fromkeys(owners):
            if owner == exclude or self._members[owner].pinned:
                continue
            cpus = self.cpuset(owner)
            if self._told.get(owner) != cpus:
                self._tell(owner, cpus)
                changed[owner] = cpus
        return changed

    def floors(self, exclude: str = "") -> tuple[CpuFloor, ...]:
        """What a new exclusive request (by `exclude`) must leave: per set of CPUs the
        members draw from, the most any of them needs; a pinned cpuset whole; and one
        shared CPU always, for the containers still to come (one without a CPU request
        is never refused, and a cpuset is never empty). Looks at the pinned members and
        those with CPUs placed only: the others draw from the shared pool, and the most
        any of them needs is kept counted (`_needs`)."""
        layout = self.allocator.layout
        everything = layout.topology.online - layout.reserved
        need: dict[frozenset[int], int] = {everything: 1}
        shared = dict(self._needs)  # need -> members drawing on the shared pool

        def placed(member: PoolMember) -> None:  # it draws on other CPUs than the pool's
            shared[member.need] -= 1

        excluded = self._members.get(exclude)
        if excluded is not None and not excluded.pinned:
            placed(excluded)
        for owner in self._pinned:
            pinned = self._members[owner].pinned
            if owner != exclude:
                need[pinned] = max(need.get(pinned, 0), len(pinned))
        for owner in self.allocator.owners():
            member = self._members.get(owner)
            placement = self.allocator.placement_of(owner)
            if (
                member is None
                or member.pinned
                or owner == exclude
                or placement is None
                or not placement.cpus
            ):
                continue
            placed(member)
            cpus, n = everything, member.need
            if placement.exclusive_cpus:
                # its own CPUs, and the shared pool for what they lack
                n -= len(placement.exclusive_cpus)
                if n <= 0:
                    continue
            else:
                cpus = layout.node_cpus(placement.mems or layout.nodes_of_cpus(placement.cpus), ())
            need[cpus] = max(need.get(cpus, 0), n)
        most = max((n for n, members in shared.items() if members), default=0)
        need[everything] = max(need[everything], most)
        return tuple(CpuFloor(cpus, n) for cpus, n in need.items())


class ReportedCpusets:
    """The cpusets the runtime reports for the live containers (Synchronize): which CPUs
    other containers run on, for a restore that must tell a container's exclusive CPUs
    from the shared ones in its cpuset. A cpuset of every online CPU, none, or one the
    kernel would not take says nothing (such a container was never placed) and counts for
    no CPU. Read only when asked: most restores never ask."""

    def __init__(self, reported: Iterable[str], online: frozenset[int]) -> None:
        self._reported = reported  # read once, at the first ask
        self._online = online
        self._holders: dict[int, int] | None = None  # CPU -> cpusets holding it

    def elsewhere(self, own: str) -> frozenset[int]:
        """The CPUs in the cpuset of a live container other than one reporting `own`
        (one of the reported cpusets)."""
        holders = self._count()
        mine = self._placed(own)
        return frozenset(cpu for cpu, n in holders.items() if n > (1 if cpu in mine else 0))

    def _count(self) -> dict[int, int]:
        if self._holders is None:
            texts: dict[str, int] = {}
            for text in self._reported:
                texts[text] = texts.get(text, 0) + 1
            holders: dict[int, int] = {}
            for text, n in texts.items():
                for cpu in self._placed(text):
                    holders[cpu] = holders.get(cpu, 0) + n
            self._holders = holders
        return self._holders

    def _placed(self, text: str) -> frozenset[int]:
        """The CPUs of a cpuset that places its container (empty: one that says nothing)."""
        try:
            cpus = parse_cpulist(text)
        except CpuListError:
            return frozenset()
        return frozenset() if cpus == self._online else cpus
