"""GPU inventory from NVML (the `pynvml` module, or any object with the same functions).

The module is passed in so tests can hand over a fake NVML; the real one is imported
lazily because loading it costs start-up time the OCI hook must not pay.
"""

from __future__ import annotations

import contextlib
import re
import warnings
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import Any

from nri_plugin.topology.gpus import Gpu, MigInstance, normalize_bus_id
from nri_plugin.topology.pcie import level_of_nvml, per_gpu, sysfs_levels
from nri_plugin.topology.sysfs_gpus import pci_numa_node

_MIG_NAME = re.compile(r"MIG\s+(\S+)\s*$")


def import_pynvml() -> ModuleType:
    with warnings.catch_warnings():
        # the "pynvml" shim warns that it is deprecated in favour of nvidia-ml-py, which
        # provides the very same module; the warning is noise for our users
        warnings.simplefilter("ignore")
        import pynvml
    return pynvml


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def read_mig_minors(proc_root: Path) -> dict[tuple[int, int, int | None], int]:
    """/proc/driver/nvidia-caps/mig-minors: (gpu minor, gi, ci or None) -> caps minor."""
    table: dict[tuple[int, int, int | None], int] = {}
    try:
        text = (proc_root / "driver/nvidia-caps/mig-minors").read_text()
    except OSError:
        return table
    pattern = re.compile(r"^gpu(\d+)/gi(\d+)(?:/ci(\d+))?/access\s+(\d+)$")
    for line in text.splitlines():
        m = pattern.match(line.strip())
        if m:
            ci = int(m.group(3)) if m.group(3) is not None else None
            table[(int(m.group(1)), int(m.group(2)), ci)] = int(m.group(4))
    return table


class _Reader:
    def __init__(self, nvml: Any, sysfs_root: Path, proc_root: Path) -> None:
        self.nvml = nvml
        self.sysfs_root = sysfs_root
        self.mig_minors = read_mig_minors(proc_root)

    def optional(self, fn_name: str, *args: Any) -> Any:
        """Call an NVML function that older drivers or some GPUs do not support."""
        fn = getattr(self.nvml, fn_name, None)
        if fn is None:
            return None
        try:
            return fn(*args)
        except self.nvml.NVMLError:
            return None

    def read(self) -> tuple[Gpu, ...]:
        nvml = self.nvml
        count = nvml.nvmlDeviceGetCount()
        handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        buses = [normalize_bus_id(_text(nvml.nvmlDeviceGetPciInfo(h).busId)) or "" for h in handles]
        index_of_bus = {bus: i for i, bus in enumerate(buses)}
        links = [self.nvlink_remotes(h) for h in handles]
        numas = [self.numa_node(h, bus) for h, bus in zip(handles, buses, strict=True)]
        levels = self.pcie_levels(handles, buses, numas)
        gpus = []
        for i, handle in enumerate(handles):
            memory = self.optional("nvmlDeviceGetMemoryInfo", handle)
            minor = self.optional("nvmlDeviceGetMinorNumber", handle)
            mode = self.optional("nvmlDeviceGetMigMode", handle)
            mig_enabled = bool(mode) and mode[0] == getattr(nvml, "NVML_DEVICE_MIG_ENABLE", 1)
            gpus.append(Gpu(
                index=i,
                uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
                pci_bus_id=buses[i],
                numa_node=numas[i],
                memory_bytes=int(memory.total) if memory is not None else 0,
                name=_text(self.optional("nvmlDeviceGetName", handle) or ""),
                minor=minor,
                nvlink_links=self.link_counts(i, links, index_of_bus),
                pcie_levels=per_gpu(levels, i),
                mig_enabled=mig_enabled,
                mig_instances=self.mig_instances(i, handle, minor) if mig_enabled else (),
            ))
        return tuple(gpus)

    def numa_node(self, handle: Any, bus: str) -> int | None:
        numa = self.optional("nvmlDeviceGetNumaNodeId", handle)
        if numa is None or numa < 0:
            return pci_numa_node(self.sysfs_root, bus)
        return int(numa)

    def pcie_levels(self, handles: list[Any], buses: list[str],
                    numas: list[int | None]) -> dict[tuple[int, int], str]:
        """(i, j) -> PCIe level: NVML's common ancestor, else the sysfs PCI tree."""
        levels = sysfs_levels(self.sysfs_root, buses, numas)
        for i in range(len(handles)):
            for j in range(i + 1, len(handles)):
                value = self.optional("nvmlDeviceGetTopologyCommonAncestor",
                                      handles[i], handles[j])
                level = level_of_nvml(int(value)) if value is not None else None
                if level is not None:
                    levels[(i, j)] = levels[(j, i)] = level
        return levels

    def nvlink_remotes(self, handle: Any) -> Counter[str]:
        """Remote PCI bus id -> number of active NVLinks to it."""
        remotes: Counter[str] = Counter()
        enabled = getattr(self.nvml, "NVML_FEATURE_ENABLED", 1)
        for link in range(getattr(self.nvml, "NVML_NVLINK_MAX_LINKS", 18)):
            # links that do not exist answer NOT_SUPPORTED/INVALID_ARGUMENT: skip, not stop,
            # because populated links need not be contiguous
            if self.optional("nvmlDeviceGetNvLinkState", handle, link) != enabled:
                continue
            info = self.optional("nvmlDeviceGetNvLinkRemotePciInfo", handle, link)
            bus = normalize_bus_id(_text(info.busId)) if info is not None else None
            if bus:
                remotes[bus] += 1
        return remotes

    @staticmethod
    def link_counts(i: int, links: list[Counter[str]],
                    index_of_bus: dict[str, int]) -> tuple[tuple[int, int], ...]:
        """(peer, NVLinks) for GPU i. A remote that is not a GPU is an NVSwitch: two GPUs on
        common switches are peers with as many links as both have into those switches
        (each side's links bound what the pair can use)."""
        counts: Counter[int] = Counter()
        for bus, n in links[i].items():
            if bus in index_of_bus:
                counts[index_of_bus[bus]] += n
        switches = {b: n for b, n in links[i].items() if b not in index_of_bus}
        for j, other in enumerate(links):
            shared = sum(min(n, other[b]) for b, n in switches.items() if b in other)
            if shared:
                counts[j] += shared
        counts.pop(i, None)
        return tuple(sorted(counts.items()))

    def mig_instances(self, gpu_index: int, handle: Any,
                      minor: int | None) -> tuple[MigInstance, ...]:
        nvml = self.nvml
        found = []
        for k in range(self.optional("nvmlDeviceGetMaxMigDeviceCount", handle) or 0):
            mig = self.optional("nvmlDeviceGetMigDeviceHandleByIndex", handle, k)
            if mig is None:
                continue  # slot without a MIG device
            gi = int(self.optional("nvmlDeviceGetGpuInstanceId", mig) or 0)
            ci = int(self.optional("nvmlDeviceGetComputeInstanceId", mig) or 0)
            memory = self.optional("nvmlDeviceGetMemoryInfo", mig)
            gpu_minor = gpu_index if minor is None else minor
            caps = tuple(m for m in (self.mig_minors.get((gpu_minor, gi, None)),
                                     self.mig_minors.get((gpu_minor, gi, ci))) if m is not None)
            found.append(MigInstance(
                uuid=_text(nvml.nvmlDeviceGetUUID(mig)),
                profile=self.profile(mig),
                gpu_index=gpu_index,
                gi_id=gi,
                ci_id=ci,
                index=len(found),
                memory_bytes=int(memory.total) if memory is not None else 0,
                caps_minors=caps,
            ))
        return tuple(found)

    def profile(self, mig: Any) -> str:
        # NVML names a MIG device "<GPU name> MIG 1g.10gb"; the suffix is the profile
        m = _MIG_NAME.search(_text(self.optional("nvmlDeviceGetName", mig) or ""))
        if m:
            return m.group(1)
        attrs = self.optional("nvmlDeviceGetAttributes", mig)
        if attrs is None:
            return "unknown"
        gib = round(attrs.memorySizeMB / 1024)
        g, c = attrs.gpuInstanceSliceCount, attrs.computeInstanceSliceCount
        return f"{g}g.{gib}gb" if c == g else f"{c}c.{g}g.{gib}gb"


def read_nvml_gpus(nvml: Any, sysfs_root: Path = Path("/sys"),
                   proc_root: Path = Path("/proc")) -> tuple[Gpu, ...]:
    """Read every GPU through NVML; raises nvml.NVMLError (or OSError) when NVML fails."""
    nvml.nvmlInit()
    try:
        return _Reader(nvml, sysfs_root, proc_root).read()
    finally:
        # a failing shutdown must not hide the inventory we already read
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()
