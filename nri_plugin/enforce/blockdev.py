"""Block devices named in io.max rules: resolve to MAJ:MIN and inspect the I/O scheduler.

A pod names the device, and nri-sla resolves it as root: only MAJ:MIN of a block device
(/sys/dev/block) or a path under /dev, followed through symlinks only while they stay in
/dev (devnode.py), and every way of not being a usable block device gets one message
(NOT_A_DEVICE), so io.max cannot tell a tenant what exists on the host.

Verified on this project's test host (kernel 6.18): writing a partition's MAJ:MIN into
blkio.throttle.* fails with ENODEV (the kernel's per-cgroup block config only accepts whole
disks; v2 io.max goes through the same parser). So a partition is refused here with a
message that names its disk, unless the caller asks for the whole disk instead.

Paths are strings (a sysfs root may come as any os.PathLike): the OCI hook's cold run
resolves devices and checks the schedulers here without importing pathlib.
"""

from __future__ import annotations

import os
import re
import stat
from os.path import dirname, exists, join, realpath

from nri_plugin.enforce.devnode import DEV_ROOT, dev_node
from nri_plugin.enforce.errors import DeviceError

_MAJ_MIN = re.compile(r"^(\d+):(\d+)$")
SYSFS_ROOT = "/sys"
# Missing, not a block device, outside /dev, a link out of /dev: the same words for all.
NOT_A_DEVICE = "is not a block device under {root}"


def _sysfs_dev(sysfs_root: str | os.PathLike[str], major: int, minor: int) -> str:
    return join(os.fspath(sysfs_root), "dev", "block", f"{major}:{minor}")


def _read_text(path: str) -> str:
    with open(path) as fh:
        return fh.read()


def parse_maj_min(spec: str) -> tuple[int, int] | None:
    """(major, minor) of a "MAJ:MIN" device spec; None for anything else (a path)."""
    m = _MAJ_MIN.match(spec.strip())
    return (int(m.group(1)), int(m.group(2))) if m else None


def resolve_block_device(
    spec: str,
    dev_root: str = DEV_ROOT,
    sysfs_root: str | os.PathLike[str] = SYSFS_ROOT,
    *,
    partition_to_disk: bool = False,
) -> tuple[int, int]:
    """ "MAJ:MIN" or a device path -> (major, minor) of a whole disk.

    A path is absolute under dev_root or relative to it ("nvme0n1" -> /dev/nvme0n1);
    symlinks are followed only inside dev_root. A partition is a DeviceError (the kernel
    refuses it) unless partition_to_disk, which returns its disk.
    """
    spec = spec.strip()
    if not spec:
        raise DeviceError(spec, "empty device; give a block device path or 'MAJ:MIN'")
    unusable = DeviceError(spec, NOT_A_DEVICE.format(root=dev_root))
    numbers = parse_maj_min(spec)
    if numbers is not None:
        major, minor = numbers
    else:
        node = dev_node(spec, dev_root)
        try:
            st = os.lstat(node) if node is not None else None
        except OSError:
            st = None
        if st is None or not stat.S_ISBLK(st.st_mode):
            raise unusable
        major, minor = os.major(st.st_rdev), os.minor(st.st_rdev)
    if not exists(_sysfs_dev(sysfs_root, major, minor)):
        raise unusable  # numbers no block device of this kernel has
    disk = whole_disk(major, minor, sysfs_root)
    if disk != (major, minor):
        if not partition_to_disk:
            raise DeviceError(
                spec,
                f"{major}:{minor} is a partition; the kernel applies io limits to whole disks "
                f"only: name its disk {disk[0]}:{disk[1]} instead",
            )
        return disk
    return major, minor


def whole_disk(
    major: int, minor: int, sysfs_root: str | os.PathLike[str] = SYSFS_ROOT
) -> tuple[int, int]:
    """The disk a partition belongs to (a disk returns itself).

    A partition's sysfs dir has a "partition" file and sits inside its disk's dir.
    """
    node = _sysfs_dev(sysfs_root, major, minor)
    if not exists(join(node, "partition")):
        return major, minor
    parent_dev = join(dirname(realpath(node)), "dev")
    try:
        maj, _, mnr = _read_text(parent_dev).strip().partition(":")
        return int(maj), int(mnr)
    except (OSError, ValueError):
        raise DeviceError(
            f"{major}:{minor}", f"cannot find the disk of partition ({parent_dev})"
        ) from None


def io_scheduler(
    major: int, minor: int, sysfs_root: str | os.PathLike[str] = SYSFS_ROOT
) -> str | None:
    """The active scheduler ("[bfq]" in queue/scheduler -> "bfq"); None when not exposed."""
    try:
        text = _read_text(join(_sysfs_dev(sysfs_root, major, minor), "queue", "scheduler"))
    except OSError:
        return None
    m = re.search(r"\[([^\]]+)\]", text)
    if m:
        return m.group(1)
    # A device with only one choice may print it without brackets ("none").
    words = text.split()
    return words[0] if len(words) == 1 else None


def bfq_active(major: int, minor: int, sysfs_root: str | os.PathLike[str] = SYSFS_ROOT) -> bool:
    """True when BFQ schedules this device (then blkio.bfq.weight / io.bfq.weight apply)."""
    return io_scheduler(major, minor, sysfs_root) == "bfq"


def any_bfq(sysfs_root: str | os.PathLike[str] = SYSFS_ROOT) -> bool:
    """True when BFQ schedules any whole disk here (io.weight only works under BFQ or
    io.cost; the plugin plans weights for the node, not per device)."""
    block = join(os.fspath(sysfs_root), "block")
    try:
        devs = [_read_text(join(block, name, "dev")).strip() for name in os.listdir(block)]
    except OSError:
        return False
    return any(
        bfq_active(int(maj), int(mnr), sysfs_root)
        for maj, _, mnr in (dev.partition(":") for dev in devs)
        if maj.isdigit() and mnr.isdigit()
    )
