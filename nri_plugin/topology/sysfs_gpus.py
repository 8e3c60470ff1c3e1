"""GPU inventory from sysfs: NVIDIA display/3D PCI functions and their NUMA node.

Used when NVML is missing or failing. It cannot see UUIDs, memory sizes, NVLink or MIG;
GPUs are numbered in PCI bus order, which is also NVML's default enumeration order. PCIe
distances between GPUs come from the PCI tree.
"""

from __future__ import annotations

from pathlib import Path

from nri_plugin.topology.gpus import Gpu, normalize_bus_id
from nri_plugin.topology.pcie import per_gpu, sysfs_levels

NVIDIA_VENDOR = 0x10DE
# PCI class 0x0300xx is a VGA controller, 0x0302xx a 3D controller (data-centre GPUs)
GPU_CLASSES = (0x0300, 0x0302)


def _read_int(path: Path, base: int = 0) -> int | None:
    try:
        return int(path.read_text().strip(), base)
    except (OSError, ValueError):
        return None


def pci_numa_node(sysfs_root: Path, bus_id: str) -> int | None:
    """The NUMA node the kernel reports for a PCI function; None for -1 or unknown."""
    node = _read_int(sysfs_root / "bus/pci/devices" / bus_id / "numa_node")
    return node if node is not None and node >= 0 else None


def _proc_info(proc_root: Path, bus_id: str) -> dict[str, str]:
    """/proc/driver/nvidia/gpus/<bus>/information ("Model:", "Device Minor:"), if loaded."""
    info: dict[str, str] = {}
    try:
        text = (proc_root / "driver/nvidia/gpus" / bus_id / "information").read_text()
    except OSError:
        return info
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            info[key.strip()] = value.strip()
    return info


def read_sysfs_gpus(
    sysfs_root: Path = Path("/sys"), proc_root: Path = Path("/proc")
) -> tuple[Gpu, ...]:
    devices = sysfs_root / "bus/pci/devices"
    found: list[str] = []
    if devices.is_dir():
        for entry in devices.iterdir():
            if _read_int(entry / "vendor", 16) != NVIDIA_VENDOR:
                continue
            pci_class = _read_int(entry / "class", 16)
            if pci_class is None or (pci_class >> 8) not in GPU_CLASSES:
                continue
            bus = normalize_bus_id(entry.name)
            if bus:
                found.append(bus)
    buses = sorted(found)
    numas = [pci_numa_node(sysfs_root, bus) for bus in buses]
    levels = sysfs_levels(sysfs_root, buses, numas)
    gpus = []
    for index, bus in enumerate(buses):
        info = _proc_info(proc_root, bus)
        minor = info.get("Device Minor", "")
        gpus.append(
            Gpu(
                index=index,
                uuid=info.get("GPU UUID", "")
                if info.get("GPU UUID", "").startswith("GPU-")
                else "",
                pci_bus_id=bus,
                numa_node=numas[index],
                name=info.get("Model", ""),
                minor=int(minor) if minor.isdigit() else None,
                pcie_levels=per_gpu(levels, index),
            )
        )
    return tuple(gpus)
