"""Block devices: MAJ:MIN or path -> whole disk; scheduler detection (fake sysfs + real /dev)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nri_plugin.enforce import DeviceError
from nri_plugin.enforce.blockdev import (
    any_bfq,
    bfq_active,
    io_scheduler,
    resolve_block_device,
    resolve_io_device,
    whole_disk,
)
from nri_plugin.enforce.capabilities import NodeCapabilities, detect_capabilities


@pytest.fixture
def sysfs(tmp_path: Path, trees) -> Path:
    root = tmp_path / "sys"
    trees.make_sysfs_disk(
        root, "nvme0n1", "259:0", "[none] mq-deadline", partitions=(("nvme0n1p1", "259:1"),)
    )
    trees.make_sysfs_disk(root, "sdb", "8:16", "mq-deadline kyber [bfq] none")
    trees.make_sysfs_disk(root, "zram0", "253:0", "none")
    return root


def test_maj_min_checked_against_sysfs(sysfs: Path) -> None:
    assert resolve_block_device("8:16", sysfs_root=sysfs) == (8, 16)
    assert resolve_block_device(" 259:0 ", sysfs_root=sysfs) == (259, 0)
    with pytest.raises(DeviceError, match="no block device 9:9") as exc:
        resolve_block_device("9:9", sysfs_root=sysfs)
    assert exc.value.device == "9:9"


def test_partition_refused_or_mapped_to_disk(sysfs: Path) -> None:
    with pytest.raises(DeviceError, match=r"partition.*259:0"):
        resolve_block_device("259:1", sysfs_root=sysfs)
    assert resolve_block_device("259:1", sysfs_root=sysfs, partition_to_disk=True) == (259, 0)
    assert whole_disk(259, 1, sysfs) == (259, 0)
    assert whole_disk(8, 16, sysfs) == (8, 16)


def test_any_bfq_looks_at_every_whole_disk(sysfs: Path, tmp_path: Path, trees) -> None:
    assert any_bfq(sysfs)  # sdb
    other = tmp_path / "other"
    trees.make_sysfs_disk(other, "vda", "254:0", "[mq-deadline] bfq none")
    assert not any_bfq(other)
    assert not any_bfq(tmp_path / "missing")


@pytest.mark.parametrize(("version", "bfq_disk", "want"), [
    (2, True, NodeCapabilities(io_weight=True, bfq=True)),
    (2, False, NodeCapabilities(io_weight=True, bfq=False)),  # io.weight (io.cost)
    (1, True, NodeCapabilities(io_weight=True, bfq=True)),  # blkio.bfq.weight
    (1, False, NodeCapabilities(io_weight=False, bfq=False)),  # CFQ is gone: nothing
])
def test_capabilities(sysfs: Path, tmp_path: Path, trees, version: int, bfq_disk: bool,
                      want: NodeCapabilities) -> None:
    if not bfq_disk:
        sysfs = tmp_path / "no-bfq"
        trees.make_sysfs_disk(sysfs, "vda", "254:0", "[mq-deadline] bfq none")
    assert detect_capabilities(version, str(sysfs)) == want


def test_resolve_io_device_speaks_value_error() -> None:
    """The planner's resolver: a DeviceError becomes a ValueError with the same text."""
    with pytest.raises(ValueError, match="empty device") as exc:
        resolve_io_device("  ")
    assert not isinstance(exc.value, DeviceError)
    assert isinstance(exc.value.__cause__, DeviceError)


def test_scheduler(sysfs: Path) -> None:
    assert io_scheduler(259, 0, sysfs) == "none"
    assert io_scheduler(8, 16, sysfs) == "bfq"
    assert io_scheduler(253, 0, sysfs) == "none"  # single choice, no brackets
    assert io_scheduler(1, 1, sysfs) is None
    assert bfq_active(8, 16, sysfs) and not bfq_active(259, 0, sysfs)


def test_paths_missing_and_not_block(tmp_path: Path, sysfs: Path) -> None:
    with pytest.raises(DeviceError, match="does not exist"):
        resolve_block_device(str(tmp_path / "nvme9n1"), sysfs_root=sysfs)
    regular = tmp_path / "file"
    regular.write_text("x")
    with pytest.raises(DeviceError, match="not a block device"):
        resolve_block_device(str(regular), sysfs_root=sysfs)
    with pytest.raises(DeviceError, match="not a block device"):
        resolve_block_device("/dev/null")
    with pytest.raises(DeviceError, match="empty device"):
        resolve_block_device("  ")


def _first_real_disk() -> tuple[Path, int, int] | None:
    block = Path("/sys/block")
    if not block.is_dir():
        return None
    for entry in sorted(block.iterdir()):
        dev = Path("/dev") / entry.name
        if dev.exists() and not entry.name.startswith(("loop", "ram")):
            maj, mnr = (int(x) for x in (entry / "dev").read_text().split(":"))
            return dev, maj, mnr
    return None


def test_real_disk_by_path_name_and_numbers() -> None:
    found = _first_real_disk()
    if found is None:
        pytest.skip("no whole disk under /sys/block with a /dev node on this machine")
    dev, maj, mnr = found
    assert resolve_block_device(str(dev)) == (maj, mnr)
    assert resolve_block_device(dev.name) == (maj, mnr)  # relative to /dev
    assert resolve_block_device(f"{maj}:{mnr}") == (maj, mnr)
    st = os.stat(dev)
    assert (os.major(st.st_rdev), os.minor(st.st_rdev)) == (maj, mnr)
