"""PCIe distance between GPUs: from NVML's common-ancestor level, else from the sysfs tree.

/sys/bus/pci/devices/<bus id> is a link into /sys/devices/pci<domain>:<bus>/<root port>/
<switch ports>.../<bus id>: the bridges two GPUs share tell how far apart they are.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

_ROOT_BUS = re.compile(r"^pci[0-9a-f]{4}:[0-9a-f]{2}$")  # a host bridge's root bus in sysfs

# nvmlGpuTopologyLevel_t values: INTERNAL 0, SINGLE 10, MULTIPLE 20, HOSTBRIDGE 30, NODE 40,
# SYSTEM 50. INTERNAL (two GPUs on one board) sits behind the board's own switch.
_NVML_LEVELS = ((20, "switch"), (30, "hostbridge"), (40, "numa"), (50, "system"))


def level_of_nvml(value: int) -> str | None:
    """One of PCIE_LEVELS for an NVML topology level; None for a value NVML never gives."""
    return next((name for top, name in _NVML_LEVELS if 0 <= value <= top), None)


def pci_path(sysfs_root: Path, bus_id: str) -> tuple[str, ...]:
    """The device's place in the PCI tree, root bus first: ("pci0000:00", "0000:00:01.0",
    ..., bus_id); () when sysfs does not show it."""
    link = sysfs_root / "bus/pci/devices" / bus_id
    if not link.exists():
        return ()
    parts = Path(os.path.realpath(link)).parts
    root = next((i for i, part in enumerate(parts) if _ROOT_BUS.match(part)), None)
    return tuple(parts[root:]) if root is not None else ()


def level_of_paths(
    a: tuple[str, ...], b: tuple[str, ...], numa_a: int | None, numa_b: int | None
) -> str | None:
    """One of PCIE_LEVELS for two devices' pci_path()s; None when it cannot be told."""
    if not a or not b:
        return None
    shared = 0
    for x, y in zip(a[:-1], b[:-1], strict=False):
        if x != y:
            break
        shared += 1
    if shared >= 2:
        # below one root port: a root port has a single link, so a switch joins them
        return "switch"
    if shared == 1:
        return "hostbridge"
    if numa_a is None or numa_b is None:
        return None
    return "numa" if numa_a == numa_b else "system"


def sysfs_levels(
    sysfs_root: Path, buses: list[str], numas: list[int | None]
) -> dict[tuple[int, int], str]:
    """(i, j) -> level for each pair of devices (list positions) that sysfs can place."""
    paths = [pci_path(sysfs_root, bus) for bus in buses]
    levels = {}
    for i in range(len(buses)):
        for j in range(i + 1, len(buses)):
            level = level_of_paths(paths[i], paths[j], numas[i], numas[j])
            if level is not None:
                levels[(i, j)] = levels[(j, i)] = level
    return levels


def per_gpu(levels: dict[tuple[int, int], str], i: int) -> tuple[tuple[int, str], ...]:
    """GPU i's (peer, level) pairs out of a pair table."""
    return tuple(sorted((j, level) for (a, j), level in levels.items() if a == i))
