"""What the drift watch found for each SLA container: the values that are the node's answer
to "what does the SLA say, what does the kernel hold, how does the workload fare".

Produced by `plugin.watch` on each pass (and for `nri-sla status`), read by the
per-container metrics (`plugin.container_metrics`) and sent as JSON over the status
socket. Immutable, so a scrape thread can read the last pass while the next one runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from nri_plugin.enforce.compliance import Compliance
from nri_plugin.plan.model import ContainerPlan
from nri_plugin.topology.cpulist import parse_cpulist
from nri_plugin.topology.gpus import GpuInventory

REPORT_VERSION = 1  # of the status JSON document


@dataclass(frozen=True, slots=True)
class SettingReport:
    """One enforced value: the file and the value the SLA put there, how it got there
    (`runtime`: the adjustment, `direct`: nri-sla's own write) and, when the kernel does
    not hold it, what it holds instead (`found`) or why it cannot be read (`error`)."""

    controller: str
    file: str
    expected: str
    via: str
    found: str | None = None
    error: str = ""

    @property
    def drifted(self) -> bool:
        return self.found is not None or bool(self.error)

    def actual(self) -> str:
        if self.error:
            return f"unreadable ({self.error})"
        return self.expected if self.found is None else self.found

    def to_json(self) -> dict[str, Any]:
        return {
            "controller": self.controller,
            "file": self.file,
            "via": self.via,
            "expected": self.expected,
            "actual": self.actual(),
            "drifted": self.drifted,
        }


@dataclass(frozen=True, slots=True)
class ContainerReport:
    id: str
    namespace: str
    pod: str
    container: str
    plan: ContainerPlan
    state: str  # watched | not started | the problem that stops the watch reading it
    settings: tuple[SettingReport, ...] = ()
    repair: str = ""  # the repair under way or failed, for people
    compliance: Compliance | None = None
    throttled_ratio: float | None = None  # throttled / periods over the last pass
    cpus: str = ""  # the cpuset the container should have now
    # The exclusive CPUs it holds now (a resize gives some back; its record keeps the
    # ones it was created with); None: not known, the record's.
    exclusive_cpus: str | None = None

    @property
    def drifted(self) -> int:
        return sum(s.drifted for s in self.settings)

    def to_json(self) -> dict[str, Any]:
        c = self.compliance or Compliance()
        exclusive = self.exclusive_cpus
        if exclusive is None:
            exclusive = str((self.plan.placement_record or {}).get("exclusive", ""))
        doc: dict[str, Any] = {
            "id": self.id,
            "namespace": self.namespace,
            "pod": self.pod,
            "container": self.container,
            "enforcement": self.plan.enforcement,
            "sla": describe_plan(self.plan, exclusive),
            "state": self.state,
            "settings": [s.to_json() for s in self.settings],
            "drifted": self.drifted,
            "repair": self.repair,
            "cpus": self.cpus,
            "mems": self.plan.mems or "",
            "exclusive_cpus": exclusive,
            "gpus": gpu_refs(self.plan),
            "cpu": None,
            "throttled_ratio": self.throttled_ratio,
            "memory_events": dict(c.memory_events),
            "pressure": {f"{p.resource}.{p.kind}": p.avg10 for p in c.pressure},
        }
        if c.cpu is not None:
            doc["cpu"] = {
                "periods": c.cpu.periods,
                "throttled": c.cpu.throttled,
                "throttled_seconds": c.cpu.throttled_seconds,
            }
        return doc


@dataclass(frozen=True, slots=True)
class NodeReport:
    at: float  # unix time of the pass
    interval: float  # seconds between passes (0: the watch is off)
    containers: tuple[ContainerReport, ...] = ()

    def to_json(self, registered: bool) -> dict[str, Any]:
        return {
            "version": REPORT_VERSION,
            "at": self.at,
            "interval": self.interval,
            "registered": registered,
            "containers": [c.to_json() for c in self.containers],
        }


def gpus_json(inventory: GpuInventory) -> list[dict[str, Any]]:
    """The node's GPUs for the status document: who each is, its MIG mode and health."""
    return [
        {
            "index": g.index,
            "gpu": g.ref,
            "pci_bus_id": g.pci_bus_id,
            "name": g.name,
            "mig": "unknown" if g.mig_unknown else "enabled" if g.mig_enabled else "off",
            "health": g.health.state,
            "reason": g.health.reason,
        }
        for g in inventory.gpus
    ]


def gpu_refs(plan: ContainerPlan) -> list[str]:
    placement = plan.placement_record or {}
    if placement.get("mig"):
        return [str(placement["mig"])]
    return [str(g) for g in placement.get("gpus", ())]


def cpu_limit(plan: ContainerPlan) -> float | None:
    """The CPU bandwidth the plan enforces, in CPUs (quota / period)."""
    if plan.cpu_quota is None or plan.cpu_quota < 0:
        return None
    return plan.cpu_quota / (plan.cpu_period or 100_000)


def memory_high(plan: ContainerPlan) -> int | None:
    """memory.high, or on v1 the soft limit that stands in for it."""
    return plan.memory_high if plan.memory_high is not None else plan.memory_soft_limit


def _size(n: int) -> str:
    for unit, shift in (("Gi", 30), ("Mi", 20), ("Ki", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return str(n)


def describe_plan(plan: ContainerPlan, exclusive: str | None = None) -> str:
    """The SLA in a few words: "cpu=2.5 excl=4 mem=10Gi high=8Gi io.w=500 gpus=2";
    `exclusive`: the exclusive CPUs held now (None: the record's)."""
    parts = [plan.enforcement]
    limit = cpu_limit(plan)
    if limit is not None:
        parts.append(f"cpu={limit:g}")
    if plan.rt_runtime:
        parts.append(f"rt={plan.rt_runtime}/{plan.rt_period_in_force}us")
    if exclusive is None:
        exclusive = (plan.placement_record or {}).get("exclusive")
    if exclusive:
        parts.append(f"excl={len(parse_cpulist(str(exclusive)))}")
    if plan.memory_max is not None:
        parts.append(f"mem={_size(plan.memory_max)}")
    high = memory_high(plan)
    if high is not None:
        parts.append(f"high={_size(high)}")
    if plan.io_weight is not None:
        parts.append(f"io.w={plan.io_weight}")
    if plan.io_max:
        parts.append(f"io.max={len(plan.io_max)}dev")
    gpus = gpu_refs(plan)
    if gpus:
        parts.append(f"gpus={len(gpus)}")
    return " ".join(parts)
