"""Block devices: MAJ:MIN or path -> whole disk; scheduler detection (fake sysfs + real /dev)."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from nri_plugin.enforce.blockdev import (
    any_bfq,
    bfq_active,
    io_scheduler,
    resolve_block_device,
    whole_disk,
)
from nri_plugin.enforce.capabilities import NodeCapabilities, detect_capabilities
from nri_plugin.enforce.devnode import dev_node
from nri_plugin.enforce.errors import DeviceError
from tests.support.sysfs_disks import make_sysfs_disk


@pytest.fixture
def sysfs(tmp_path: Path) -> Path:
    root = tmp_path / "sys"
    make_sysfs_disk(
        root, "nvme0n1", "259:0", "[none] mq-deadline", partitions=(("nvme0n1p1", "259:1"),)
    )
    make_sysfs_disk(root, "sdb", "8:16", "mq-deadline kyber [bfq] none")
    make_sysfs_disk(root, "zram0", "253:0", "none")
    return root


def test_maj_min_checked_against_sysfs(sysfs: Path) -> None:
    assert resolve_block_device("8:16", sysfs_root=sysfs) == (8, 16)
    assert resolve_block_device(" 259:0 ", sysfs_root=sysfs) == (259, 0)
    with pytest.raises(DeviceError) as exc:
        resolve_block_device("9:9", sysfs_root=sysfs)
    assert exc.value.device == "9:9"
    assert str(exc.value) == "io device '9:9': is not a block device under /dev"


def test_partition_refused_or_mapped_to_disk(sysfs: Path) -> None:
    with pytest.raises(DeviceError, match=r"partition.*259:0"):
        resolve_block_device("259:1", sysfs_root=sysfs)
    assert resolve_block_device("259:1", sysfs_root=sysfs, partition_to_disk=True) == (259, 0)
    assert whole_disk(259, 1, sysfs) == (259, 0)
    assert whole_disk(8, 16, sysfs) == (8, 16)


def test_any_bfq_looks_at_every_whole_disk(sysfs: Path, tmp_path: Path) -> None:
    assert any_bfq(sysfs)  # sdb
    other = tmp_path / "other"
    make_sysfs_disk(other, "vda", "254:0", "[mq-deadline] bfq none")
    assert not any_bfq(other)
    assert not any_bfq(tmp_path / "missing")


@pytest.mark.parametrize(
    ("version", "bfq_disk", "want"),
    [
        (2, True, NodeCapabilities(io_weight=True, bfq=True)),
        (2, False, NodeCapabilities(io_weight=True, bfq=False)),  # io.weight (io.cost)
        (1, True, NodeCapabilities(io_weight=True, bfq=True)),  # blkio.bfq.weight
        (1, False, NodeCapabilities(io_weight=False, bfq=False)),  # CFQ is gone: nothing
    ],
)
def test_capabilities(
    sysfs: Path, tmp_path: Path, version: int, bfq_disk: bool, want: NodeCapabilities
) -> None:
    if not bfq_disk:
        sysfs = tmp_path / "no-bfq"
        make_sysfs_disk(sysfs, "vda", "254:0", "[mq-deadline] bfq none")
    assert detect_capabilities(version, str(sysfs)) == want


def test_scheduler(sysfs: Path) -> None:
    assert io_scheduler(259, 0, sysfs) == "none"
    assert io_scheduler(8, 16, sysfs) == "bfq"
    assert io_scheduler(253, 0, sysfs) == "none"  # single choice, no brackets
    assert io_scheduler(1, 1, sysfs) is None
    assert bfq_active(8, 16, sysfs) and not bfq_active(259, 0, sysfs)


def test_empty_device() -> None:
    with pytest.raises(DeviceError, match="empty device"):
        resolve_block_device("  ")


@pytest.fixture
def real_dev_links():
    """make(target) -> a symlink /dev/nri-sla-test-<random> -> target, removed afterwards.
    Root only: /dev is the host's devtmpfs."""
    if os.geteuid() != 0 or not os.access("/dev", os.W_OK):
        pytest.skip("needs root and a writable /dev to place a symlink there")
    made: list[Path] = []

    def make(target: str) -> str:
        link = Path(f"/dev/nri-sla-test-{uuid.uuid4().hex[:12]}")
        link.symlink_to(target)
        made.append(link)
        return str(link)

    yield make
    for link in made:
        link.unlink(missing_ok=True)


def test_every_unusable_path_gets_the_same_answer(real_dev_links, tmp_path: Path) -> None:
    """A tenant must not learn what exists on the host: a missing file, a host file, a
    character device, a link out of /dev and a link that leaves /dev and comes back to a
    real disk all read alike, and none is followed outside /dev."""
    found = _first_real_disk()
    detour = tmp_path / "detour"
    if found is not None:
        detour.symlink_to(found[0])  # /dev/x -> /tmp/... -> /dev/<disk>: left /dev
    specs = [
        "/etc/shadow",
        "/nonexistent",
        "/dev/null",
        "/dev/nri-sla-missing-x",
        real_dev_links("/etc/shadow"),
        real_dev_links("../etc/shadow"),
        real_dev_links("/dev/../etc/passwd"),
        real_dev_links(str(detour)),
        "1:3",  # /dev/null's numbers: no block device
        "../etc/shadow",
        "disk/../../etc/shadow",
        "/dev/../etc/shadow",
    ]
    details = set()
    for spec in specs:
        with pytest.raises(DeviceError) as exc:
            resolve_block_device(spec)
        assert str(exc.value) == f"io device {spec!r}: is not a block device under /dev"
        details.add(exc.value.detail)
    assert details == {"is not a block device under /dev"}


def test_links_inside_dev_are_followed(real_dev_links) -> None:
    found = _first_real_disk()
    if found is None:
        pytest.skip("no whole disk under /sys/block with a /dev node on this machine")
    dev, maj, mnr = found
    # Like /dev/disk/by-id/* -> ../../sda: relative, and absolute, both staying in /dev.
    assert resolve_block_device(real_dev_links(dev.name)) == (maj, mnr)
    assert resolve_block_device(real_dev_links(str(dev))) == (maj, mnr)
    hop = real_dev_links(dev.name)
    assert resolve_block_device(real_dev_links(hop)) == (maj, mnr)  # a chain inside /dev


def test_dev_node_walks_inside_its_root_only(tmp_path: Path) -> None:
    dev = tmp_path / "dev"
    (dev / "disk" / "by-id").mkdir(parents=True)
    (dev / "sda").write_text("")
    (dev / "disk" / "by-id" / "wwn-1").symlink_to("../../sda")
    (dev / "abs").symlink_to(str(dev / "sda"))
    (dev / "out").symlink_to("/etc/shadow")
    (dev / "up").symlink_to("..")
    (dev / "loop1").symlink_to("loop2")
    (dev / "loop2").symlink_to("loop1")
    (tmp_path / "outside").symlink_to(str(dev / "sda"))
    (dev / "via").symlink_to(str(tmp_path / "outside"))  # leaves, then comes back
    root = str(dev)
    assert dev_node("sda", root) == f"{root}/sda"
    assert dev_node(f"{root}/disk/by-id/wwn-1", root) == f"{root}/sda"
    assert dev_node("disk/by-id/../../sda", root) == f"{root}/sda"
    assert dev_node("abs", root) == f"{root}/sda"
    assert dev_node(f"{root}/./disk//by-id/", root) == f"{root}/disk/by-id"
    for bad in (
        "out",
        "up/etc",
        "loop1",
        "via",
        "missing",
        "sda/x",
        "../etc/shadow",
        f"{root}/../{dev.name}/sda",
        "/etc/shadow",
        f"{root}x/sda",
        "sd\0a",
    ):
        assert dev_node(bad, root) is None, bad


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
