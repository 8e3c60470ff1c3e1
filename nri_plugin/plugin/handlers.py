"""SlaPlugin: the NRI plugin's handlers, running the data path for each container.

CreateContainer: annotations -> SLA -> plan -> adjustment (or an error status, which
makes containerd refuse the container). StartContainer: the direct cgroup writes that
NRI cannot express on this node, read back. Stop/Remove: allocations released.
Synchronize, and the restore right after it, are SlaPlugin's collaborator `restorer`
(`plugin.restore.SynchronizeRestore`), given the books and the pieces it uses.
Every container the runtime reports, with or without an SLA, has one entry in the
registry (`plugin.registry`): its grant, its plan, whether direct writes are owed; every
grant is held, and GPUs two containers can open are reported. nri-sla never adds a GPU.
Between events the drift watch (`plugin.watch`) reads back what was enforced.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Collection, Generator, Iterable, Sequence
from typing import Any, Protocol

from nri_plugin.core.decision import REUSABLE_LIMIT, Decision, decide, recheck
from nri_plugin.core.inputs import DecisionInputs
from nri_plugin.core.nodestate import NodeState
from nri_plugin.core.request import ContainerRequest
from nri_plugin.core.reservation import Reservation, nothing_taken
from nri_plugin.core.restored import LiveContainer
from nri_plugin.errors import INTERNAL, INVALID, SlaFailure
from nri_plugin.granted import (
    DEVICE_MOUNT_DIR,
    ENV_VISIBLE,
    MAX_GRANT_ITEMS,
    GrantedResources,
    all_devices_allowed,
    bounded_names,
    device_mount_ids,
    gpu_device_numbers,
    limits_only,
)
from nri_plugin.hookspec import hook_spec
from nri_plugin.nri.errors import Code, RpcError
from nri_plugin.nri.pb import nri_pb2 as pb
from nri_plugin.nri.stub import CreateResult
from nri_plugin.ops.event import DecisionEvent, applied_fields
from nri_plugin.ops.logsetup import log_decision, log_event
from nri_plugin.ops.metrics import NO_METRICS, MetricsSink
from nri_plugin.plan.errors import PlanError
from nri_plugin.plan.model import ContainerPlan
from nri_plugin.plan.record import record_body, record_text
from nri_plugin.plan.runtime_gpus import NO_GRANT, GpuGrant
from nri_plugin.plugin.adjustment import annotated, build_adjustment, build_update
from nri_plugin.plugin.errors import StartRefused
from nri_plugin.plugin.kubelet_grants import KubeletGrants, asks_kubelet
from nri_plugin.plugin.pod_events import NO_EVENTS, PodEvents
from nri_plugin.plugin.registry import (
    NO_GPUS,
    ContainerEntry,
    ContainerRegistry,
    GrantedGpus,
    SharedGpu,
)
from nri_plugin.plugin.report import gpus_json
from nri_plugin.plugin.restore import SynchronizeRestore, log_given_back, settled
from nri_plugin.plugin.synced import SyncedPod
from nri_plugin.plugin.unenforced import UnenforcedContainers
from nri_plugin.plugin.watch import DriftWatch
from nri_plugin.topology.cpulist import format_cpulist
from nri_plugin.value import replace

log = logging.getLogger("nri_sla.plugin")

# The registry's state names: CONTAINER_RUNNING -> "running".
STATE_NAMES = {
    number: name.removeprefix("CONTAINER_").lower() for name, number in pb.ContainerState.items()
}
ENV_VISIBLE_PREFIX = ENV_VISIBLE + "="
NO_EVIDENCE = GrantedResources()  # a grant from the kubelet's device ids alone
UNVERSIONED_NRI = "older than v0.12"  # no version sent, runtime release not in the table
# The failure's kind as the status the runtime gets (it shows the message to the user).
STATUS = {INVALID: Code.INVALID_ARGUMENT, INTERNAL: Code.INTERNAL}


def rpc_error(exc: SlaFailure) -> RpcError:
    return RpcError(STATUS.get(exc.kind, Code.FAILED_PRECONDITION), str(exc))


def granted_resources(
    resources: pb.LinuxResources, container: pb.Container | None = None
) -> GrantedResources:
    """What the runtime set for the container: the kubelet's CPU and memory values in the
    request and the GPU evidence a device plugin's grant left (CDI devices, GPU device
    nodes and MIG access nodes, volume mounts; whether the device cgroup allows every
    device, as for a privileged container); NVIDIA_VISIBLE_DEVICES only to report an env
    that is no grant.
    Every list is bounded before anything is built from it (nri_plugin.granted). Read on
    every CreateContainer: a kind of evidence the request does not carry (most containers
    have no CDI device, no device node and no device mount) is not built at all."""
    cpu, memory = resources.cpu, resources.memory
    evidence: dict[str, Any] = {}
    if container is not None:
        env = container.env
        # One substring search over the joined env before a look at each item: a pod's
        # env is often dozens of items (the kubelet adds service variables) and nearly
        # never names GPUs; joining runs in C, a startswith per item in the interpreter.
        if ENV_VISIBLE in "".join(env):
            for item in env:  # the runtime keeps one per key; the last
                if item.startswith(ENV_VISIBLE_PREFIX):
                    evidence["env_gpus"] = item[len(ENV_VISIBLE_PREFIX) :]
        if container.CDI_devices:
            evidence["cdi_devices"] = bounded_names(d.name for d in container.CDI_devices)
        if container.linux.devices:
            gpus, caps = gpu_device_numbers(
                (d.path, d.type, d.major, d.minor) for d in container.linux.devices
            )
            if gpus:
                evidence["gpu_devices"] = gpus
            if caps:
                evidence["caps_minors"] = caps
            if resources.devices and all_devices_allowed(
                (r.allow, r.type, r.HasField("major") or r.HasField("minor"), r.access)
                for r in resources.devices
            ):
                evidence["all_devices"] = True
        mounts: Sequence[pb.Mount] = container.mounts
        if len(mounts) > MAX_GRANT_ITEMS:  # (a slice: islice over protobuf's list is slow)
            mounts = mounts[:MAX_GRANT_ITEMS]
        device_mounts = [
            (path, m.source) for m in mounts if (path := m.destination).startswith(DEVICE_MOUNT_DIR)
        ]
        if device_mounts:
            evidence["device_mounts"] = device_mount_ids(device_mounts)
    # An absent value reads as 0, which GrantedResources takes as "not set", as it takes
    # a 0 the runtime wrote: no HasField per value (four calls per container).
    if not evidence:
        return limits_only(cpu.quota.value, cpu.period.value, cpu.shares.value, memory.limit.value)
    return GrantedResources(
        cpu_quota=cpu.quota.value,
        cpu_period=cpu.period.value,
        cpu_shares=cpu.shares.value,
        memory_limit=memory.limit.value,
        **evidence,
    )


class SlaPlugin:
    """Handlers for the NRI stub; the stub subscribes to exactly these events."""

    def __init__(
        self, node: NodeState, metrics: MetricsSink = NO_METRICS, events: PodEvents = NO_EVENTS
    ) -> None:
        self.node = node
        self.metrics = metrics
        self.events = events  # Kubernetes Events on the pods (plugin.pod_events)
        self.nri_version: str | None = None
        self.runtime = ""
        self.registry = ContainerRegistry()  # every container the runtime reported
        node.pod_members = self.registry.members  # the per-pod caps count its pods
        # The kubelet's books, for containers whose only GPU evidence is their env.
        self.kubelet = KubeletGrants(
            node.config.gpu.podresources_socket, node.config.gpu.grant_resources
        )
        # A reusable decision's inputs -> (its plan, the plan's record_text, the event's
        # applied fields, adjustment without annotations).
        self._answers: dict[DecisionInputs, tuple[ContainerPlan, str, dict[str, Any], Any]] = {}
        # With hook.inject the OCI hook verifies (reads back) what the plugin enforced.
        self._hooks = hook_spec() if node.config.hook.inject else None
        watch = node.config.watch
        self.watch = DriftWatch(
            node,
            self.registry,
            metrics,
            interval=watch.interval,
            backoff_max=watch.repair_backoff_max,
            events=events,
        )
        self._stub: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        # created while away
        self._unenforced = UnenforcedContainers(self.registry, metrics, events)
        self._replicas_asked: frozenset[tuple[str, tuple[str, ...]]] = frozenset()
        self.restorer = SynchronizeRestore(
            node,
            self.registry,
            metrics,
            self.watch,
            self._unenforced,
            rescan_inventory=self.rescan_inventory,
            entries=self._entries,
            cpuset_updates=self._cpuset_updates,
            publish_usage=self._publish_usage,
            report_shared=self._report_shared,
        )

    # -- life cycle --------------------------------------------------------------------
    def on_registered(self, stub: Any) -> None:
        """Called once registered: the runtime's NRI version came with Configure, or (NRI
        before v0.12 sends none: containerd 1.7 to 2.2, CRI-O up to 1.36) the stub knows
        it from the runtime's name and release."""
        self.nri_version = stub.nri_version or UNVERSIONED_NRI
        self._stub = stub
        self._loop = asyncio.get_running_loop()  # where status requests read the watch
        self.restorer.attach(stub, self._loop)  # the first Synchronize's restore

    def synchronize(self, pods: list[pb.PodSandbox], containers: Collection[pb.Container]) -> None:
        """The runtime's whole state: answered at once, restored right after
        (SynchronizeRestore.synchronize)."""
        self.restorer.synchronize(pods, containers)

    def settle(self) -> None:
        """A restore the last Synchronize's answer left pending, now."""
        self.restorer.settle()

    def configure(self, config: str, runtime_name: str, runtime_version: str) -> None:
        self.runtime = f"{runtime_name} {runtime_version}".strip()
        log.info("configured by %s", self.runtime or "an unnamed runtime")
        if config.strip():
            # /etc/nri/conf.d/NN-nri-sla.conf only points at the node config, which the
            # plugin already loaded from --config at start.
            log.info(
                "runtime passed plugin config %r; node config in use: %s",
                config.strip(),
                self.node.config.source,
            )

    @settled
    def rescan_inventory(self) -> None:
        """Read the node's GPUs again (every gpu.rescan-interval seconds through the
        service's Periodic, and at every Synchronize). A GPU gone while a container holds
        it stays that container's and is never handed out ("GPU vanished" once, naming
        the holders; nri_sla_gpus_missing); a new one is offered at once. A read that
        fails changes nothing (a flaky NVML must not take GPUs away). Returns None: no
        container needs an update for it."""
        try:
            change = self.node.rescan_inventory()
        except (SlaFailure, OSError) as exc:
            log_event(log, logging.WARNING, "GPU inventory rescan failed", error=str(exc))
            return None
        if change is None:
            return None
        for gpu, holders in change.vanished:
            log_event(
                log,
                logging.WARNING,
                "GPU vanished",
                gpu=gpu.ref,
                index=gpu.index,
                holders=",".join(holders) or "none",
            )
        for what, gpus in (("GPU appeared", change.appeared), ("GPU back", change.back)):
            for gpu in gpus:
                log_event(log, logging.INFO, what, gpu=gpu.ref, index=gpu.index)
        if change.vanished or change.appeared or change.back:
            self._publish_usage()
        else:
            self._publish_gpu_health()  # a read may have found GPUs unknown (or back)
        return None

    @settled
    def poll_gpu_health(self) -> None:
        """The service's Periodic (gpu.health-interval): NVML's XID events and lost GPUs
        since the last poll, without waiting (this runs on the event loop). The monitor
        logs each change; the allocator stops offering a GPU that is not healthy."""
        if self.node.poll_gpu_health(0):
            self._publish_gpu_health()
        return None

    # -- containers --------------------------------------------------------------------
    @settled
    def create_container(self, pod: pb.PodSandbox, container: pb.Container) -> CreateResult:
        started = time.perf_counter()
        # Each field read once: every read of a protobuf field makes a new object.
        cid, name, namespace = container.id, container.name, pod.namespace
        granted = granted_resources(container.linux.resources, container)
        kubelet_ids = (
            self.kubelet.for_container(namespace, pod.name, name) if asks_kubelet(granted) else ()
        )
        decision = decide(
            self.node,
            ContainerRequest(
                pod.annotations,
                name,  # protobuf's map: only nri-sla's keys are read
                namespace=namespace,
                owner=cid,
                pod=pod.id,
                nri_version=self.nri_version,
                granted=granted,
                kubelet_gpu_ids=kubelet_ids,
            ),
        )
        grant = self._grant_of(cid, granted, kubelet_ids, decision.plan, created=True)
        decision, held = self._admit(cid, decision, grant, granted, container)
        with held:  # anything below failing gives back what the node took for it
            plan = decision.plan
            applied, adjustment = (
                self._answer(plan, decision, cid, container)
                if plan is not None
                else ({}, self._strip_outputs(container))
            )
            self._observe("CreateContainer", started, decision, applied, namespace, pod.name, name)
            self.events.decided(namespace, pod.name, pod.uid, name, decision)
            if decision.error is not None:
                raise rpc_error(decision.error)
            entry = self._entry(cid, pod, container, plan, owed=plan is not None, grant=grant)
            self.registry.add(entry)
            held.commit()
        planned = plan is not None and bool(plan.cpus)  # the answer's settings carry them
        adjustment, cpus = self._with_cpuset(entry.id, adjustment, planned)
        if plan is not None:  # in force (and read back) with the cpuset it was given
            entry.current_plan = plan if not cpus or cpus == plan.cpus else replace(plan, cpus=cpus)
        self._publish_holders(entry)
        return CreateResult(adjustment, self._cpuset_updates(entry.id))

    def _admit(
        self,
        cid: str,
        decision: Decision,
        grant: GpuGrant,
        granted: GrantedResources,
        container: pb.Container,
    ) -> tuple[Decision, Reservation]:
        """The node takes what the decided container holds (NodeState.admit) and, on
        cgroup v1, makes room for its RT time in its ancestors; the decision as it stands
        then (its own copy of the plan, or refused: nothing is taken), and what was
        taken."""
        if decision.error is not None:
            return decision, nothing_taken(cid)
        try:
            held = self.node.admit(
                cid,
                decision.plan,
                grant,
                granted.cpu_request_millis,
                container.linux.resources.cpu.cpus,
            )
        except SlaFailure as exc:  # taken by another since the plan was made
            return Decision("refused", error=exc), nothing_taken(cid)
        plan = decision.plan
        if plan is None or not plan.rt_runtime or not self.node.facts:
            return decision, held
        try:
            paths = self.node.container_paths(container.linux.cgroups_path)
            room, _ = self.node.make_rt_room(plan, paths, cid)
        except SlaFailure as exc:
            held.rollback()
            return Decision("refused", error=exc), held
        return replace(decision, plan=room), held  # this container's own

    def _with_cpuset(
        self, container_id: str, adjustment: pb.ContainerAdjustment | None, planned: bool
    ) -> tuple[pb.ContainerAdjustment | None, str]:
        """The adjustment carrying the container's cpuset in the node's CPU pool (with or
        without an SLA: no container runs on another's exclusive CPUs), and that cpuset
        ("": the one the plan set, if any, stands). `planned`: the adjustment sets a
        cpuset already (the plan's; told, not read back: a read of a nested protobuf
        field builds a Python object per level)."""
        cpus = self.node.cpusets.answer(container_id, planned)
        if not cpus:
            return adjustment, ""
        adjustment = adjustment if adjustment is not None else pb.ContainerAdjustment()
        adjustment.linux.resources.cpu.cpus = cpus
        return adjustment, cpus

    def _grant_of(
        self,
        container_id: str,
        granted: GrantedResources,
        kubelet_ids: tuple[str, ...],
        plan: ContainerPlan | None,
        *,
        created: bool,
    ) -> GpuGrant:
        """The GPUs the runtime (and the kubelet's books: `kubelet_ids`) granted the
        container; `created`: at CreateContainer (else Synchronize)."""
        if not (granted.gpu_evidence or kubelet_ids):
            return NO_GRANT  # most containers: nothing to resolve or hold
        grant = self.node.gpu_grant(granted, kubelet_ids)
        if grant.env_only and plan is None:
            log_event(
                log,
                logging.INFO,
                "GPU env is not a grant",
                container=container_id,
                env=grant.env_only[:64],
            )
        if grant.system and created:
            log_event(
                log,
                logging.INFO,
                "container sees every device: a system holder, its device nodes are no GPU grant",
                container=container_id,
            )
        return grant

    def _entry(
        self,
        container_id: str,
        pod: PodNames | None,
        container: pb.Container,
        plan: ContainerPlan | None,
        *,
        owed: bool,
        grant: GpuGrant,
    ) -> ContainerEntry:
        """The container's registry entry (for the caller to add), a value: what it can
        open is its grant and what its placement holds (the same GPUs, or, for a record
        written when nri-sla chose GPUs: the GPUs it chose and added). `owed`: a plan's
        direct writes are still to do. `container_id`: `container.id` as the caller read
        it, the string the node's books keep too (each read of a protobuf field makes a new
        one, 113 bytes for a 64-digit id; the registry shares the pod's strings among its
        containers)."""
        held = self.node.allocator.placement_of(container_id)
        opens = (
            NO_GPUS
            if grant.empty and held is None
            else GrantedGpus.of(
                (*grant.gpus, *(held.gpus if held else ())),
                (*grant.migs, *(held.migs if held else ())),
                grant.replicas,
            )
        )
        return ContainerEntry(
            container_id,
            container.pod_sandbox_id,
            _namespace(pod) or "",
            pod.name if pod else "",
            container.name,
            STATE_NAMES.get(container.state, "unknown"),
            opens,
            plan,
            writes_owed=owed and plan is not None,
            cgroups_path=container.linux.cgroups_path,
            pod_uid=pod.uid if pod else "",
        )

    def _entries(
        self,
        pod_of: dict[str, SyncedPod],
        live: Iterable[pb.Container],
        values: list[LiveContainer],
        plans: dict[str, ContainerPlan],
    ) -> list[ContainerEntry]:
        """The registry entries of the live containers a Synchronize reported (`pod_of`:
        pod id -> pod; `values`: what restore read of each), each with the plan its record
        restored (`plans`), once the node holds what each one holds beyond its record (its
        GPU grant, its place in the CPU pool)."""
        grants = [granted_resources(c.linux.resources, c) for c in live]
        books = self.kubelet.for_all() if any(map(asks_kubelet, grants)) else {}
        entries = []
        for c, v, granted in zip(live, values, grants, strict=True):
            pod = pod_of.get(v.pod)
            plan = plans.get(v.id)
            grant = self._grant_of(
                v.id, granted, books.get(_key(pod, c), ()) if books else (), plan, created=False
            )
            # Created but not started yet: StartContainer owes the writes.
            entry = self._entry(
                v.id, pod, c, plan, owed=c.state == pb.CONTAINER_CREATED, grant=grant
            )
            if plan is not None and v.namespace is not None:
                # The resources the runtime reports now rule (a resize while nri-sla was
                # away), as at an UpdateContainer: what the watch reads back and repairs.
                entry.current_plan = recheck(self.node, plan, granted, namespace=v.namespace)
            entries.append(entry)
            # Its placement and RT time were taken from its record (NodeState.restore).
            self.node.admit(
                v.id, None, grant, granted.cpu_request_millis, v.cpus, created=False
            ).commit()
        return entries

    def _publish_holders(self, entry: ContainerEntry) -> None:
        """A new holder: the gauges, and GPUs it shares with another container."""
        if entry.holds:
            self._publish_usage()
        if entry.gpus:
            self._report_shared()

    def _report_shared(self) -> None:
        """GPUs two or more live containers can open: each pair once in the operator's
        log (the kubelet's or an old record's doing: nri-sla adds no GPU), the count of
        those not shared by design (replicas) as nri_sla_gpus_shared."""
        shared = self.registry.shared()
        if any(not s.intended for s in shared) and self._learn_replicas(shared):
            shared = self.registry.shared()
        for s, a, b in self.registry.new_shared_pairs(shared):
            if s.intended:
                log_event(
                    log,
                    logging.INFO,
                    "GPU replicas shared by design",
                    gpu=s.device,
                    container=a.id,
                    other=b.id,
                    pods=f"{a.who}; {b.who}",
                )
            else:
                log_event(
                    log,
                    logging.WARNING,
                    "GPU shared by two containers",
                    gpu=s.device,
                    container=a.id,
                    other=b.id,
                    pods=f"{a.who}; {b.who}",
                )
        self.metrics.set_gpus_shared(sum(not s.intended for s in shared))

    def _learn_replicas(self, shared: list[SharedGpu]) -> bool:
        """GPUs two containers hold by the runtime's evidence (a CDI name, the GPU's node:
        what the device plugin answers for a time-sliced or MPS replica too): the
        kubelet's books say whether those are replicas. One List for each new set of
        such holders; True when an entry learnt it holds a replica."""
        doubt = frozenset((s.device, s.containers) for s in shared if not s.intended)
        if doubt <= self._replicas_asked:
            return False
        self._replicas_asked = doubt
        books = self.kubelet.for_all()
        learnt = False
        for cid in {c for _, holders in doubt for c in holders} if books else ():
            entry = self.registry.get(cid)
            ids = books.get((entry.namespace, entry.pod_name, entry.name), ()) if entry else ()
            held = entry.gpus if entry is not None else NO_GPUS
            replicas = self.node.gpu_grant(NO_EVIDENCE, ids).replicas if ids else frozenset()
            new = replicas & {*held.whole, *(uuid for uuid, _ in held.migs)}
            if entry is not None and not new <= held.replicas:
                entry.gpus = replace(held, replicas=held.replicas | new)
                learnt = True
        return learnt

    def _answer(
        self, plan: ContainerPlan, decision: Decision, container_id: str, container: pb.Container
    ) -> tuple[dict[str, Any], pb.ContainerAdjustment]:
        """The decision event's applied fields and the adjustment for `decision`'s plan
        (`plan`, or the container's own copy of it). A reusable decision hands every
        replica the same plan object, so its record, applied fields and settings are
        built once (kept unchanged: the event's rendering of them is remembered too);
        each container gets its own copy carrying its own record, authenticated for its
        id."""
        inputs = decision.inputs
        known = self._answers.get(inputs) if inputs is not None else None
        if known is not None and known[0] is plan:  # (not a copy of the plan: RT room)
            _, text, applied, settings = known
        else:
            record = record_body(plan, "nri")
            text, settings = record_text(record), build_adjustment(plan, self._hooks)
            applied = applied_fields(record)
            if inputs is not None and plan is decision.plan:
                if len(self._answers) >= REUSABLE_LIMIT:
                    self._answers.clear()
                self._answers[inputs] = (plan, text, applied, settings)
        annotations = self.node.annotations_for(plan, "nri", container_id, text)
        return applied, annotated(annotations, self._pod_set(container, annotations), settings)

    def _pod_set(self, container: pb.Container, answered: dict[str, str]) -> list[str]:
        """nri-sla's own keys the container carries (a pod's runtime handler can copy pod
        annotations into containers) that this answer does not overwrite."""
        present = container.annotations  # (the answer's own keys first: no map lookup)
        return [k for k in self.node.output_keys if k not in answered and k in present]

    def _strip_outputs(self, container: pb.Container) -> pb.ContainerAdjustment | None:
        """No SLA: nothing to set, but a pod-set `applied`/`warnings` must not stay on a
        container nri-sla answered for."""
        stale = self._pod_set(container, {})
        return annotated({}, stale) if stale else None

    @settled
    def start_container(self, pod: pb.PodSandbox, container: pb.Container) -> None:
        with self._timed("StartContainer"):
            self._start(pod, container)

    def _start(self, pod: pb.PodSandbox, container: pb.Container) -> None:
        entry = self.registry.get(container.id)
        if entry is None:
            return
        entry.state = "running"
        plan = entry.decided_plan
        if plan is None or not entry.writes_owed:
            return
        entry.writes_owed = False
        problems = self.node.write_plan(plan, container.linux.cgroups_path, scope="direct")
        for problem in problems:
            log.warning("%s/%s %s: %s", pod.namespace, pod.name, container.name, problem)
        if problems and plan.enforcement == "hard":
            # A container whose start failed never runs (CRI does not start it again: the
            # kubelet creates a new one), so what it holds is free for that one at once.
            self._release(container.id)
            self.events.start_refused(pod.namespace, pod.name, pod.uid, container.name, problems)
            raise StartRefused("; ".join(problems))

    @settled
    def update_container(
        self, pod: pb.PodSandbox, container: pb.Container, resources: pb.LinuxResources
    ) -> list[pb.ContainerUpdate]:
        """kubelet changed the container's resources (a resize): the SLA's settings stay in
        force within the new values. An SLA above them is clamped to them in either mode
        and warned about (core.decision.recheck: a refused update would leave the
        container on its old, larger limits). With or without an SLA, the answer carries
        the container's current cpuset; exclusive CPUs above the new request are given
        back and the neighbours' new cpusets go with it."""
        with self._timed("UpdateContainer"):
            entry = self.registry.get(container.id)
            if entry is None:
                return []
            plan = entry.decided_plan
            granted = granted_resources(resources)
            fitted = None
            if plan is not None:
                fitted = recheck(self.node, plan, granted, namespace=pod.namespace)
                for warning in fitted.warnings[len(plan.warnings) :]:
                    log.warning(
                        "%s/%s %s: update: %s (%s mode: clamped to the new limits)",
                        pod.namespace,
                        pod.name,
                        container.name,
                        warning,
                        plan.enforcement,
                    )
                self.events.resized(
                    pod.namespace,
                    pod.name,
                    pod.uid,
                    container.name,
                    fitted.warnings[len(plan.warnings) :],
                )
                self.watch.refit(entry, fitted)
            self._check_room(pod, container, plan, granted)
            given = self.node.resize_cpus(container.id, granted.cpu_request_millis, pod.namespace)
            if given:
                # Both modes give them back (Kubernetes accounts the new request only);
                # soft mode says so, as its SLA asked for more.
                level = logging.WARNING if plan and plan.enforcement == "soft" else logging.INFO
                log_event(
                    log,
                    level,
                    "exclusive CPUs given back after a resize",
                    container=container.id,
                    cpus=format_cpulist(given),
                    request=f"{granted.cpu_request_millis}m",
                )
                self._publish_usage()  # the gauges follow at once, not at the next holder
            # the container's set now, never the plan's creation-time one
            cpus = self.node.cpusets.answer(container.id, bool(fitted and fitted.cpus))
            others = self._cpuset_updates(container.id)
            if fitted is None and not cpus:
                return others
            update = (
                build_update(container.id, fitted)
                if fitted is not None
                else pb.ContainerUpdate(container_id=container.id)
            )
            if cpus:
                update.linux.resources.cpu.cpus = cpus
            return [update, *others]

    def _check_room(
        self,
        pod: pb.PodSandbox,
        container: pb.Container,
        plan: ContainerPlan | None,
        granted: GrantedResources,
    ) -> None:
        """A resize up whose request the container's cpuset cannot hold (its NUMA nodes'
        CPUs outside every exclusive set are fewer): refused for a hard SLA (the runtime
        keeps the container as it was), logged otherwise."""
        short = self.node.cpusets.short(container.id, granted.cpu_request_millis)
        if short is None:
            return
        need, have = short
        message = (
            f"the CPU request the runtime granted ({granted.cpu_request_millis}m) "
            f"needs {need} whole CPUs; this container's cpuset can hold {have} (node "
            "policy: a cpuset is drawn from its NUMA nodes' CPUs outside every "
            "exclusive set)"
        )
        if plan is not None and plan.enforcement == "hard":
            log.warning(
                "%s/%s %s: update refused: %s", pod.namespace, pod.name, container.name, message
            )
            raise rpc_error(PlanError(plan.key or self.node.prefix, "cpu", message, "limit"))
        log_event(
            log, logging.WARNING, "resize beyond the cpuset", container=container.id, error=message
        )

    @settled
    def stop_container(self, pod: pb.PodSandbox, container: pb.Container):
        with self._timed("StopContainer"):
            self._release(container.id)
            log_given_back(self.node.give_back_rt())  # if runc removed its cgroup already
            return self._cpuset_updates(container.id)

    @settled
    def remove_container(self, pod: pb.PodSandbox, container: pb.Container) -> None:
        with self._timed("RemoveContainer"):
            self._release(container.id)
            # Runc removed the container's cgroup by now: its RT budget leaves its parents.
            log_given_back(self.node.give_back_rt())

    # -- the drift watch ------------------------------------------------------------------
    @settled
    def drift_steps(self) -> Generator[list[pb.ContainerUpdate], None, None]:
        """The service's Periodic: one pass of the drift watch in steps (the loop serves
        requests between them: watch.PASS_STEP); the updates re-assert runtime-applied
        values (sent as UpdateContainers), after the cpusets the CPU pool changed since
        the last answer (exclusive CPUs freed by a RemoveContainer that no StopContainer
        preceded: its answer carries no updates). RT budget raised for containers whose
        cgroup went away since is given back."""
        log_given_back(self.node.give_back_rt())
        yield self._cpuset_updates(exclude="", widen=True)
        yield from self.watch.run()

    def drift_pass(self) -> list[pb.ContainerUpdate]:
        """drift_steps at once: a whole pass and all its updates (the tests' and the
        benchmark's view of one pass)."""
        return [update for step in self.drift_steps() for update in step]

    def status(self, timeout: float) -> dict[str, Any]:
        """The node's status document, read on the service's event loop (called from the
        status socket's thread: the watch's state belongs to the loop)."""
        registered = bool(self._stub is not None and self._stub.registered)
        if self._loop is None or not self._loop.is_running():
            return self._with_gpus(self.watch.last.to_json(registered))

        async def look() -> dict[str, Any]:
            self.settle()
            return self._with_gpus(self.watch.look().to_json(registered))

        return asyncio.run_coroutine_threadsafe(look(), self._loop).result(timeout)

    def _with_gpus(self, doc: dict[str, Any]) -> dict[str, Any]:
        """The status document with the node's GPUs and their health, and the containers
        created unenforced."""
        doc["gpus"] = gpus_json(self.node.allocator.inventory)
        doc["unenforced"] = [u.to_json() for u in self._unenforced.containers]
        return doc

    # -- helpers -------------------------------------------------------------------------
    def _cpuset_updates(self, exclude: str, widen: bool = False) -> list[pb.ContainerUpdate]:
        """Containers whose cpuset in the node's CPU pool must change, with an SLA or not:
        in an answer to a create, stop or resize, only those on CPUs that became
        exclusive (the runtime applies them inside that request); `widen` (the drift
        pass, a restore): also those that get given-back CPUs."""
        changed = self.node.cpusets.updates(exclude, widen)
        if not changed:  # (nearly every CreateContainer)
            return []
        updates = []
        for owner, cpus in changed.items():
            update = pb.ContainerUpdate(container_id=owner, ignore_failure=True)
            update.linux.resources.cpu.cpus = cpus
            updates.append(update)
        self.watch.expect_change(u.container_id for u in updates)
        return updates

    def _timed(self, event: str):
        return self.metrics.time(event)

    def _release(self, container_id: str) -> None:
        """The container is gone: its entry (and the watch's memory of it) and what the
        node gave it."""
        entry = self.registry.remove(container_id)
        self.node.release(container_id)
        if entry is None:
            return
        if entry.holds:
            self._publish_usage()  # only holdings change the gauges
        if entry.gpus:
            self._report_shared()

    def _observe(
        self,
        event: str,
        started: float,
        decision: Decision,
        applied: dict[str, Any],
        namespace: str,
        pod: str,
        container: str,
    ) -> None:
        """The decision's line and its counts. Served from the loop, both wait for the
        end of its turn, when the answer has been written: the runtime does not wait for
        them (prometheus_client's histogram and counter, with their locks: 2.1 µs hot,
        several times that with cold caches; the line: ops.logsetup)."""
        decided = decision.outcome != "skipped"
        if decided:
            log_decision(
                DecisionEvent(
                    namespace,
                    pod,
                    container,
                    "nri",
                    decision.outcome,
                    applied,
                    decision.warnings,
                    decision.error_text,
                )
            )
        counts = (
            event,
            time.perf_counter() - started,
            decision.outcome if decided else None,
            decision.reason,
        )
        if self._loop is not None and self._loop.is_running():
            self._loop.call_soon(self._count, *counts)
        else:
            self._count(*counts)

    def _count(self, event: str, seconds: float, outcome: str | None, reason: str) -> None:
        self.metrics.observe(event, seconds)
        if outcome is not None:
            self.metrics.record_decision(outcome, reason)

    def _publish_usage(self) -> None:
        gpus, cpus = self.node.usage()
        self.metrics.set_gpus_in_use(gpus)
        self.metrics.set_exclusive_cpus_in_use(cpus)
        self.metrics.set_gpus_missing(len(self.node.allocator.missing_gpus()))
        self._publish_gpu_health()

    def _publish_gpu_health(self) -> None:
        self.metrics.set_gpu_health(self.node.allocator.inventory.gpus)


class PodNames(Protocol):
    """What a container's entry reads of its pod: the runtime's PodSandbox, or what a
    Synchronize's restore kept of one (SyncedPod)."""

    @property
    def namespace(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def uid(self) -> str: ...


def _key(pod: PodNames | None, container: pb.Container) -> tuple[str, str, str]:
    """How the kubelet's PodResources names a container."""
    return (pod.namespace, pod.name, container.name) if pod else ("", "", container.name)


def _namespace(pod: PodNames | None) -> str | None:
    """The container's pod's namespace; None: the runtime sent no pod for it."""
    return pod.namespace if pod is not None else None
