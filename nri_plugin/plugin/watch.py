"""The drift watch: every enforced value of every started SLA container, read back on a
schedule, with the container's compliance signals read in the same pass.

A value that differs from the plan (drift: a `systemctl daemon-reload` re-applying unit
properties, another agent, a person) is logged once per change and counted
(`nri_sla_drift_detected_total{kind}`). Hard mode repairs it: nri-sla's own direct
writes are written again through the one writer; values the runtime applied from the
adjustment are re-asserted through the runtime (a ContainerUpdate, sent as a
plugin-initiated UpdateContainers or in the Synchronize answer) and verified on the next
pass. Soft mode only reports. A repair that fails is logged and counted, and the
container's next repair waits 2, 4, 8, ... passes (at most `repair_backoff_max`), so a
value that cannot be held never costs a write per pass.

The plugin's handlers keep the membership (`watch`, `started`, `refit`, `forget`,
`replace`); the service's Periodic calls `run`; `look` reads everything for `nri-sla
status` without acting.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

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
from nri_plugin.plugin.report import ContainerReport, NodeReport, SettingReport

log = logging.getLogger("nri_sla.watch")

WATCHED = "watched"
NOT_STARTED = "not started"
SETTLING = "settling"  # nri-sla changed what it expects since the last pass
KIND = {"cpu": "cpu", "cpuset": "cpuset", "memory": "memory", "blkio": "io", "io": "io"}


@dataclass(eq=False)
class Watched:
    """One SLA container the watch follows, and what it keeps between passes."""

    id: str
    namespace: str
    pod: str
    name: str
    cgroups_path: str
    plan: ContainerPlan  # what is enforced now: the creation plan, refitted on updates
    started: bool = False  # StartContainer done: direct writes made, process running
    settling: bool = False  # expectations changed by nri-sla itself since the last pass
    writer: CgroupWriter | None = None
    # Drift already logged: setting -> (found, error) as reported (logged once per change).
    reported: dict[CgroupWrite, tuple[str | None, str]] = field(default_factory=dict)
    pending: set[CgroupWrite] = field(default_factory=set)  # re-asserted via the runtime
    failures: int = 0  # failed repairs in a row
    retry_at: float = 0.0  # monotonic time before which no repair is tried
    repair: str = ""
    cpu: CpuThrottling | None = None  # the last pass's sample
    throttled_ratio: float | None = None
    # (plan, cpuset) -> the plan with that cpuset and its settings by how they are set:
    # built again only when either changes.
    expected: tuple[ContainerPlan, str, ContainerPlan, dict[CgroupWrite, str]] | None = None

    def fields(self) -> dict[str, str]:
        return {"pod": f"{self.namespace}/{self.pod}", "container": self.name,
                "id": self.id[:12]}


@dataclass(frozen=True)
class _Reading:
    """One container read back: its settings (direct or through the runtime), which of
    them differ, its signals, and the plan they came from (with the current cpuset)."""

    plan: ContainerPlan
    via: dict[CgroupWrite, str]
    drifted: dict[CgroupWrite, Mismatch]
    compliance: Compliance | None


class DriftWatch:
    def __init__(self, node: NodeState, metrics: MetricsSink, *, interval: float,
                 backoff_max: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.node = node
        self.metrics = metrics
        self.interval = interval
        self.backoff_max = backoff_max
        self.clock = clock
        self.containers: dict[str, Watched] = {}
        self.last = NodeReport(time.time(), interval)  # the last pass, for the metrics

    # -- membership --------------------------------------------------------------------
    def watch(self, watched: Watched) -> None:
        self.containers[watched.id] = watched

    def started(self, container_id: str) -> None:
        watched = self.containers.get(container_id)
        if watched is not None:
            watched.started = True

    def refit(self, container_id: str, plan: ContainerPlan) -> None:
        """The runtime was told new values (UpdateContainer): they are what holds now."""
        watched = self.containers.get(container_id)
        if watched is not None and watched.plan != plan:
            watched.plan = plan
            watched.settling = True

    def expect_change(self, container_ids: Iterable[str]) -> None:
        """nri-sla just sent these containers new values (a cpuset): until the runtime
        applied them, their old values are not drift."""
        for container_id in container_ids:
            watched = self.containers.get(container_id)
            if watched is not None:
                watched.settling = True

    def forget(self, container_id: str) -> None:
        self.containers.pop(container_id, None)

    def replace(self, watched: Iterable[Watched]) -> None:
        """Synchronize: exactly these containers (what was learnt of the others is gone)."""
        self.containers = {w.id: w for w in watched}

    # -- passes --------------------------------------------------------------------------
    def run(self) -> list[pb.ContainerUpdate]:
        """One pass: read back, log and count drift, repair (hard mode), collect the
        signals; returns the updates that re-assert runtime-applied values."""
        started = time.perf_counter()
        now = self.clock()
        reports, updates = [], []
        for watched in self._ordered():
            report, update = self._pass_one(watched, now)
            reports.append(report)
            if update is not None:
                updates.append(update)
        self.last = NodeReport(time.time(), self.interval, tuple(reports))
        self.metrics.observe("DriftWatch", time.perf_counter() - started)
        return updates

    def look(self) -> NodeReport:
        """Everything read now, nothing logged, counted or repaired (`nri-sla status`)."""
        reports = []
        for watched in self._ordered():
            reading, state = self._read(watched)
            ratio = watched.throttled_ratio
            if reading is not None and reading.compliance is not None:
                # Since the last pass; the last pass's own when no period ran since.
                since = _ratio(watched.cpu, reading.compliance.cpu, idle=None)
                ratio = ratio if since is None else since
            reports.append(self._report(watched, reading, state, ratio))
        return NodeReport(time.time(), self.interval, tuple(reports))

    def _ordered(self) -> list[Watched]:
        return sorted(self.containers.values(), key=lambda w: (w.namespace, w.pod, w.name,
                                                               w.id))

    def _pass_one(self, watched: Watched, now: float
                  ) -> tuple[ContainerReport, pb.ContainerUpdate | None]:
        reading, state = self._read(watched)
        if reading is None:
            return self._report(watched, None, state, None), None
        cpu = reading.compliance.cpu if reading.compliance else None
        watched.throttled_ratio = _ratio(watched.cpu, cpu)
        watched.cpu = cpu
        update = None
        if watched.settling:  # checked again next pass, once the runtime applied them
            watched.settling = False
            state = SETTLING
        else:
            self._verify(watched, reading, now)
            self._note(watched, reading)
            if (reading.drifted and watched.plan.enforcement == "hard"
                    and now >= watched.retry_at):
                update = self._repair(watched, reading, now)
        return self._report(watched, reading, state, watched.throttled_ratio), update

    def _read(self, watched: Watched) -> tuple[_Reading | None, str]:
        if not watched.started:
            return None, NOT_STARTED
        if watched.writer is None:
            try:
                watched.writer = CgroupWriter(self.node.container_paths(watched.cgroups_path))
            except SlaFailure as exc:
                return None, f"no cgroup: {exc}"
        writer = watched.writer
        plan, via = self._expected(watched)
        drifted = {m.write: m for m in writer.mismatches(via)}
        if any(m.found is None for m in drifted.values()) and writer.paths.missing():
            return None, "cgroup gone (the container exited?)"
        return _Reading(plan, via, drifted, read_compliance(writer.paths)), WATCHED

    def _expected(self, watched: Watched) -> tuple[ContainerPlan, dict[CgroupWrite, str]]:
        """The plan with the cpuset the container should have now, and its settings:
        CgroupWrite -> "runtime" (the adjustment's) or "direct" (nri-sla's own write)."""
        cpus = self.node.cpuset_of(watched.id)
        known = watched.expected
        if known is not None and known[0] is watched.plan and known[1] == cpus:
            return known[2], known[3]
        plan = watched.plan
        if cpus and cpus != plan.cpus and (plan.cpus or not self.node.runs_everywhere(cpus)):
            plan = replace(plan, cpus=cpus)
        bfq = self.node.capabilities.bfq
        via = dict.fromkeys(cgroup_writes(plan, "runtime", bfq), "runtime")
        via.update(dict.fromkeys(cgroup_writes(plan, "direct", bfq), "direct"))
        watched.expected = (watched.plan, cpus, plan, via)
        return plan, via

    def _report(self, watched: Watched, reading: _Reading | None, state: str,
                ratio: float | None) -> ContainerReport:
        plan = reading.plan if reading is not None else watched.plan
        settings: tuple[SettingReport, ...] = ()
        if reading is not None:
            settings = tuple(_setting(write, via, reading.drifted.get(write))
                             for write, via in reading.via.items())
        return ContainerReport(
            watched.id, watched.namespace, watched.pod, watched.name, plan, state,
            settings, watched.repair, reading.compliance if reading else None, ratio,
            plan.cpus or "")

    # -- drift -----------------------------------------------------------------------------
    def _note(self, watched: Watched, reading: _Reading) -> None:
        """Log and count each drifted value once per change; note those that hold again."""
        hard = watched.plan.enforcement == "hard"
        for write, mismatch in reading.drifted.items():
            seen = (mismatch.found, mismatch.error or "")
            if watched.reported.get(write) == seen:
                continue
            watched.reported[write] = seen
            self._count_drift(write)
            log_event(log, logging.WARNING, "drift", **watched.fields(),
                      file=f"{write.controller}/{write.file}", expected=write.value,
                      found=mismatch.found if mismatch.found is not None
                      else f"unreadable: {mismatch.error}",
                      via=reading.via[write],
                      action="repair" if hard else "reported (soft mode)")
        for write in [w for w in watched.reported if w not in reading.drifted]:
            del watched.reported[write]
            log_event(log, logging.INFO, "drift gone", **watched.fields(),
                      file=f"{write.controller}/{write.file}", value=write.value)

    def _verify(self, watched: Watched, reading: _Reading, now: float) -> None:
        """The runtime was asked to re-assert `pending` last pass: did it? (Values no
        longer expected, e.g. a cpuset nri-sla changed since, are neither.)"""
        pending = [w for w in watched.pending if w in reading.via]
        watched.pending = set()
        if not pending:
            return
        drifted = reading.drifted
        still = [w for w in pending if w in drifted]
        for write in pending:
            self._count_repair(write, "failed" if write in drifted else "repaired")
            if write not in drifted:
                watched.reported.pop(write, None)  # logged as repaired, not as gone
        if still:
            self._failed(watched, "the runtime's update did not restore "
                         + ", ".join(f"{w.controller}/{w.file}" for w in still), now)
        else:
            self._succeeded(watched, "through the runtime")

    def _repair(self, watched: Watched, reading: _Reading, now: float
                ) -> pb.ContainerUpdate | None:
        direct = [w for w in reading.drifted if reading.via[w] == "direct"]
        runtime = [w for w in reading.drifted if reading.via[w] == "runtime"]
        assert watched.writer is not None  # read through it just now
        problems = []
        for result in watched.writer.apply(direct):
            self._count_repair(result.write, "repaired" if result.ok else "failed")
            if result.ok:
                watched.reported.pop(result.write, None)
            else:
                problems.append(str(result.error))
        if problems:
            self._failed(watched, "; ".join(problems), now)
        elif direct and not runtime:
            self._succeeded(watched, "rewritten")
        if not runtime:
            return None
        watched.pending = set(runtime)
        if not problems:
            watched.repair = "requested through the runtime"
        log_event(log, logging.INFO, "drift repair requested", **watched.fields(),
                  files=",".join(f"{w.controller}/{w.file}" for w in runtime))
        return build_update(watched.id, reading.plan)

    def _failed(self, watched: Watched, why: str, now: float) -> None:
        watched.failures += 1
        delay = min(self.interval * 2 ** watched.failures, self.backoff_max)
        watched.retry_at = now + delay
        watched.repair = f"failed: {why}; next try in {delay:g}s"
        log_event(log, logging.WARNING, "drift repair failed", **watched.fields(),
                  error=why, failures=watched.failures, retry_in=f"{delay:g}s")

    def _succeeded(self, watched: Watched, how: str) -> None:
        watched.failures = 0
        watched.retry_at = 0.0
        watched.repair = ""
        log_event(log, logging.INFO, "drift repaired", **watched.fields(), how=how)

    def _count_drift(self, write: CgroupWrite) -> None:
        self.metrics.record_drift(KIND[write.controller])

    def _count_repair(self, write: CgroupWrite, outcome: str) -> None:
        self.metrics.record_repair(KIND[write.controller], outcome)


def _setting(write: CgroupWrite, via: str, mismatch: Mismatch | None) -> SettingReport:
    if mismatch is None:
        return SettingReport(write.controller, write.file, write.value, via)
    return SettingReport(write.controller, write.file, write.value, via, mismatch.found,
                         mismatch.error or "")


def _ratio(before: CpuThrottling | None, now: CpuThrottling | None,
           idle: float | None = 0.0) -> float | None:
    """Throttled / periods between two samples; `idle` when no period ran between them
    (nothing ran against its quota). None without an earlier sample, or when the
    counters went back (a new cgroup under the same path)."""
    if before is None or now is None or now.periods < before.periods \
            or now.throttled < before.throttled:
        return None
    periods = now.periods - before.periods
    return (now.throttled - before.throttled) / periods if periods else idle
