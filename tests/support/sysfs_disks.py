"""Fake block devices in a sysfs tree, for the block-device and capability tests."""

from __future__ import annotations

from pathlib import Path


def make_sysfs_disk(
    sysfs: Path,
    name: str,
    dev: str,
    scheduler: str = "[none] bfq",
    partitions: tuple[tuple[str, str], ...] = (),
) -> None:
    """sysfs/devices/virtual/block/<name> (+ partitions) with /sys/dev/block and
    /sys/block links."""
    disk = sysfs / "devices" / "virtual" / "block" / name
    (disk / "queue").mkdir(parents=True)
    (disk / "dev").write_text(dev + "\n")
    (disk / "queue" / "scheduler").write_text(scheduler + "\n")
    links = sysfs / "dev" / "block"
    links.mkdir(parents=True, exist_ok=True)
    (links / dev).symlink_to(disk)
    (sysfs / "block").mkdir(exist_ok=True)
    (sysfs / "block" / name).symlink_to(disk)  # whole disks only, as in the kernel
    for pname, pdev in partitions:
        part = disk / pname
        part.mkdir()
        (part / "dev").write_text(pdev + "\n")
        (part / "partition").write_text("1\n")
        (links / pdev).symlink_to(part)
