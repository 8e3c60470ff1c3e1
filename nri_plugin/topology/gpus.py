"""GPU inventory values, shared by the NVML, sysfs and snapshot backends."""

from __future__ import annotations

import re

from nri_plugin.topology.errors import InventoryError
from nri_plugin.topology.gpu_health import GPU_HEALTHY, GpuHealth
from nri_plugin.value import Frozen


class MigInstance(Frozen):
    """One MIG device (a compute instance inside a GPU instance) of a MIG-enabled GPU.

    `caps_minors` are the minor numbers of /dev/nvidia-caps/nvidia-capN that grant access
    to this GPU instance and compute instance (from /proc/driver/nvidia-caps/mig-minors);
    empty when unknown.
    """

    uuid: str
    profile: str  # e.g. "1g.10gb"
    gpu_index: int
    gi_id: int
    ci_id: int
    index: int = 0  # position among the parent's MIG devices ("<gpu>:<index>" naming)
    memory_bytes: int = 0
    caps_minors: tuple[int, ...] = ()


# How far apart two GPUs are on PCIe, nearest first: behind one PCIe switch (or several
# switches without crossing a host bridge), under one host bridge, on one CPU socket (NUMA
# node) across host bridges, across sockets. NVML's SINGLE/MULTIPLE, HOSTBRIDGE, NODE and
# SYSTEM topology levels.
PCIE_LEVELS = ("switch", "hostbridge", "numa", "system")


class Gpu(Frozen):
    """One physical GPU. `uuid` is empty when the source cannot tell (sysfs).

    `nvlink_links` is (peer index, number of NVLinks to it) per peer, sorted by peer;
    `nvlink_peers` is its set of peers. Give either one (the other is derived): a source
    that knows only peers means one link each. `pcie_levels` is (peer index, one of
    PCIE_LEVELS) for the peers whose PCIe distance is known.
    """

    index: int
    uuid: str
    pci_bus_id: str  # normalised sysfs form: "0000:07:00.0"
    numa_node: int | None
    memory_bytes: int = 0
    name: str = ""
    minor: int | None = None  # N in /dev/nvidiaN
    nvlink_peers: frozenset[int] = frozenset()
    mig_enabled: bool = False
    mig_instances: tuple[MigInstance, ...] = ()
    # The inventory read's word on it: unknown when its facts could not be read this time
    # (then they are the last good read's), unhealthy when NVML says it is lost.
    health: GpuHealth = GPU_HEALTHY
    # NVML could not tell its MIG mode: it may be partitioned, so it is never handed out
    # whole (`mig_enabled` and the instances are the last good read's, if any).
    mig_unknown: bool = False

    @property
    def offered_whole(self) -> bool:
        """May a new container get this GPU whole: healthy and surely not in MIG mode."""
        return self.health.healthy and not self.mig_enabled and not self.mig_unknown

    nvlink_links: tuple[tuple[int, int], ...] = ()
    pcie_levels: tuple[tuple[int, str], ...] = ()

    def __post_init__(self) -> None:
        if self.nvlink_links:
            links = tuple(sorted(self.nvlink_links))
            peers = frozenset(p for p, _ in links)
            if self.nvlink_peers and self.nvlink_peers != peers:
                raise InventoryError(
                    f"GPU {self.index}: NVLink peers {sorted(self.nvlink_peers)}"
                    f" differ from the peers of its links {sorted(peers)}"
                )
            if any(n < 1 for _, n in links) or len(peers) != len(links):
                raise InventoryError(
                    f"GPU {self.index}: NVLink link counts {list(links)} "
                    "must name each peer once with at least 1 link"
                )
        else:
            links = tuple((p, 1) for p in sorted(self.nvlink_peers))
            peers = frozenset(self.nvlink_peers)
        bad = [level for _, level in self.pcie_levels if level not in PCIE_LEVELS]
        if bad:
            raise InventoryError(
                f"GPU {self.index}: PCIe level {bad[0]!r} is not one of {', '.join(PCIE_LEVELS)}"
            )
        # frozen: the derived fields are set once, here
        object.__setattr__(self, "nvlink_links", links)
        object.__setattr__(self, "nvlink_peers", peers)
        object.__setattr__(self, "pcie_levels", tuple(sorted(self.pcie_levels)))

    def links_to(self, peer: int) -> int:
        """NVLinks between this GPU and `peer` (0: none)."""
        return next((n for p, n in self.nvlink_links if p == peer), 0)

    def pcie_level(self, peer: int) -> str | None:
        """One of PCIE_LEVELS, or None when no source could tell."""
        return next((level for p, level in self.pcie_levels if p == peer), None)

    @property
    def ref(self) -> str:
        """The most stable name for this GPU: its UUID, else its PCI bus id (indices
        change when a GPU leaves the bus), else its index."""
        return self.uuid or self.pci_bus_id or str(self.index)

    @property
    def identity(self) -> str:
        """What stays the same for this GPU across inventory reads, whichever source
        (NVML or its sysfs fallback) read it: the PCI bus id, else the UUID."""
        return self.pci_bus_id or self.uuid.lower() or f"index {self.index}"

    @property
    def device_minor(self) -> int:
        return self.index if self.minor is None else self.minor


class GpuInventory(Frozen):
    """The GPUs of this node and where the facts came from.

    `source` is "nvml", "sysfs" or "snapshot"; `degraded_reason` says why a better source
    was not used (None when the preferred source worked).
    """

    __slots__ = ("_by_index",)  # derived from `gpus`: no field

    gpus: tuple[Gpu, ...] = ()
    source: str = "sysfs"
    degraded_reason: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_index", {g.index: g for g in self.gpus})

    def find(self, name: str) -> Gpu | None:
        """A GPU by index ("3"), UUID ("GPU-...", any case) or PCI bus id (any form)."""
        text = name.strip()
        if text.isdigit():
            return self._by_index.get(int(text))  # type: ignore[attr-defined]
        lowered = text.lower()
        if lowered.startswith("gpu-"):
            return next((g for g in self.gpus if g.uuid.lower() == lowered), None)
        bus = normalize_bus_id(text)
        if bus:
            return next((g for g in self.gpus if g.pci_bus_id == bus), None)
        return None

    def find_mig(self, name: str) -> tuple[Gpu, MigInstance] | None:
        """A MIG device by UUID ("MIG-...") or "<gpu index>:<mig index>"."""
        text = name.strip().lower()
        for gpu in self.gpus:
            for mig in gpu.mig_instances:
                if mig.uuid.lower() == text or f"{gpu.index}:{mig.index}" == text:
                    return gpu, mig
        return None


# Compiled at its first match (re keeps it), not at import: an OCI hook's cold run for a
# numa SLA imports this module and names no GPU.
_BUS_ID = (
    r"^(?:(?P<domain>[0-9a-f]{1,8}):)?(?P<bus>[0-9a-f]{1,2}):(?P<dev>[0-9a-f]{1,2})\.(?P<fn>[0-7])$"
)


def normalize_bus_id(text: str) -> str | None:
    """NVML's "00000000:07:00.0" and sysfs' "0000:07:00.0" both become "0000:07:00.0"."""
    m = re.match(_BUS_ID, text.strip().lower())
    if not m:
        return None
    domain = int(m.group("domain") or "0", 16)
    bus, dev = int(m.group("bus"), 16), int(m.group("dev"), 16)
    return f"{domain:04x}:{bus:02x}:{dev:02x}.{m.group('fn')}"
