"""SlaPlugin's Synchronize half: the answer, and the restore right after it.

Synchronize brings the runtime's whole state; it is answered at once (the runtime holds
its events until then), and the restore runs on the loop's next turn, before anything
else (`settled`): the allocations rebuilt from the `applied` records on the live
containers, the registry rebuilt with one entry per container, containers created while
the plugin was away (an SLA asked, no record) reported, and the updates that follow sent
as one UpdateContainers. `SynchronizeRestore` is a collaborator `SlaPlugin`
(plugin.handlers) owns, given the books it rebuilds and the create path's pieces it uses.

The containers are read one at a time, in passes over the request (the stub hands them
on encoded: nri.wire.LazyMessages), and only what restore needs of each is kept
(`LiveContainer`, `SyncedPod`): the parsed request never lives whole.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import logging
from collections.abc import Callable, Collection, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from nri_plugin.core.nodestate import NodeState
from nri_plugin.core.restore import restore as restore_node
from nri_plugin.core.restored import LiveContainer, Restored
from nri_plugin.enforce.rt import RtChange
from nri_plugin.granted import limits_only
from nri_plugin.nri.errors import ConnectionClosed
from nri_plugin.nri.heap import TRIM_AFTER_CONTAINERS, release_freed_heap
from nri_plugin.nri.pb import nri_pb2 as pb
from nri_plugin.nri.service import send_updates
from nri_plugin.ops.logsetup import log_event
from nri_plugin.ops.metrics import MetricsSink
from nri_plugin.plan.model import ContainerPlan
from nri_plugin.plugin.registry import ContainerEntry, ContainerRegistry
from nri_plugin.plugin.synced import SyncedPod
from nri_plugin.plugin.unenforced import (
    LIVE_STATES,
    UnenforcedContainers,
    Unrecorded,
    hook_enforced,
)
from nri_plugin.plugin.watch import DriftWatch
from nri_plugin.topology.cpulist import format_cpulist

log = logging.getLogger("nri_sla.plugin")
_R = TypeVar("_R")


@dataclass(frozen=True, slots=True)
class RuntimeState:
    """What a Synchronize brought: the runtime's pods and containers, to restore from."""

    pods: Collection[pb.PodSandbox]  # each pass decodes them again (LazyMessages)
    containers: Collection[pb.Container]


class LiveContainers:
    """The live ones (created, running, paused) of a Synchronize's containers, found
    again on each pass: of a lazy collection, one container's message at a time."""

    __slots__ = ("containers",)

    def __init__(self, containers: Collection[pb.Container]) -> None:
        self.containers = containers

    def __iter__(self) -> Iterator[pb.Container]:
        return (c for c in self.containers if c.state in LIVE_STATES)


def settled(entry: Callable[..., _R]) -> Callable[..., _R]:
    """A way into the plugin from outside (the runtime's events, the service's schedule,
    the status socket, a config reload): a restore the last Synchronize answer left
    pending finishes first (`SynchronizeRestore.settle`), so none sees the plugin half
    restored. For the methods of an object with a `restorer`."""

    @functools.wraps(entry)
    def after_restore(self: Any, *args: Any) -> _R:
        restorer = self.restorer
        if restorer.pending is not None:
            restorer.settle()
        return entry(self, *args)

    return after_restore


class SynchronizeRestore:
    """The Synchronize handler and the restore after it, for `SlaPlugin`: the books it
    rebuilds (`node`, `registry`) and reports to (`metrics`, `watch`, `unenforced`), and
    the plugin's pieces it runs: `rescan_inventory` (the node's GPUs read again),
    `entries` (the registry entries of the live containers), `cpuset_updates` (the CPU
    pool's changes as updates), `publish_usage` and `report_shared` (the gauges and the
    GPUs shared after a rebuild). `attach` gives it the registered stub and its loop."""

    def __init__(
        self,
        node: NodeState,
        registry: ContainerRegistry,
        metrics: MetricsSink,
        watch: DriftWatch,
        unenforced: UnenforcedContainers,
        *,
        rescan_inventory: Callable[[], None],
        entries: Callable[
            [
                dict[str, SyncedPod],
                Iterable[pb.Container],
                list[LiveContainer],
                dict[str, ContainerPlan],
            ],
            Iterable[ContainerEntry],
        ],
        cpuset_updates: Callable[[str, bool], list[pb.ContainerUpdate]],
        publish_usage: Callable[[], None],
        report_shared: Callable[[], None],
    ) -> None:
        self.node = node
        self.registry = registry
        self.metrics = metrics
        self.watch = watch
        self.unenforced = unenforced
        self.rescan_inventory = rescan_inventory
        self.entries = entries
        self.cpuset_updates = cpuset_updates
        self.publish_usage = publish_usage
        self.report_shared = report_shared
        self._stub: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.pending: RuntimeState | None = None  # a Synchronize answered, not restored
        self._unsent: list[pb.ContainerUpdate] = []  # a restore's, before registration
        self._sending: set[asyncio.Future[None]] = set()  # the restores' UpdateContainers

    def attach(self, stub: Any, loop: asyncio.AbstractEventLoop) -> None:
        """The stub is registered (on its loop): a pending restore runs now, and the
        updates of one that ran before are sent."""
        self._stub, self._loop = stub, loop
        self.settle()
        self.send_unsent()

    def synchronize(
        self, pods: Collection[pb.PodSandbox], containers: Collection[pb.Container]
    ) -> None:
        """The runtime's whole state, answered at once with no updates: the runtime holds
        its pod and container events until this answer (containerd: 2 s by default), and
        the restore that follows it (`restore`) takes ~35 ms per 1,000 containers. It
        runs on the loop's next turn (the first of a connection: once registered), before
        anything else: every entry the runtime, the schedule, the status socket or a
        reload reaches (`settled`) finishes a pending restore first, so nothing sees the
        plugin between the answer and the restore. Its updates go to the runtime as one
        UpdateContainers. A second Synchronize (a reconnect) replaces a restore still
        pending: its state is the runtime's now."""
        self.pending = RuntimeState(pods, containers)
        if self._loop is not None and self._stub is not None and self._stub.registered:
            self._loop.call_soon(self.settle)
        # Else the stub has not taken its registration in yet (the runtime sends
        # Synchronize right after Configure): attach runs it, once the plugin is
        # registered (and ready, for the health probe); an entry reached before runs it
        # first. Outside a service (tests, benches): restore(), or the next entry.

    def settle(self) -> None:
        """The restore a Synchronize's answer left pending, now; its updates sent as one
        UpdateContainers. A restore that raises is logged (an internal failure: the state
        is as far as it got, the next Synchronize rebuilds it) and not run again."""
        if self.pending is None:
            return
        try:
            updates = self.restore()
        except Exception:
            log.exception(
                "restore after Synchronize failed (internal); the plugin goes on "
                "with the state as far as it got until the next Synchronize"
            )
            return
        if updates:
            self._unsent = updates
            self.send_unsent()

    def send_unsent(self) -> None:
        """The last restore's updates on their way, once the stub is registered (an
        entry reached before attach ran the restore: attach sends them)."""
        if not self._unsent or self._stub is None or not self._stub.registered:
            return
        sending = asyncio.ensure_future(self._send_restored(self._unsent))
        self._unsent = []
        self._sending.add(sending)  # (the loop keeps only a weak reference to a task)
        sending.add_done_callback(self._sending.discard)

    async def restored(self) -> None:
        """Returns once no restore is pending and the restores' UpdateContainers are
        answered: the runtime holds what the restore sent (what a caller that looks at
        the runtime right after a Synchronize waits for: the tests)."""
        self.settle()
        while self._sending or (self._unsent and self._stub is not None):
            if self._sending:
                await asyncio.wait(set(self._sending))
            else:  # the stub takes its registration in a turn or two after Configure
                await asyncio.sleep(0.001)

    def restore(self) -> list[pb.ContainerUpdate]:
        """Rebuild every owner (allocator, RT budget, CPU pool, the registry's entries)
        from the live containers of the last Synchronize alone: after any disconnect the
        plugin holds exactly what they hold. A record that is not taken is logged and
        counted, and changes nothing for any other container. Returns the updates for the
        runtime: aligned containers whose node got back exclusive CPUs (their holders went
        away meanwhile) get their wider cpuset, drift found meanwhile is repaired ([]
        when no restore is pending)."""
        state, self.pending = self.pending, None
        if state is None:
            return []
        with self.metrics.time("Synchronize"), collector_paused():
            count = self._rebuild(state)
            del state  # the request's bytes are let go before the steps below run
            self.publish_usage()
            self.report_shared()
            updates = self.cpuset_updates("", True)  # given-back CPUs reach everyone
            if self.watch.interval:  # drift while disconnected: repaired at once
                updates += self.watch.run_in_sync()  # (on a large node, partly: watch.py)
            if count >= TRIM_AFTER_CONTAINERS and self._loop is not None:
                # Once the runtime's state is let go (the next loop turn).
                self._loop.call_soon(release_freed_heap)
            return updates

    def _rebuild(self, state: RuntimeState) -> int:
        """The books and the registry rebuilt from `state`, in passes over its containers
        (each decoded again, one at a time); the direct writes owed done. Returns how
        many containers the runtime reported."""
        pods, containers = state.pods, state.containers
        self.rescan_inventory()  # records may name GPUs that came (or went) meanwhile
        pod_of = {pod.id: pod for pod in map(SyncedPod.of, pods)}
        namespaces = {pod_id: pod.namespace for pod_id, pod in pod_of.items()}
        applied = self.node.output_keys[0]
        live = LiveContainers(containers)
        # What the steps share of each container read once, and only that kept.
        values: list[LiveContainer] = []
        unrecorded: dict[str, Unrecorded] = {}  # what the unenforced report needs
        for container in live:
            value = live_container(container, namespaces, applied)
            values.append(value)
            if value.record is None:
                unrecorded[value.id] = (container.name, hook_enforced(container))
        restored = restore_node(self.node, values)
        log_given_back(restored.rt_given_back)
        for owner, cpus in restored.cpus_given_back.items():
            log_event(
                log,
                logging.INFO,
                "exclusive CPUs given back after a resize",
                container=owner,
                cpus=format_cpulist(cpus),
                when="while away",
            )
        self._report_restore_problems(restored)
        # Before the registry is rebuilt: what it knew needs no second look.
        unenforced = self.unenforced.report(self.node.config, pod_of, values, unrecorded)
        for value in self._rebuild_registry(pod_of, live, values, restored.plans, unenforced):
            self._write_owed(value)
        log.info(
            "synchronized: %d pods, %d containers, %d allocations rebuilt, %d "
            "records ignored, %d owners released, %d created unenforced",
            len(pods),
            len(containers),
            len(restored.plans),
            len(restored.rejected),
            len(restored.released),
            len(unenforced),
        )
        return len(containers)

    async def _send_restored(self, updates: list[pb.ContainerUpdate]) -> None:
        """The restore's updates as one UpdateContainers; then each cpuset an answer
        changed while they were on their way, again as it is now (`overtaken`)."""
        try:
            await send_updates(
                self._stub, updates, "restore after Synchronize", again=self.overtaken
            )
        except ConnectionClosed:
            return  # the next connection's Synchronize rebuilds everything
        except Exception:  # as the periodic work's: logged, the service goes on
            log.exception("restore after Synchronize: sending its updates failed")

    def overtaken(self, sent: list[pb.ContainerUpdate]) -> list[pb.ContainerUpdate]:
        """The containers of `sent` whose cpuset changed since it was made, with the one
        they have now. containerd applies a plugin's UpdateContainers under the lock its
        CreateContainer holds while it waits for the answer, so a CreateContainer answered
        meanwhile (right after the Synchronize answer, or between two steps of a drift
        pass), that took exclusive CPUs from one of them, had its answer applied first:
        `sent` would leave that container on them."""
        again = []
        for update in sent:
            cpus = update.linux.resources.cpu.cpus
            now = self.node.cpusets.cpuset_of(update.container_id) if cpus else ""
            if now and now != cpus:
                change = pb.ContainerUpdate(container_id=update.container_id, ignore_failure=True)
                change.linux.resources.cpu.cpus = now
                again.append(change)
        self.watch.expect_change(u.container_id for u in again)
        return again

    def _report_restore_problems(self, restored: Restored) -> None:
        """Each record restore did not take, and each it took outside the node policy:
        one line and one count (a forged or stale record is a tenant's doing or an
        operator's to act on, never a reason to fail the Synchronize)."""
        for rejection in restored.rejected:
            log_event(
                log,
                logging.WARNING,
                "record ignored",
                container=rejection.container,
                problem=rejection.problem,
                error=rejection.message,
            )
            self.metrics.record_rejected(rejection.problem)
        for breach in restored.out_of_policy:
            log_event(
                log,
                logging.WARNING,
                "record outside the node policy",
                container=breach.container,
                error=breach.message,
            )
            self.metrics.record_out_of_policy()

    def _rebuild_registry(
        self,
        pod_of: dict[str, SyncedPod],
        live: LiveContainers,
        values: list[LiveContainer],
        plans: dict[str, ContainerPlan],
        unenforced: list[str],
    ) -> list[LiveContainer]:
        """One entry per live container (`values`: what restore read of each), its plan
        the one its record restored, marked when it was created unenforced (`unenforced`:
        their ids); returns the containers whose direct writes are owed now: started
        while nri-sla was away (not by this process, or before it saw the start), so no
        StartContainer will come for them."""
        started_away = []
        for value in values:
            if value.id not in plans or not value.started:
                continue
            known = self.registry.get(value.id)
            if known is None or known.decided_plan is None or known.writes_owed:
                started_away.append(value)
        self.registry.replace(self.entries(pod_of, live, values, plans), unenforced)
        return started_away

    def _write_owed(self, container: LiveContainer) -> None:
        """The direct writes of a container that started while nri-sla was away. It runs
        already, so hard mode cannot refuse it any more: what fails is a warning."""
        entry = self.registry.get(container.id)
        assert entry is not None and entry.decided_plan is not None  # _rebuild_registry's
        problems = self.node.write_plan(
            entry.decided_plan, container.cgroups_path, scope="direct", undo_on_failure=False
        )
        if problems:
            log_event(
                log,
                logging.WARNING,
                "direct writes after a missed start failed",
                container=container.id,
                error="; ".join(problems),
            )


@contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off while a Synchronize is handled. A
    Synchronize makes tens of objects per container that all stay (the registry,
    the pool, the plans): at 10,000 containers the collector ran about 80 times inside
    the handler, a full pass over the heap among them, 25-80 ms of the runtime's
    deadline spent finding no garbage. Back on when the handler ends, whatever way
    (its next pass looks at the new objects once)."""
    if not gc.isenabled():  # someone else's choice: left alone
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def log_given_back(changes: list[RtChange]) -> None:
    """What the RT budget gave back (a container's cgroup gone): one line each."""
    for change in changes:
        log_event(
            log,
            logging.INFO,
            "RT budget given back",
            cgroup=str(change.path),
            before=change.old_us,
            now=change.new_us,
        )


def live_container(
    container: pb.Container, namespaces: dict[str, str], applied: str
) -> LiveContainer:
    """What restore needs of a live container; `namespaces`: pod id -> its namespace,
    `applied`: the annotation of nri-sla's record. Each field read once (each read of a
    protobuf field makes a new object), and none kept that refers into the message."""
    pod_id, linux = container.pod_sandbox_id, container.linux
    cpu = linux.resources.cpu
    request = limits_only(cpu.quota.value, cpu.period.value, cpu.shares.value, 0)
    return LiveContainer(
        container.id,
        namespaces.get(pod_id),
        container.annotations.get(applied),
        container.created_at,
        cpu.cpus,
        pod_id,
        linux.cgroups_path,
        request.cpu_request_millis,
        started=container.state != pb.CONTAINER_CREATED,
    )
