"""One entry point for the GPU inventory: NVML, else sysfs, or a YAML snapshot."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from nri_plugin.topology.gpus import GpuInventory, InventoryError
from nri_plugin.topology.nvml_gpus import import_pynvml, read_nvml_gpus
from nri_plugin.topology.snapshot import load_snapshot
from nri_plugin.topology.sysfs_gpus import read_sysfs_gpus

log = logging.getLogger("nri_sla.topology.inventory")

SOURCES = ("auto", "nvml", "sysfs", "snapshot")


def _nvml_reason(exc: BaseException) -> str:
    return f"NVML unavailable ({type(exc).__name__}: {exc})"


def load_inventory(source: str = "auto", sysfs_root: Path = Path("/sys"),
                   snapshot: Path | None = None, nvml: Any = None,
                   proc_root: Path = Path("/proc")) -> GpuInventory:
    """Read the node's GPUs.

    auto: NVML; when NVML is missing or fails, sysfs with `degraded_reason` set and a
    warning logged (never an exception). nvml/sysfs/snapshot: that source only; failures
    raise InventoryError. `nvml` replaces the pynvml module (tests pass a fake).
    """
    if source not in SOURCES:
        raise InventoryError(f"inventory source {source!r} is not one of {', '.join(SOURCES)}")
    if source == "snapshot" or (source == "auto" and snapshot is not None):
        if snapshot is None:
            raise InventoryError("inventory source 'snapshot' needs a snapshot file")
        return load_snapshot(snapshot).inventory
    if source == "sysfs":
        return GpuInventory(read_sysfs_gpus(sysfs_root, proc_root), "sysfs")
    try:
        module = nvml if nvml is not None else import_pynvml()
        gpus = read_nvml_gpus(module, sysfs_root, proc_root)
    except Exception as exc:
        # NVML raises its own NVMLError subclasses, ctypes raises OSError/AttributeError on
        # broken driver installs: any of them means "no NVML" for inventory purposes
        if source == "nvml":
            raise InventoryError(_nvml_reason(exc)) from exc
        reason = _nvml_reason(exc)
        log.warning("GPU inventory: %s; falling back to sysfs", reason)
        return GpuInventory(read_sysfs_gpus(sysfs_root, proc_root), "sysfs", reason)
    return GpuInventory(gpus, "nvml")


def configured_inventory(setting: str, sysfs_root: Path = Path("/sys")) -> GpuInventory:
    """The inventory the node config's `gpu.inventory` names: auto | nvml | sysfs, or the
    absolute path of a snapshot file (`nri-sla inventory --save`)."""
    if setting in ("auto", "nvml", "sysfs"):
        return load_inventory(setting, sysfs_root=sysfs_root)
    return load_inventory("snapshot", snapshot=Path(setting))
