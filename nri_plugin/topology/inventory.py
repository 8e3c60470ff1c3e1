"""One entry point for the GPU inventory: NVML, else sysfs, or a YAML snapshot.

`InventoryReader` reads it again and again (the plugin's rescans) and remembers NVML's
last good read: once NVML has answered in this process, a later NVML failure never drops
the inventory to sysfs (which cannot see MIG modes or NVLink, so a MIG-mode GPU would be
offered whole while its instances are held). A GPU NVML fails for keeps its last good
facts and is marked unknown (unhealthy when lost); NVML failing as a whole keeps the last
good read with every GPU unknown.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nri_plugin.ops.corelog import CoreLogger
from nri_plugin.topology.errors import InventoryError
from nri_plugin.topology.gpu_health import GpuHealth, unknown
from nri_plugin.topology.gpus import Gpu, GpuInventory
from nri_plugin.topology.nvml_gpus import import_pynvml, read_nvml_gpus
from nri_plugin.topology.snapshot import load_snapshot
from nri_plugin.topology.sysfs_gpus import read_sysfs_gpus
from nri_plugin.value import replace

log = CoreLogger("nri_sla.topology.inventory")

SOURCES = ("auto", "nvml", "sysfs", "snapshot")
DRIVER_DIR = "driver/nvidia"  # under /proc while NVIDIA's kernel driver is loaded


def _nvml_reason(exc: BaseException) -> str:
    return f"NVML unavailable ({type(exc).__name__}: {exc})"


class InventoryReader:
    """Reads the node's GPUs from one source, keeping NVML's last good read.

    auto: NVML; until NVML has answered once, a failure falls back to sysfs with
    `degraded_reason` set (never an exception), and a warning logged once when sysfs
    finds GPUs; after, see the module doc. nvml: the same, except that a failure before
    NVML ever answered raises InventoryError. sysfs/snapshot: that source only; failures
    raise InventoryError.
    `nvml` replaces the pynvml module (tests pass a fake).
    """

    def __init__(
        self,
        source: str = "auto",
        sysfs_root: Path = Path("/sys"),
        snapshot: Path | None = None,
        nvml: Any = None,
        proc_root: Path = Path("/proc"),
    ) -> None:
        if source not in SOURCES:
            raise InventoryError(f"inventory source {source!r} is not one of {', '.join(SOURCES)}")
        if source == "snapshot" and snapshot is None:
            raise InventoryError("inventory source 'snapshot' needs a snapshot file")
        self.source = "snapshot" if snapshot is not None and source == "auto" else source
        self.sysfs_root, self.proc_root = sysfs_root, proc_root
        self.snapshot, self.nvml = snapshot, nvml
        self.last_nvml: GpuInventory | None = None  # NVML's last read, once it answered
        self.fallback_warned = False

    def read(self) -> GpuInventory:
        if self.source == "snapshot":
            assert self.snapshot is not None  # checked in __init__
            return load_snapshot(self.snapshot).inventory
        if self.source == "sysfs":
            return GpuInventory(read_sysfs_gpus(self.sysfs_root, self.proc_root), "sysfs")
        if self.nvml is None and self.source == "auto" and not self._driver_loaded():
            # NVML cannot answer without NVIDIA's kernel driver: pynvml (1 MiB of the
            # plugin's memory) is not even loaded on such a node
            return self._nvml_failed(
                FileNotFoundError(
                    f"no NVIDIA kernel driver loaded ({self.proc_root / DRIVER_DIR} is absent)"
                )
            )
        try:
            module = self.nvml if self.nvml is not None else import_pynvml()
            gpus = read_nvml_gpus(module, self.sysfs_root, self.proc_root)
        except Exception as exc:
            # NVML raises its own NVMLError subclasses, ctypes raises OSError/AttributeError
            # on broken driver installs: any of them means "no NVML" for this read
            return self._nvml_failed(exc)
        fresh = keep_last_good(gpus, self.last_nvml.gpus if self.last_nvml else ())
        unread = sum(not g.health.healthy for g in fresh)
        reason = f"NVML could not read {unread} of {len(fresh)} GPUs" if unread else None
        self.last_nvml = GpuInventory(fresh, "nvml", reason)
        return self.last_nvml

    def _driver_loaded(self) -> bool:
        return (self.proc_root / DRIVER_DIR).is_dir()

    def _nvml_failed(self, exc: BaseException) -> GpuInventory:
        reason = _nvml_reason(exc)
        if self.last_nvml is not None:
            log.warning(
                "GPU inventory: %s; keeping NVML's last good read, every GPU unknown", reason
            )
            health = unknown(reason)
            return GpuInventory(
                tuple(_unread(g, health) for g in self.last_nvml.gpus),
                "nvml",
                f"{reason}; NVML's last good read, every GPU unknown",
            )
        if self.source == "nvml":
            raise InventoryError(reason) from exc
        gpus = read_sysfs_gpus(self.sysfs_root, self.proc_root)
        # Worth a warning only where there are GPUs NVML would describe better, and once:
        # a node without GPUs has nothing to fix, and rescans repeat the same reason.
        if gpus and not self.fallback_warned:
            self.fallback_warned = True
            log.warning("GPU inventory: %s; falling back to sysfs", reason)
        else:
            log.debug("GPU inventory: %s; sysfs finds %d GPUs", reason, len(gpus))
        return GpuInventory(gpus, "sysfs", reason)


def _unread(last: Gpu, health: GpuHealth, index: int | None = None) -> Gpu:
    """`last` (a good read's facts) as a GPU NVML could not read now."""
    return replace(
        last, index=last.index if index is None else index, health=health, mig_unknown=True
    )


def keep_last_good(fresh: tuple[Gpu, ...], last: tuple[Gpu, ...]) -> tuple[Gpu, ...]:
    """A fresh NVML read with each GPU it could not read (health not healthy: placeholder
    facts, or its MIG mode unknown) given its last good facts: found by bus id, else by
    UUID, else (NVML could not even tell which GPU it is) by index when the GPU count is
    the same. A GPU never read well stays a placeholder."""
    by_bus = {g.pci_bus_id: g for g in last if g.pci_bus_id}
    by_uuid = {g.uuid.lower(): g for g in last if g.uuid}
    by_index = {g.index: g for g in last} if len(last) == len(fresh) else {}
    merged = []
    for g in fresh:
        if g.health.healthy:
            merged.append(g)
            continue
        known = (
            (by_bus.get(g.pci_bus_id) if g.pci_bus_id else None)
            or (by_uuid.get(g.uuid.lower()) if g.uuid else None)
            or (by_index.get(g.index) if not g.pci_bus_id and not g.uuid else None)
        )
        merged.append(g if known is None else _unread(known, g.health, g.index))
    return tuple(merged)


def load_inventory(
    source: str = "auto",
    sysfs_root: Path = Path("/sys"),
    snapshot: Path | None = None,
    nvml: Any = None,
    proc_root: Path = Path("/proc"),
) -> GpuInventory:
    """Read the node's GPUs once (InventoryReader says how each source behaves)."""
    return InventoryReader(source, sysfs_root, snapshot, nvml, proc_root).read()


def configured_reader(setting: str, sysfs_root: Path = Path("/sys")) -> InventoryReader:
    """The reader of the inventory the node config's `gpu.inventory` names: auto | nvml |
    sysfs, or the absolute path of a snapshot file (`nri-sla inventory --save`)."""
    if setting in ("auto", "nvml", "sysfs"):
        return InventoryReader(setting, sysfs_root=sysfs_root)
    return InventoryReader("snapshot", snapshot=Path(setting))


def configured_inventory(setting: str, sysfs_root: Path = Path("/sys")) -> GpuInventory:
    """The inventory the node config's `gpu.inventory` names, read once."""
    return configured_reader(setting, sysfs_root).read()
