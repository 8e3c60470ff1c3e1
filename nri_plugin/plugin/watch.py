"""The drift watch: every enforced value of every started SLA container, read back on a
schedule, with the container's compliance signals read in the same pass.

A value that differs from the plan (drift: a `systemctl daemon-reload` re-applying unit
properties, another agent, a person) is logged once per change and counted
(`nri_sla_drift_detected_total{kind}`). Hard mode repairs it: nri-sla's own direct
writes are written again through the one writer; values the runtime applied from the
adjustment are re-asserted through the runtime (a ContainerUpdate, sent as a
plugin-initiated UpdateContainers) and verified on the next pass. Soft mode only
reports. A repair that fails is logged and counted, and the container's next repair
waits 2, 4, 8, ... passes (at most `repair_backoff_max`), so a value that cannot be held
never costs a write per pass.

The watch follows the registry's entries that have a plan in force (plugin.registry: the
handlers add, start and drop them there) and keeps its memory of each in the entry
(`DriftMemory`); the handlers tell it what nri-sla itself changed (`refit`,
`expect_change`); the service's Periodic runs `run`'s steps (the loop serves requests
between them); `look` reads everything for `nri-sla status` without acting.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Generator, Iterable
from dataclasses import dataclass

from nri_plugin.core.nodestate import NodeState
from nri_plugin.enforce.cgfile import CgroupWrite, CgroupWriter, Mismatch
from nri_plugin.enforce.compliance import Compliance, CpuThrottling, read_compliance
from nri_plugin.enforce.plan_writes import cgroup_writes
from nri_plugin.errors import SlaFailure
from nri_plugin.nri.pb import nri_pb2 as pb
from nri_plugin.ops.logsetup import log_event
from nri_plugin.ops.metrics import MetricsSink
from nri_plugin.plan.model import ContainerPlan
from nri_plugin.plugin.adjustment import build_update
from nri_plugin.plugin.pod_events import NO_EVENTS, PodEvents
from nri_plugin.plugin.registry import (
    NO_PENDING,
    ContainerEntry,
    ContainerRegistry,
    DriftMemory,
)
from nri_plugin.plugin.report import ContainerReport, NodeReport, SettingReport
from nri_plugin.value import replace

log = logging.getLogger("nri_sla.watch")

WATCHED = "watched"
NOT_STARTED = "not started"
SETTLING = "settling"  # nri-sla changed what it expects since the last pass
# Hard-mode containers read back in a Synchronize's restore, their drift repaired in its
# UpdateContainers; the others (and soft mode's reports, and every container's signals)
# wait for the next periodic pass: every request that comes meanwhile waits for the
# restore (containerd's own time limit: 2 s), on a node of thousands of containers.
SYNC_READBACK = 16
# Containers read back per step of a periodic pass: the service's loop answers the
# runtime's requests between steps, so a CreateContainer that arrives during a pass waits
# for at most one step, not the pass. At 0.1-0.2 ms of CPU per container
# (docs/benchmarks.md, "Drift watch") a step holds the loop 3-6 ms, against 1-2 s for a
# whole pass over 10,000 containers; each step costs one loop iteration more (tens of
# microseconds, about 1% of the step).
PASS_STEP = 32
KIND = {"cpu": "cpu", "cpuset": "cpuset", "memory": "memory", "blkio": "io", "io": "io"}


@dataclass(frozen=True)
class _Reading:
    """One container read back: its settings (direct or through the runtime), which of
    them differ, its signals, and the plan they came from (with the current cpuset)."""

    plan: ContainerPlan
    via: dict[CgroupWrite, str]
    drifted: dict[CgroupWrite, Mismatch]
    compliance: Compliance | None


class DriftWatch:
    def __init__(
        self,
        node: NodeState,
        registry: ContainerRegistry,
        metrics: MetricsSink,
        *,
        interval: float,
        backoff_max: float,
        clock: Callable[[], float] = time.monotonic,
        events: PodEvents = NO_EVENTS,
    ) -> None:
        self.node = node
        self.events = events
        self.registry = registry
        self.metrics = metrics
        self.interval = interval
        self.backoff_max = backoff_max
        self.clock = clock
        self.last = NodeReport(time.time(), interval)  # the last pass, for the metrics

    # -- what nri-sla itself changed --------------------------------------------------------
    def refit(self, entry: ContainerEntry, plan: ContainerPlan) -> None:
        """The runtime was told new values (UpdateContainer): they are what holds now."""
        if entry.current_plan is not None and entry.current_plan != plan:
            entry.current_plan = plan
            _memory(entry).settling = True

    def expect_change(self, container_ids: Iterable[str]) -> None:
        """nri-sla just sent these containers new values (a cpuset): until the runtime
        applied them, their old values are not drift."""
        for container_id in container_ids:
            entry = self.registry.get(container_id)
            if entry is not None and entry.current_plan is not None:
                _memory(entry).settling = True

    # -- passes --------------------------------------------------------------------------
    def run(self) -> Generator[list[pb.ContainerUpdate], None, None]:
        """One pass in steps of `PASS_STEP` containers: read back, log and count drift,
        repair (hard mode), collect the signals; each step yields the updates that
        re-assert its runtime-applied values. The containers are those watched when the
        pass starts: one removed (or replaced by a retried CreateContainer) before its
        step is skipped, one added meanwhile waits for the next pass. `last` is replaced
        and the pass's time (its steps', not the requests' between them) observed once
        the last step is done; a pass closed before that leaves both as they were."""
        spent = 0.0
        started = time.perf_counter()
        now = self.clock()
        watched = self.registry.watched()
        reports = []
        for first in range(0, len(watched), PASS_STEP):
            updates = []
            for entry in watched[first : first + PASS_STEP]:
                if self.registry.get(entry.id) is not entry or entry.current_plan is None:
                    continue  # removed, replaced or unplanned since the pass began
                report, update = self._pass_one(entry, now)
                reports.append(report)
                if update is not None:
                    updates.append(update)
            spent += time.perf_counter() - started
            yield updates
            started = time.perf_counter()
        self.last = NodeReport(time.time(), self.interval, tuple(reports))
        self.metrics.observe("DriftWatch", spent + time.perf_counter() - started)

    def run_in_sync(self) -> list[pb.ContainerUpdate]:
        """The pass in a Synchronize's restore: drift found meanwhile in the first
        `SYNC_READBACK` started hard-mode containers, logged, counted and repaired (the
        updates go in the restore's UpdateContainers); nothing else read, `last`
        unchanged."""
        now = self.clock()
        updates = []
        checked = 0
        for entry in self.registry:
            plan = entry.current_plan
            if plan is None or plan.enforcement != "hard" or not entry.started:
                continue
            if checked == SYNC_READBACK:
                break
            checked += 1
            _, update = self._pass_one(entry, now, signals=False)
            if update is not None:
                updates.append(update)
        return updates

    def look(self) -> NodeReport:
        """Everything read now, nothing logged, counted or repaired (`nri-sla status`)."""
        reports = []
        for watched in self.registry.watched():
            reading, state = self._read(watched)
            memory = _memory(watched)
            ratio = memory.throttled_ratio
            if reading is not None and reading.compliance is not None:
                # Since the last pass; the last pass's own when no period ran since.
                since = _ratio(memory.cpu, reading.compliance.cpu, idle=None)
                ratio = ratio if since is None else since
            reports.append(self._report(watched, reading, state, ratio))
        return NodeReport(time.time(), self.interval, tuple(reports))

    def _pass_one(
        self, watched: ContainerEntry, now: float, signals: bool = True
    ) -> tuple[ContainerReport, pb.ContainerUpdate | None]:
        """One container read back (`signals`: its compliance signals too), its drift
        noted and (hard mode) repaired."""
        reading, state = self._read(watched, signals)
        memory = _memory(watched)
        if reading is None:
            return self._report(watched, None, state, None), None
        if signals:
            cpu = reading.compliance.cpu if reading.compliance else None
            memory.throttled_ratio = _ratio(memory.cpu, cpu)
            memory.cpu = cpu
        update = None
        if memory.settling:  # checked again next pass, once the runtime applied them
            memory.settling = False
            state = SETTLING
        else:
            self._verify(watched, reading, now)
            self._note(watched, reading)
            if reading.drifted and reading.plan.enforcement == "hard" and now >= memory.retry_at:
                update = self._repair(watched, reading, now)
        return self._report(watched, reading, state, memory.throttled_ratio), update

    def _read(self, watched: ContainerEntry, signals: bool = True) -> tuple[_Reading | None, str]:
        if not watched.started:
            return None, NOT_STARTED
        memory = _memory(watched)
        if memory.writer is None:
            try:
                memory.writer = CgroupWriter(self.node.container_paths(watched.cgroups_path))
            except SlaFailure as exc:
                return None, f"no cgroup: {exc}"
        writer = memory.writer
        plan, via = self._expected(watched)
        drifted = {m.write: m for m in writer.mismatches(via)}
        if any(m.found is None for m in drifted.values()) and writer.paths.missing():
            return None, "cgroup gone (the container exited?)"
        compliance = read_compliance(writer.paths) if signals else None
        return _Reading(plan, via, drifted, compliance), WATCHED

    def _expected(self, watched: ContainerEntry) -> tuple[ContainerPlan, dict[CgroupWrite, str]]:
        """The plan with the cpuset the container should have now, and its settings:
        CgroupWrite -> "runtime" (the adjustment's) or "direct" (nri-sla's own write)."""
        cpus = self.node.cpusets.cpuset_of(watched.id)
        memory = _memory(watched)
        current = watched.current_plan
        assert current is not None  # a watched entry has a plan in force
        known = memory.expected
        if known is not None and known[0] is current and known[1] == cpus:
            return known[2], known[3]
        plan = current
        if (
            cpus
            and cpus != plan.cpus
            and (plan.cpus or not self.node.cpusets.runs_everywhere(cpus))
        ):
            plan = replace(plan, cpus=cpus)
        bfq = self.node.capabilities.bfq
        via = dict.fromkeys(cgroup_writes(plan, "runtime", bfq), "runtime")
        via.update(dict.fromkeys(cgroup_writes(plan, "direct", bfq), "direct"))
        memory.expected = (current, cpus, plan, via)
        return plan, via

    def _report(
        self, watched: ContainerEntry, reading: _Reading | None, state: str, ratio: float | None
    ) -> ContainerReport:
        plan = reading.plan if reading is not None else watched.current_plan
        assert plan is not None  # a watched entry has a plan in force
        settings: tuple[SettingReport, ...] = ()
        if reading is not None:
            settings = tuple(
                _setting(write, via, reading.drifted.get(write))
                for write, via in reading.via.items()
            )
        return ContainerReport(
            watched.id,
            watched.namespace,
            watched.pod_name,
            watched.name,
            plan,
            state,
            settings,
            _memory(watched).repair,
            reading.compliance if reading else None,
            ratio,
            plan.cpus or "",
            self.node.cpusets.exclusive_of(watched.id),
        )

    # -- drift -----------------------------------------------------------------------------
    def _note(self, watched: ContainerEntry, reading: _Reading) -> None:
        """Log and count each drifted value once per change; note those that hold again."""
        hard = reading.plan.enforcement == "hard"
        reported = _memory(watched).reported
        for write, mismatch in reading.drifted.items():
            seen = (mismatch.found, mismatch.error or "")
            if reported.get(write) == seen:
                continue
            reported[write] = seen
            self._count_drift(write)
            setting = f"{write.controller}/{write.file}"
            found = (
                mismatch.found if mismatch.found is not None else f"unreadable: {mismatch.error}"
            )
            log_event(
                log,
                logging.WARNING,
                "drift",
                **_fields(watched),
                file=setting,
                expected=write.value,
                found=found,
                via=reading.via[write],
                action="repair" if hard else "reported (soft mode)",
            )
            self.events.drift(watched, setting, write.value, found, hard)
        for write in [w for w in reported if w not in reading.drifted]:
            del reported[write]
            log_event(
                log,
                logging.INFO,
                "drift gone",
                **_fields(watched),
                file=f"{write.controller}/{write.file}",
                value=write.value,
            )

    def _verify(self, watched: ContainerEntry, reading: _Reading, now: float) -> None:
        """The runtime was asked to re-assert `pending` last pass: did it? (Values no
        longer expected, e.g. a cpuset nri-sla changed since, are neither.)"""
        memory = _memory(watched)
        pending = [w for w in memory.pending if w in reading.via]
        memory.pending = NO_PENDING
        if not pending:
            return
        drifted = reading.drifted
        still = [w for w in pending if w in drifted]
        for write in pending:
            self._count_repair(write, "failed" if write in drifted else "repaired")
            if write not in drifted:
                memory.reported.pop(write, None)  # logged as repaired, not as gone
        if still:
            self._failed(
                watched,
                "the runtime's update did not restore "
                + ", ".join(f"{w.controller}/{w.file}" for w in still),
                now,
            )
        else:
            self._succeeded(watched, "through the runtime")

    def _repair(
        self, watched: ContainerEntry, reading: _Reading, now: float
    ) -> pb.ContainerUpdate | None:
        direct = [w for w in reading.drifted if reading.via[w] == "direct"]
        runtime = [w for w in reading.drifted if reading.via[w] == "runtime"]
        memory = _memory(watched)
        assert memory.writer is not None  # read through it just now
        problems = []
        for result in memory.writer.apply(direct):
            self._count_repair(result.write, "repaired" if result.ok else "failed")
            if result.ok:
                memory.reported.pop(result.write, None)
            else:
                problems.append(str(result.error))
        if problems:
            self._failed(watched, "; ".join(problems), now)
        elif direct and not runtime:
            self._succeeded(watched, "rewritten")
        if not runtime:
            return None
        memory.pending = frozenset(runtime)
        if not problems:
            memory.repair = "requested through the runtime"
        log_event(
            log,
            logging.INFO,
            "drift repair requested",
            **_fields(watched),
            files=",".join(f"{w.controller}/{w.file}" for w in runtime),
        )
        return build_update(watched.id, reading.plan)

    def _failed(self, watched: ContainerEntry, why: str, now: float) -> None:
        memory = _memory(watched)
        memory.failures += 1
        delay = min(self.interval * 2**memory.failures, self.backoff_max)
        memory.retry_at = now + delay
        memory.repair = f"failed: {why}; next try in {delay:g}s"
        log_event(
            log,
            logging.WARNING,
            "drift repair failed",
            **_fields(watched),
            error=why,
            failures=memory.failures,
            retry_in=f"{delay:g}s",
        )
        self.events.repair_failed(watched, why)

    def _succeeded(self, watched: ContainerEntry, how: str) -> None:
        memory = _memory(watched)
        memory.failures = 0
        memory.retry_at = 0.0
        memory.repair = ""
        log_event(log, logging.INFO, "drift repaired", **_fields(watched), how=how)
        self.events.repaired(watched, how)

    def _count_drift(self, write: CgroupWrite) -> None:
        self.metrics.record_drift(KIND[write.controller])

    def _count_repair(self, write: CgroupWrite, outcome: str) -> None:
        self.metrics.record_repair(KIND[write.controller], outcome)


def _memory(entry: ContainerEntry) -> DriftMemory:
    """What the watch keeps of `entry` (made at its first look: an entry without a plan
    in force never needs one)."""
    if entry.drift is None:
        entry.drift = DriftMemory()
    return entry.drift


def _fields(entry: ContainerEntry) -> dict[str, str]:
    return {
        "pod": f"{entry.namespace}/{entry.pod_name}",
        "container": entry.name,
        "id": entry.id[:12],
    }


def _setting(write: CgroupWrite, via: str, mismatch: Mismatch | None) -> SettingReport:
    if mismatch is None:
        return SettingReport(write.controller, write.file, write.value, via)
    return SettingReport(
        write.controller, write.file, write.value, via, mismatch.found, mismatch.error or ""
    )


def _ratio(
    before: CpuThrottling | None, now: CpuThrottling | None, idle: float | None = 0.0
) -> float | None:
    """Throttled / periods between two samples; `idle` when no period ran between them
    (nothing ran against its quota). None without an earlier sample, or when the
    counters went back (a new cgroup under the same path)."""
    if (
        before is None
        or now is None
        or now.periods < before.periods
        or now.throttled < before.throttled
    ):
        return None
    periods = now.periods - before.periods
    return (now.throttled - before.throttled) / periods if periods else idle
