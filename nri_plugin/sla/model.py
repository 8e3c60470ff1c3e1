"""The SLA as validated values: frozen values, sizes in bytes, times in microseconds.

A section is None when the SLA does not mention it (or every field in it is unset), so
the planner can test ``if sla.memory:``. Defaults are already applied: ``cpu.period_us``
is 100ms when a limit is set, ``cpu.rt_period_us`` is 1s when a real-time budget is set,
and a GPU request is ``topology="any", align=True, source="plugin"`` unless written.
``to_document()`` gives the canonical annotation form back (parsing it yields an equal
value), which is what ``sla.nri.io/applied`` and ``nri-sla explain`` show.
"""

from __future__ import annotations

from nri_plugin.text.quantities import format_cpu, format_duration, format_size
from nri_plugin.value import Frozen

TYPE_CHECKING = False  # `typing` costs the OCI hook's cold run; only checkers need it
if TYPE_CHECKING:
    from typing import Literal, TypeAlias

    # the enumerated SLA values; each tuple below lists its alias's values at run time
    Enforcement: TypeAlias = Literal["hard", "soft"]
    MemoryPolicy: TypeAlias = Literal["bind", "preferred", "interleave", "none"]
    GpuTopology: TypeAlias = Literal["any", "numa", "nvlink"]

ENFORCEMENT_MODES: tuple[Enforcement, ...] = ("hard", "soft")
MEMORY_POLICIES: tuple[MemoryPolicy, ...] = ("bind", "preferred", "interleave", "none")
GPU_TOPOLOGIES: tuple[GpuTopology, ...] = ("any", "numa", "nvlink")
GPU_SOURCES = ("plugin", "runtime")

DEFAULT_RT_PERIOD_US = 1_000_000  # the kernel's default sched_rt_period_us


class CpuSla(Frozen):
    """The validated `cpu` section of an SLA."""

    limit: float | None = None  # CPUs; quota = limit * period
    period_us: int | None = None
    rt_runtime_us: int | None = None
    rt_period_us: int | None = None
    exclusive: int | None = None  # whole CPUs for this container alone

    @property
    def quota_us(self) -> int | None:
        """CFS quota for the limit (None without a limit)."""
        if self.limit is None or self.period_us is None:
            return None
        return round(self.limit * self.period_us)

    def to_document(self) -> dict[str, object]:
        doc: dict[str, object] = {}
        if self.limit is not None:
            text = format_cpu(self.limit)  # at most 3 decimals, no float noise
            doc["limit"] = int(text) if text.isdigit() else float(text)
        if self.period_us is not None:
            doc["period"] = format_duration(self.period_us)
        if self.rt_runtime_us is not None:
            doc["rt-runtime"] = format_duration(self.rt_runtime_us)
        if self.rt_period_us is not None:
            doc["rt-period"] = format_duration(self.rt_period_us)
        if self.exclusive is not None:
            doc["exclusive"] = self.exclusive
        return doc


class NumaSla(Frozen):
    """The validated `numa` section of an SLA."""

    nodes: tuple[int, ...] | None = None  # None: not pinned by the SLA (see ``auto``)
    auto: bool = False  # nodes: auto -> follow the GPUs, else best fit
    memory_policy: str | None = None  # bind | preferred | interleave | none

    def to_document(self) -> dict[str, object]:
        doc: dict[str, object] = {}
        if self.auto:
            doc["nodes"] = "auto"
        elif self.nodes is not None:
            doc["nodes"] = list(self.nodes)
        if self.memory_policy is not None:
            doc["memory-policy"] = self.memory_policy
        return doc


class MemorySla(Frozen):
    """The validated `memory` section of an SLA."""

    high: int | None = None  # bytes: throttle point
    max: int | None = None  # bytes: hard limit

    def to_document(self) -> dict[str, object]:
        doc: dict[str, object] = {}
        if self.high is not None:
            doc["high"] = format_size(self.high)
        if self.max is not None:
            doc["max"] = format_size(self.max)
        return doc


class IoMaxRule(Frozen):
    """One `io.max` entry of an SLA: a device and its limits."""

    device: str  # absolute /dev path or "MAJ:MIN"
    read_bps: int | None = None
    write_bps: int | None = None
    read_iops: int | None = None
    write_iops: int | None = None

    def to_document(self) -> dict[str, object]:
        doc: dict[str, object] = {"device": self.device}
        if self.read_bps is not None:
            doc["read-bps"] = format_size(self.read_bps)
        if self.write_bps is not None:
            doc["write-bps"] = format_size(self.write_bps)
        if self.read_iops is not None:
            doc["read-iops"] = self.read_iops
        if self.write_iops is not None:
            doc["write-iops"] = self.write_iops
        return doc


class IoSla(Frozen):
    """The validated `io` section of an SLA."""

    weight: int | None = None  # 1..10000
    max: tuple[IoMaxRule, ...] = ()

    def to_document(self) -> dict[str, object]:
        doc: dict[str, object] = {}
        if self.weight is not None:
            doc["weight"] = self.weight
        if self.max:
            doc["max"] = [rule.to_document() for rule in self.max]
        return doc


class GpuSla(Frozen):
    """The validated `gpu` section of an SLA."""

    count: int | None = None
    ids: tuple[str, ...] = ()  # index, UUID or PCI bus id, as written
    mig: str | None = None  # MIG profile, e.g. 1g.10gb
    topology: str = "any"  # any | numa | nvlink
    align: bool = True  # bind cpus/mems to the GPUs' NUMA node(s)
    # plugin | runtime, as written (old manifests): both mean "the grant"
    source: str = "plugin"

    def to_document(self) -> dict[str, object]:
        doc: dict[str, object] = {}
        if self.count is not None:
            doc["count"] = self.count
        if self.ids:
            doc["ids"] = list(self.ids)
        if self.mig is not None:
            doc["mig"] = self.mig
        doc["topology"] = self.topology
        doc["align"] = self.align
        doc["from"] = self.source
        return doc


class Sla(Frozen):
    """One container's merged, validated SLA."""

    enforcement: str = "hard"  # hard | soft
    cpu: CpuSla | None = None
    numa: NumaSla | None = None
    memory: MemorySla | None = None
    io: IoSla | None = None
    gpu: GpuSla | None = None
    keys: tuple[str, ...] = ()  # annotation keys this SLA was read from

    def to_document(self) -> dict[str, object]:
        """The canonical annotation document (YAML-able), without ``keys``."""
        doc: dict[str, object] = {"enforcement": self.enforcement}
        for name in ("cpu", "numa", "memory", "io", "gpu"):
            section = getattr(self, name)
            if section is not None:
                doc[name] = section.to_document()
        return doc
