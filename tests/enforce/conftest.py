"""Fixtures for nri_plugin.enforce: a fake /proc and real scratch cgroups (fake cgroup
trees: tests/support/cgroups.py, the v1_tree and v2_tree fixtures of tests/conftest.py)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from nri_plugin.enforce.cgpaths import CgroupFacts
from nri_plugin.enforce.cgroupdetect import detect_cgroup_facts


@pytest.fixture
def fake_proc(tmp_path: Path) -> Path:
    proc = tmp_path / "proc"
    (proc / "1").mkdir(parents=True)
    (proc / "1" / "comm").write_text("init\n")
    return proc


# ------------------------------------------------------------------ real cgroups


@dataclass
class Scratch:
    """Scratch cgroups on the real host: <own cgroup>/<top>/<pod>/<ctr> per controller."""

    facts: CgroupFacts
    top: dict[str, Path]  # controller -> scratch top dir
    pod: dict[str, Path]
    ctr: dict[str, Path]


def _host_facts_or_skip() -> CgroupFacts:
    if os.geteuid() != 0:
        pytest.skip("needs root to create cgroups (run the suite as root)")
    try:
        facts = detect_cgroup_facts()
    except Exception as e:  # any failure: no usable hierarchy here
        pytest.skip(f"no cgroup hierarchy detected: {e}")
    return facts


def _rmdir_tree(path: Path) -> None:
    # cgroup dirs hold only kernel files: remove leaves first, rmdir each (never unlink).
    if not path.is_dir():
        return
    for child in sorted((p for p in path.iterdir() if p.is_dir()), reverse=True):
        _rmdir_tree(child)
    with contextlib.suppress(OSError):
        path.rmdir()


@pytest.fixture
def scratch_v1() -> Iterator[Scratch]:
    """Per-test scratch cgroups below this process's own cgroup in cpu, cpuset, memory and
    blkio; removed afterwards (leaves first)."""
    facts = _host_facts_or_skip()
    if facts.version != 1:
        pytest.skip("needs a cgroup v1 (or hybrid) host for v1 writes")
    own = facts.process_paths(os.getpid())
    name = f"nri-sla-test-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    top: dict[str, Path] = {}
    pod: dict[str, Path] = {}
    ctr: dict[str, Path] = {}
    try:
        for controller in ("cpu", "cpuset", "memory", "blkio"):
            if controller not in own.dirs:
                continue
            base = Path(own.dirs[controller])
            top[controller] = base / name
            pod[controller] = top[controller] / "pod"
            ctr[controller] = pod[controller] / "ctr"
            for d in (top[controller], pod[controller], ctr[controller]):
                d.mkdir()
                if controller == "cpuset":
                    # A new cpuset is empty; children can only use what the parent has.
                    for f in ("cpuset.mems", "cpuset.cpus"):
                        (d / f).write_text((d.parent / f).read_text())
        yield Scratch(facts, top, pod, ctr)
    finally:
        for d in top.values():
            _rmdir_tree(d)


@dataclass
class LoopDisk:
    path: Path
    major: int
    minor: int
    part_major: int | None
    part_minor: int | None


@pytest.fixture
def loop_disk(tmp_path: Path) -> Iterator[LoopDisk]:
    """A real block device: a loop device on a 16 MiB file with one MBR partition, its
    scheduler set to bfq when available; detached (and scheduler restored) afterwards."""
    if os.geteuid() != 0:
        pytest.skip("needs root for losetup")
    losetup = shutil.which("losetup")
    if losetup is None:
        pytest.skip("needs losetup (util-linux / mount package)")
    img = tmp_path / "disk.img"
    data = bytearray(16 * 1024 * 1024)
    # One Linux partition (type 0x83) from sector 2048, 8192 sectors, and the MBR signature.
    entry = (
        bytes([0, 0, 0, 0, 0x83, 0, 0, 0])
        + (2048).to_bytes(4, "little")
        + (8192).to_bytes(4, "little")
    )
    data[446:462] = entry
    data[510:512] = b"\x55\xaa"
    img.write_bytes(bytes(data))
    proc = subprocess.run(
        [losetup, "-P", "-f", "--show", str(img)], capture_output=True, text=True, timeout=20
    )
    if proc.returncode != 0:
        pytest.skip(f"losetup could not attach a loop device: {proc.stderr.strip()}")
    dev = Path(proc.stdout.strip())
    sched = Path("/sys/block") / dev.name / "queue" / "scheduler"
    old_sched = None
    try:
        st = dev.stat()
        major, minor = os.major(st.st_rdev), os.minor(st.st_rdev)
        if sched.exists() and "bfq" in sched.read_text():
            old_sched = sched.read_text().split("[")[1].split("]")[0]
            sched.write_text("bfq")
        part = Path("/sys/block") / dev.name / f"{dev.name}p1" / "dev"
        pmaj = pmin = None
        for _ in range(50):  # partition scan is asynchronous (udev-less hosts too)
            if part.exists():
                pmaj, pmin = (int(x) for x in part.read_text().split(":"))
                break
            time.sleep(0.02)
        yield LoopDisk(dev, major, minor, pmaj, pmin)
    finally:
        if old_sched:
            with contextlib.suppress(OSError):
                sched.write_text(old_sched)
        subprocess.run([losetup, "-d", str(dev)], capture_output=True, timeout=20)


@pytest.fixture
def scratch_v2() -> Iterator[Path]:
    """A scratch container dir on a cgroup v2 host: <own cgroup>/<top>/ctr with the memory,
    cpu and io controllers enabled for ctr; removed afterwards."""
    facts = _host_facts_or_skip()
    if facts.version != 2:
        pytest.skip("needs a cgroup v2 (unified) host; this one is v1/hybrid (see tests/vm)")
    own = Path(facts.process_paths(os.getpid()).dir())
    available = (own / "cgroup.subtree_control").read_text().split()
    wanted = [c for c in ("cpu", "memory", "io") if c in available]
    if "memory" not in wanted:
        pytest.skip(f"memory controller not delegated to {own} (cgroup.subtree_control)")
    top = own / f"nri-sla-test-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    try:
        top.mkdir()
        (top / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in wanted))
        (top / "ctr").mkdir()
        yield top / "ctr"
    finally:
        _rmdir_tree(top)
