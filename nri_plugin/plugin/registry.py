"""One registry of the containers the runtime reports to the plugin.

Every container CreateContainer or Synchronize reports has one entry, with or without an
SLA: who it is (ids, pod, names), its state, the GPUs it can open (what its device plugin
granted, read from what the runtime wrote: nri_plugin.plan.runtime_gpus; and for a record
from before issue 18, the GPUs nri-sla chose then), its plan when nri-sla
decided one, and whether that plan's direct writes are still owed (StartContainer, or a
Synchronize that finds it started). StopContainer and RemoveContainer drop the entry.

Every entry's grant counts: two live containers able to open one GPU is the kubelet's (or
an old record's) doing, never nri-sla's, and is reported (`sharing`): once per pair of
containers for the operator's log, and as a count for the `nri_sla_gpus_shared` gauge. A
message a pod author sees never names the other container.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from nri_plugin.plan.model import ContainerPlan
from nri_plugin.topology.gpus import Gpu, MigInstance


@dataclass(frozen=True)
class GrantedGpus:
    """The GPUs a container can open, by identity: whole GPUs (Gpu.identity) and MIG devices
    (uuid, parent Gpu.identity); identities, not indexes, so that a rescan that renumbers
    GPUs changes nothing here."""

    whole: frozenset[str] = frozenset()
    migs: frozenset[tuple[str, str]] = frozenset()

    @classmethod
    def of(cls, gpus: Iterable[Gpu], migs: Iterable[tuple[Gpu, MigInstance]]) -> GrantedGpus:
        return cls(frozenset(g.identity for g in gpus),
                   frozenset((m.uuid, parent.identity) for parent, m in migs))

    def __bool__(self) -> bool:
        return bool(self.whole or self.migs)


@dataclass
class ContainerEntry:
    """One container the runtime reported."""

    id: str
    pod_id: str
    namespace: str
    pod_name: str
    name: str
    state: str  # created | running | paused | stopped | unknown
    gpus: GrantedGpus = field(default_factory=GrantedGpus)
    plan: ContainerPlan | None = None  # nri-sla's decision; None: no SLA (or none taken)
    writes_owed: bool = False  # the plan's direct writes are still to do

    @property
    def who(self) -> str:
        """namespace/pod container, for the operator's log."""
        return f"{self.namespace}/{self.pod_name} {self.name}"


@dataclass(frozen=True)
class SharedGpu:
    """A GPU (Gpu.identity) or MIG device (uuid) that two or more live containers can
    open, and those containers' ids."""

    device: str
    containers: tuple[str, ...]


class ContainerRegistry:
    """The plugin's containers by id. Used from the event loop only (the NRI handlers and
    the service's periodic work), so it takes no lock."""

    def __init__(self) -> None:
        self._entries: dict[str, ContainerEntry] = {}
        self._pairs_reported: set[tuple[str, str, str]] = set()  # (device, a, b), a < b

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, container_id: str) -> ContainerEntry | None:
        return self._entries.get(container_id)

    def add(self, entry: ContainerEntry) -> None:
        """Add (or replace, for a retried CreateContainer) one container's entry."""
        self._entries[entry.id] = entry

    def remove(self, container_id: str) -> ContainerEntry | None:
        entry = self._entries.pop(container_id, None)
        if entry is not None:
            self._pairs_reported = {p for p in self._pairs_reported if container_id not in p}
        return entry

    def replace(self, entries: Iterable[ContainerEntry]) -> None:
        """Synchronize: exactly these containers from now on."""
        self._entries = {e.id: e for e in entries}
        self._pairs_reported = {p for p in self._pairs_reported
                                if p[1] in self._entries and p[2] in self._entries}

    def plans(self) -> dict[str, ContainerPlan]:
        """Container id -> its plan, for the containers nri-sla decided one for."""
        return {e.id: e.plan for e in self._entries.values() if e.plan is not None}

    def owed(self) -> set[str]:
        """Containers whose plan's direct writes are still owed."""
        return {e.id for e in self._entries.values() if e.writes_owed}

    def shared(self) -> list[SharedGpu]:
        """GPUs and MIG devices two or more live containers can open: a GPU granted
        whole is open to its holders and to the holders of MIG devices on it."""
        whole: dict[str, set[str]] = {}
        migs: dict[str, set[str]] = {}
        on_gpu: dict[str, set[str]] = {}  # GPU identity -> holders of MIG devices on it
        for e in self._entries.values():
            for identity in e.gpus.whole:
                whole.setdefault(identity, set()).add(e.id)
            for uuid, parent in e.gpus.migs:
                migs.setdefault(uuid, set()).add(e.id)
                on_gpu.setdefault(parent, set()).add(e.id)
        found = [SharedGpu(gpu, tuple(sorted(holders | on_gpu.get(gpu, set()))))
                 for gpu, holders in whole.items()]
        found += [SharedGpu(uuid, tuple(sorted(holders))) for uuid, holders in migs.items()]
        return sorted((s for s in found if len(s.containers) > 1), key=lambda s: s.device)

    def new_shared_pairs(self, shared: Iterable[SharedGpu]
                         ) -> list[tuple[str, ContainerEntry, ContainerEntry]]:
        """The (device, container, container) pairs of `shared` not reported before; each
        pair is reported once while both containers live."""
        new = []
        for s in shared:
            for i, a in enumerate(s.containers):
                for b in s.containers[i + 1:]:
                    key = (s.device, a, b)
                    if key not in self._pairs_reported:
                        self._pairs_reported.add(key)
                        new.append((s.device, self._entries[a], self._entries[b]))
        return new
