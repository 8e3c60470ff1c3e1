"""Cpusets: the plugin's questions to its CPU pool (plan.cpupool), in cpuset text.

Which cpuset each live container has now and is told: a container joining (created, or
found at Synchronize), the cpuset an answer carries, the neighbours whose cpuset must
change, a resize's new need. The pool keeps the sets; this is what the handlers, the
drift watch and the restore ask of it.
"""

from __future__ import annotations

from dataclasses import replace

import nri_plugin.plan.cpupool as cpupool
from nri_plugin.topology.cpulist import NO_CPUS, format_cpulist, parse_cpulist
from nri_plugin.topology.errors import CpuListError


class Cpusets:
    """The cpusets of `pool`'s members, as the runtime is told them."""

    def __init__(self, pool: cpupool.CpuPool) -> None:
        self.pool = pool
        # The last cpuset answered and its text: most answers carry the shared pool.
        self._answered: tuple[frozenset[int], str] = (frozenset(), "")

    def join(self, owner: str, request_millis: int | None, reported: str, *, created: bool) -> None:
        """`owner` is a live container whose cpuset the runtime reports as `reported`
        ("" or the whole online set: not pinned). At CreateContainer (`created`) nri-sla
        has not set it yet, so any other cpuset was pinned by someone else (the kubelet's
        static CPU manager): left alone, its CPUs never made exclusive. At Synchronize a
        cpuset is nri-sla's own when it holds no exclusive CPU (nri-sla never put one
        there, and no CPU became exclusive while it was away); any other one is pinned."""
        pool = self.pool
        placement = pool.allocator.placement_of(owner)
        try:
            cpus = parse_cpulist(reported)
        except CpuListError:
            cpus = NO_CPUS  # a cpuset the kernel would not take: ours to set
        layout = pool.allocator.layout
        whole = not cpus or cpus == layout.topology.online
        placed = placement is not None and bool(placement.cpus)
        foreign = (
            not placed
            and not whole
            and (created or not cpus.isdisjoint(pool.allocator.exclusive_cpus_in_use()))
        )
        member = (
            cpupool.PoolMember(cpupool.cpus_needed(request_millis), cpus)
            if foreign
            else cpupool.unpinned_member(request_millis)
        )
        # What it runs on now: without a cpuset, every online CPU.
        pool.join(owner, member, None if created else cpus or layout.topology.online)

    def resize(self, owner: str, request_millis: int | None) -> None:
        """`owner`'s CPU request changed: the pool counts the new one."""
        member = self.pool.member(owner)
        if member is not None:
            self.pool.join(owner, replace(member, need=cpupool.cpus_needed(request_millis)))

    def cpuset_of(self, owner: str) -> str:
        """The cpuset `owner` has now in the pool: what it was last told (CPUs given back
        reach it at the next widening), else what it should have; a repair or a
        read-back compares with this, never its creation-time one."""
        return format_cpulist(self.pool.current(owner))

    def exclusive_of(self, owner: str) -> str:
        """The exclusive CPUs `owner` holds now (a resize or a restore gives back what its
        request no longer covers)."""
        placement = self.pool.allocator.placement_of(owner)
        return format_cpulist(placement.exclusive_cpus) if placement is not None else ""

    def runs_everywhere(self, cpus: str) -> bool:
        """`cpus` is every online CPU: what a container without a cpuset runs on."""
        return parse_cpulist(cpus) == self.pool.allocator.topology.online

    def answer(self, owner: str, planned: bool) -> str:
        """The cpuset an answer about `owner` carries (cpuset_of's), counted as told; ""
        when none need be sent: every online CPU while nri-sla planned none (`planned`)
        and never told it a narrower one (a container without a cpuset runs on all of
        them already). Sent with every CreateContainer: the set is compared, not its
        text, and the text of the last one (mostly the shared pool, again) is not made
        twice."""
        pool = self.pool
        before = pool.told(owner)
        cpus = pool.answer(owner)
        if not cpus:
            return ""
        # `is` first: mostly the shared pool, one object per allocator generation (the
        # online set itself while nothing is exclusive), and `==` between equal sets
        # looks up every CPU (128 on a large node) even when they are one object.
        online = pool.allocator.topology.online
        if (
            not planned
            and (cpus is online or cpus == online)
            and (before is None or before is online or before == online)
        ):
            return ""  # (told a narrower one before: given-back CPUs not sent yet)
        answered = self._answered[0]
        if answered is not cpus and answered != cpus:
            self._answered = (cpus, format_cpulist(cpus))
        return self._answered[1]

    def updates(self, exclude: str, widen: bool) -> dict[str, str]:
        """Containers (but `exclude`) whose cpuset must change: container id -> new
        cpuset. widen=False: those holding CPUs that became exclusive since they were told
        theirs; widen=True: also those that get given-back CPUs (CpuPool.changes)."""
        return {
            owner: format_cpulist(cpus) for owner, cpus in self.pool.changes(exclude, widen).items()
        }

    def short(self, owner: str, request_millis: int | None) -> tuple[int, int] | None:
        """(whole CPUs a new request needs, CPUs `owner`'s cpuset can hold) when they do not
        fit (a resize up that the CPUs outside every exclusive set cannot give); None
        when they fit, or the cpuset is not nri-sla's."""
        member = self.pool.member(owner)
        if member is None or member.pinned:
            return None
        need = cpupool.cpus_needed(request_millis)
        have = len(self.pool.cpuset(owner, need))
        return (need, have) if have < need else None
