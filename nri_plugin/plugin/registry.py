"""One registry of the containers the runtime reports to the plugin: the plugin's only
per-container state.

Every container CreateContainer or Synchronize reports has one entry, with or without an
SLA: who it is (ids, pod, names, cgroup), its state, the GPUs it can open (what its device
plugin granted, read from what the runtime wrote: nri_plugin.plan.runtime_gpus; and for a
record written when nri-sla chose GPUs: the GPUs it chose), the plan nri-sla decided for
it (`decided_plan`) and the one in force now (`current_plan`: the decided one as the
container was given it, refitted at each resize), whether the decided plan's direct
writes are still owed (StartContainer, or a Synchronize that finds it started), what
the drift watch keeps between its passes (`drift`), and whether it was created while
nri-sla was away (`unenforced`: plugin.unenforced reports it, the status lists it).
StopContainer and RemoveContainer drop the entry, and everything with it.

Three books of the node (core.NodeState) are also kept by container id, and are ledgers
of what the node gave, not container state:

* the Allocator (plan.allocator): the GPUs, MIG devices and exclusive CPUs each holds,
  with the reverse tables (device or CPU -> holders), under one lock;
* the RT budget (plan.rt_budget): each RT grant (runtime, period) and, once known, the
  cpu cgroup dir it lives in, whose ancestors the RT give-back (enforce.rt_ledger, kept
  by cgroup dir) must leave raised while the grant lives;
* the CPU pool (plan.cpupool): the whole CPUs each needs, a cpuset pinned by someone
  else, and the cpuset the runtime was last sent for it.

Each answers questions about the whole node (is this CPU free, how much RT time is left,
whose cpuset moved) from its own tables, which an entry could only answer by a scan of
the registry; the planner (which the OCI hook shares, and which knows nothing of the
plugin) reserves and checks against them while deciding, before the entry exists; and
a Synchronize rebuilds them from the live containers alone (their records, their
cpusets). NodeState.release clears all three when the entry goes (SlaPlugin._release);
nothing else in the plugin keeps a container.

Every entry's grant counts: two live containers able to open one GPU is the kubelet's (or
an old record's) doing, never nri-sla's, and is reported (`sharing`): once per pair of
containers for the operator's log, and as a count for the `nri_sla_gpus_shared` gauge.
Replicas of one GPU (time-slicing, MPS) are shared by design: reported once per pair as
such, never counted. A message a pod author sees never names the other container.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from nri_plugin.enforce.cgfile import CgroupWrite, CgroupWriter
from nri_plugin.enforce.compliance import CpuThrottling
from nri_plugin.plan.model import ContainerPlan
from nri_plugin.topology.gpus import Gpu, MigInstance


@dataclass(frozen=True, slots=True)
class GrantedGpus:
    """The GPUs a container can open, by identity: whole GPUs (Gpu.identity) and MIG devices
    (uuid, parent Gpu.identity); identities, not indexes, so that a rescan that renumbers
    GPUs changes nothing here. `replicas`: those of them (GPU identities, MIG uuids) it
    holds as a replica (time-slicing, MPS), shared with other replicas' holders by design."""

    whole: frozenset[str] = frozenset()
    migs: frozenset[tuple[str, str]] = frozenset()
    replicas: frozenset[str] = frozenset()

    @classmethod
    def of(
        cls,
        gpus: Iterable[Gpu],
        migs: Iterable[tuple[Gpu, MigInstance]],
        replicas: frozenset[str] = frozenset(),
    ) -> GrantedGpus:
        whole = frozenset(g.identity for g in gpus)
        mig_ids = frozenset((m.uuid, parent.identity) for parent, m in migs)
        return cls(whole, mig_ids, replicas) if whole or mig_ids else NO_GPUS

    def __bool__(self) -> bool:
        return bool(self.whole or self.migs)


NO_GPUS = GrantedGpus()  # what most containers can open: one value for all of them


NO_PENDING: frozenset[CgroupWrite] = frozenset()


@dataclass(eq=False, slots=True)
class DriftMemory:
    """What the drift watch (plugin.watch) keeps of one SLA container between passes."""

    settling: bool = False  # expectations changed by nri-sla itself since the last pass
    writer: CgroupWriter | None = None  # over the container's cgroup, once found
    # Drift already logged: setting -> (found, error) as reported (logged once per change).
    reported: dict[CgroupWrite, tuple[str | None, str]] = field(default_factory=dict)
    # Re-asserted via the runtime; none is the one NO_PENDING (an empty set is 216 bytes,
    # for every container the watch follows).
    pending: frozenset[CgroupWrite] = NO_PENDING
    failures: int = 0  # failed repairs in a row
    retry_at: float = 0.0  # monotonic time before which no repair is tried
    repair: str = ""  # the repair under way or failed, for people
    cpu: CpuThrottling | None = None  # the last pass's sample
    throttled_ratio: float | None = None
    # (plan, cpuset) -> the plan with that cpuset and its settings by how they are set:
    # built again only when either changes.
    expected: tuple[ContainerPlan, str, ContainerPlan, dict[CgroupWrite, str]] | None = None


@dataclass(eq=False, slots=True)
class ContainerEntry:
    """One container the runtime reported."""

    id: str
    pod_id: str
    namespace: str
    pod_name: str
    name: str
    state: str  # created | running | paused | stopped | unknown
    gpus: GrantedGpus = NO_GPUS
    # nri-sla's decision (at CreateContainer, or restored from the container's record at
    # Synchronize); None: no SLA, or none taken.
    decided_plan: ContainerPlan | None = None
    writes_owed: bool = False  # the decided plan's direct writes are still to do
    cgroups_path: str = ""  # the OCI linux.cgroupsPath the runtime gave it
    pod_uid: str = ""  # the pod's Kubernetes uid (what its Events name)
    # What is enforced now, and what the drift watch reads back: the decided plan with the
    # cpuset the container was given, refitted at each resize (UpdateContainer).
    current_plan: ContainerPlan | None = None
    drift: DriftMemory | None = None  # the watch's, from its first look at the container
    # Created while no nri-sla was registered, its pod asking an SLA (plugin.unenforced):
    # reported once, listed by the status document while the entry lives.
    unenforced: bool = False

    def __post_init__(self) -> None:
        if self.current_plan is None:
            self.current_plan = self.decided_plan

    @property
    def who(self) -> str:
        """namespace/pod container, for the operator's log."""
        return f"{self.namespace}/{self.pod_name} {self.name}"

    @property
    def started(self) -> bool:
        """Its process runs with the decided plan's direct writes made (what the drift
        watch reads back only then)."""
        return not self.writes_owed

    @property
    def holds(self) -> bool:
        """It holds GPUs or a placement: releasing it changes the node's gauges."""
        plan = self.decided_plan
        return bool(self.gpus) or (plan is not None and bool(plan.placement_record))


@dataclass(frozen=True)
class SharedGpu:
    """A GPU (Gpu.identity) or MIG device (uuid) that two or more live containers can
    open, and those containers' ids; `intended`: every one of them holds it as a replica
    (time-slicing, MPS), which is sharing by design, not a double grant."""

    device: str
    containers: tuple[str, ...]
    intended: bool = False


class ContainerRegistry:
    """The plugin's containers by id. Used from the event loop only (the NRI handlers and
    the service's periodic work), so it takes no lock."""

    def __init__(self) -> None:
        self._entries: dict[str, ContainerEntry] = {}
        # pod id -> its containers' ids: a tuple of one while the pod has one container,
        # as most have (64 bytes, where a set of one takes 232: docs/benchmarks.md), a set
        # from the second on (a pod may have thousands: adding and removing stay O(1)).
        self._by_pod: dict[str, tuple[str] | set[str]] = {}
        self._pairs_reported: set[tuple[str, str, str]] = set()  # (device, a, b), a < b

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, container_id: str) -> ContainerEntry | None:
        return self._entries.get(container_id)

    def __iter__(self) -> Iterator[ContainerEntry]:
        return iter(self._entries.values())

    def add(self, entry: ContainerEntry) -> None:
        """Add (or replace, for a retried CreateContainer) one container's entry."""
        self._forget_pod(entry.id)
        self._entries[entry.id] = entry
        self._join_pod(entry)

    def remove(self, container_id: str) -> ContainerEntry | None:
        self._forget_pod(container_id)
        entry = self._entries.pop(container_id, None)
        if entry is not None and self._pairs_reported:
            self._pairs_reported = {p for p in self._pairs_reported if container_id not in p}
        return entry

    def replace(self, entries: Iterable[ContainerEntry], unenforced: Iterable[str] = ()) -> None:
        """Synchronize: exactly these containers from now on; `unenforced`: the ids of
        those among them created unenforced (plugin.unenforced)."""
        self._entries = {e.id: e for e in entries}
        for container_id in unenforced:
            self._entries[container_id].unenforced = True
        self._by_pod = {}
        for e in self._entries.values():
            self._join_pod(e)
        self._pairs_reported = {
            p for p in self._pairs_reported if p[1] in self._entries and p[2] in self._entries
        }

    def members(self, pod: str) -> Iterable[str]:
        """The ids of pod `pod`'s containers (core.nodestate.PodMembers: the per-pod caps
        count what they hold)."""
        return self._by_pod.get(pod, ()) if pod else ()

    def _join_pod(self, entry: ContainerEntry) -> None:
        """`entry` counts among its pod's containers, and shares the pod's strings with
        the others (each protobuf read makes new ones: 0.2 KB a container)."""
        members = self._by_pod.get(entry.pod_id)
        if members is None:
            self._by_pod[entry.pod_id] = (entry.id,)
            return
        other = self._entries[next(iter(members))]
        if (other.namespace, other.pod_name) == (entry.namespace, entry.pod_name):
            entry.pod_id, entry.namespace, entry.pod_name = (
                other.pod_id,
                other.namespace,
                other.pod_name,
            )
        if isinstance(members, tuple):
            members = self._by_pod[entry.pod_id] = {*members}
        members.add(entry.id)

    def _forget_pod(self, container_id: str) -> None:
        entry = self._entries.get(container_id)
        if entry is None:
            return
        members = self._by_pod.get(entry.pod_id)
        if members is not None:
            if isinstance(members, tuple):
                if container_id in members:
                    del self._by_pod[entry.pod_id]
            else:
                members.discard(container_id)
                if not members:
                    del self._by_pod[entry.pod_id]

    def watched(self) -> list[ContainerEntry]:
        """The containers the drift watch follows (those with a plan in force), in the
        order the status shows them."""
        return sorted(
            (e for e in self._entries.values() if e.current_plan is not None),
            key=lambda e: (e.namespace, e.pod_name, e.name, e.id),
        )

    def shared(self) -> list[SharedGpu]:
        """GPUs and MIG devices two or more live containers can open: a GPU granted
        whole is open to its holders and to the holders of MIG devices on it. MIG devices
        of one GPU are each their holder's alone; replicas of one device, held by every
        container that can open it, are `intended`."""
        whole: dict[str, set[str]] = {}
        migs: dict[str, set[str]] = {}
        on_gpu: dict[str, set[str]] = {}  # GPU identity -> holders of MIG devices on it
        replica_holders: dict[str, set[str]] = {}  # device -> who holds it as a replica
        for e in self._entries.values():
            for identity in e.gpus.whole:
                whole.setdefault(identity, set()).add(e.id)
            for uuid, parent in e.gpus.migs:
                migs.setdefault(uuid, set()).add(e.id)
                on_gpu.setdefault(parent, set()).add(e.id)
            for device in e.gpus.replicas:
                replica_holders.setdefault(device, set()).add(e.id)
        found = [(gpu, holders | on_gpu.get(gpu, set())) for gpu, holders in whole.items()]
        found += list(migs.items())
        return sorted(
            (
                SharedGpu(
                    device, tuple(sorted(holders)), holders <= replica_holders.get(device, set())
                )
                for device, holders in found
                if len(holders) > 1
            ),
            key=lambda s: s.device,
        )

    def new_shared_pairs(
        self, shared: Iterable[SharedGpu]
    ) -> list[tuple[SharedGpu, ContainerEntry, ContainerEntry]]:
        """The (shared device, container, container) pairs of `shared` not reported
        before; each pair is reported once while both containers live."""
        new = []
        for s in shared:
            for i, a in enumerate(s.containers):
                for b in s.containers[i + 1 :]:
                    key = (s.device, a, b)
                    if key not in self._pairs_reported:
                        self._pairs_reported.add(key)
                        new.append((s, self._entries[a], self._entries[b]))
        return new
