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

from nri_plugin.topology.gpu_health import GPU_HEALTHY, GpuHealth, unhealthy, unknown
from nri_plugin.topology.gpus import Gpu, MigInstance, normalize_bus_id
from nri_plugin.topology.pcie import level_of_nvml, per_gpu, sysfs_levels
from nri_plugin.topology.sysfs_gpus import pci_numa_node

_MIG_NAME = re.compile(r"MIG\s+(\S+)\s*$")


def import_pynvml() -> ModuleType:
    with warnings.catch_warnings():
        # nri-sla depends on nvidia-ml-py (the `pynvml` module); where the deprecated
        # "pynvml" package is installed too, it warns at this import: noise for our users
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


# NVML return codes this module tells apart (nvml.h; the same numbers in pynvml)
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_FUNCTION_NOT_FOUND = 13  # a driver older than the call
NVML_ERROR_GPU_IS_LOST = 15


def error_code(exc: BaseException) -> int | None:
    """The NVML return code of an NVMLError (pynvml and fakes keep it in `value`)."""
    value = getattr(exc, "value", None)
    return value if isinstance(value, int) else None


def health_of_error(exc: BaseException) -> GpuHealth:
    """What a failed NVML call for one GPU says of it: lost (unhealthy), or unread."""
    if error_code(exc) == NVML_ERROR_GPU_IS_LOST:
        return unhealthy("NVML: the GPU is lost (fallen off the bus or hung)")
    return unknown(f"NVML: {type(exc).__name__}: {exc}")


class _Reader:
    def __init__(self, nvml: Any, sysfs_root: Path, proc_root: Path) -> None:
        self.nvml = nvml
        self.sysfs_root = sysfs_root
        self.mig_minors = read_mig_minors(proc_root)

    def optional(self, fn_name: str, *args: Any) -> Any:
        """Call an NVML function that older drivers or some GPUs do not support. A lost
        GPU is not an unsupported call: that error goes on (the GPU is marked lost)."""
        fn = getattr(self.nvml, fn_name, None)
        if fn is None:
            return None
        try:
            return fn(*args)
        except self.nvml.NVMLError as exc:
            if error_code(exc) == NVML_ERROR_GPU_IS_LOST:
                raise
            return None

    def read(self) -> tuple[Gpu, ...]:
        """Every GPU NVML counts. One whose calls fail is still listed, as a placeholder
        (index, and the bus id when that was read) with the failure as its health: the
        caller puts the last good facts in (topology.inventory)."""
        nvml = self.nvml
        count = nvml.nvmlDeviceGetCount()
        probes: list[tuple[Any, str] | Gpu] = [self.probe(i) for i in range(count)]
        index_of_bus = {p[1]: i for i, p in enumerate(probes) if isinstance(p, tuple)}
        links: list[Counter[str]] = []
        for i, p in enumerate(probes):
            remotes: Counter[str] = Counter()
            if isinstance(p, tuple):
                try:
                    remotes = self.nvlink_remotes(p[0])
                except nvml.NVMLError as exc:
                    probes[i] = _placeholder(i, p[1], health_of_error(exc))
            links.append(remotes)
        numas: dict[int, int | None] = {}
        for i, p in enumerate(probes):
            if isinstance(p, tuple):
                try:
                    numas[i] = self.numa_node(*p)
                except nvml.NVMLError as exc:
                    probes[i] = _placeholder(i, p[1], health_of_error(exc))
        levels = self.pcie_levels(probes, numas)
        gpus = []
        for i, p in enumerate(probes):
            if not isinstance(p, tuple):
                gpus.append(p)
                continue
            handle, bus = p
            try:
                gpus.append(
                    self.gpu(
                        i,
                        handle,
                        bus,
                        numas[i],
                        self.link_counts(i, links, index_of_bus),
                        per_gpu(levels, i),
                    )
                )
            except nvml.NVMLError as exc:
                gpus.append(_placeholder(i, bus, health_of_error(exc)))
        return tuple(gpus)

    def probe(self, i: int) -> tuple[Any, str] | Gpu:
        """GPU i's handle and bus id, or its placeholder when NVML fails for it."""
        bus = ""
        try:
            handle = self.nvml.nvmlDeviceGetHandleByIndex(i)
            bus = normalize_bus_id(_text(self.nvml.nvmlDeviceGetPciInfo(handle).busId)) or ""
        except self.nvml.NVMLError as exc:
            return _placeholder(i, bus, health_of_error(exc))
        return handle, bus

    def gpu(
        self,
        i: int,
        handle: Any,
        bus: str,
        numa: int | None,
        links: tuple[tuple[int, int], ...],
        pcie: tuple[tuple[int, str], ...],
    ) -> Gpu:
        nvml = self.nvml
        memory = self.optional("nvmlDeviceGetMemoryInfo", handle)
        minor = self.optional("nvmlDeviceGetMinorNumber", handle)
        mig_enabled, mig_error = self.mig_mode(handle)
        return Gpu(
            index=i,
            uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
            pci_bus_id=bus,
            numa_node=numa,
            memory_bytes=int(memory.total) if memory is not None else 0,
            name=_text(self.optional("nvmlDeviceGetName", handle) or ""),
            minor=minor,
            nvlink_links=links,
            pcie_levels=pcie,
            mig_enabled=mig_enabled,
            mig_instances=self.mig_instances(i, handle, minor) if mig_enabled else (),
            health=GPU_HEALTHY if mig_error is None else mig_error,
            mig_unknown=mig_error is not None,
        )

    def mig_mode(self, handle: Any) -> tuple[bool, GpuHealth | None]:
        """(MIG enabled, None), or (False, why the mode is unknown)."""
        fn = getattr(self.nvml, "nvmlDeviceGetMigMode", None)
        if fn is None:
            return False, None  # a library that predates MIG: no GPU of it has MIG
        try:
            current = fn(handle)[0]
        except self.nvml.NVMLError as exc:
            if error_code(exc) in (NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_FUNCTION_NOT_FOUND):
                return False, None  # a GPU (or driver) without MIG
            if error_code(exc) == NVML_ERROR_GPU_IS_LOST:
                raise
            return False, unknown(f"MIG mode unreadable (NVML: {type(exc).__name__}: {exc})")
        return current == getattr(self.nvml, "NVML_DEVICE_MIG_ENABLE", 1), None

    def numa_node(self, handle: Any, bus: str) -> int | None:
        numa = self.optional("nvmlDeviceGetNumaNodeId", handle)
        if numa is None or numa < 0:
            return pci_numa_node(self.sysfs_root, bus)
        return int(numa)

    def pcie_levels(
        self, probes: list[tuple[Any, str] | Gpu], numas: dict[int, int | None]
    ) -> dict[tuple[int, int], str]:
        """(i, j) -> PCIe level between the GPUs NVML read: NVML's common ancestor, else
        the sysfs PCI tree."""
        buses = [p[1] if isinstance(p, tuple) else p.pci_bus_id for p in probes]
        levels = sysfs_levels(self.sysfs_root, buses, [numas.get(i) for i in range(len(probes))])
        read = [(i, p[0]) for i, p in enumerate(probes) if isinstance(p, tuple)]
        for a, (i, hi) in enumerate(read):
            for j, hj in read[a + 1 :]:
                try:
                    value = self.optional("nvmlDeviceGetTopologyCommonAncestor", hi, hj)
                except self.nvml.NVMLError:  # a lost GPU: its own calls mark it
                    continue
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
    def link_counts(
        i: int, links: list[Counter[str]], index_of_bus: dict[str, int]
    ) -> tuple[tuple[int, int], ...]:
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

    def mig_instances(
        self, gpu_index: int, handle: Any, minor: int | None
    ) -> tuple[MigInstance, ...]:
        nvml = self.nvml
        found: list[MigInstance] = []
        for k in range(self.optional("nvmlDeviceGetMaxMigDeviceCount", handle) or 0):
            mig = self.optional("nvmlDeviceGetMigDeviceHandleByIndex", handle, k)
            if mig is None:
                continue  # slot without a MIG device
            gi = int(self.optional("nvmlDeviceGetGpuInstanceId", mig) or 0)
            ci = int(self.optional("nvmlDeviceGetComputeInstanceId", mig) or 0)
            memory = self.optional("nvmlDeviceGetMemoryInfo", mig)
            gpu_minor = gpu_index if minor is None else minor
            caps = tuple(
                m
                for m in (
                    self.mig_minors.get((gpu_minor, gi, None)),
                    self.mig_minors.get((gpu_minor, gi, ci)),
                )
                if m is not None
            )
            found.append(
                MigInstance(
                    uuid=_text(nvml.nvmlDeviceGetUUID(mig)),
                    profile=self.profile(mig),
                    gpu_index=gpu_index,
                    gi_id=gi,
                    ci_id=ci,
                    index=len(found),
                    memory_bytes=int(memory.total) if memory is not None else 0,
                    caps_minors=caps,
                )
            )
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


def _placeholder(index: int, bus: str, health: GpuHealth) -> Gpu:
    """A GPU NVML counts but whose facts it did not give: its MIG mode is unknown too."""
    return Gpu(
        index=index, uuid="", pci_bus_id=bus, numa_node=None, health=health, mig_unknown=True
    )


def read_nvml_gpus(
    nvml: Any, sysfs_root: Path = Path("/sys"), proc_root: Path = Path("/proc")
) -> tuple[Gpu, ...]:
    """Read every GPU through NVML. Raises nvml.NVMLError (or OSError) when NVML as a
    whole fails (init, count); a GPU whose own calls fail is listed with that failure as
    its health (unknown, or unhealthy when lost) and placeholder facts."""
    nvml.nvmlInit()
    try:
        return _Reader(nvml, sysfs_root, proc_root).read()
    finally:
        # a failing shutdown must not hide the inventory we already read
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()
