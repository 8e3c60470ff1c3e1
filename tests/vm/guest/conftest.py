"""Guest-side fixtures: tests in this directory run on a real cgroup v2 hierarchy.

They are collected everywhere but run only inside the qemu guest that
tests/vm/test_cgroup_v2_guest.py boots (it sets NRI_SLA_VM_GUEST=1), or on a disposable
cgroup v2 machine where NRI_SLA_CGROUP2_HOST=1 says scribbling on the root cgroup is fine.
Elsewhere they skip with the reason. Adding a guest test = adding a test_*.py file here.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

CGROUP_ROOT = Path("/sys/fs/cgroup")
HOST_OPT_IN = "NRI_SLA_CGROUP2_HOST"
HERE = Path(__file__).resolve().parent


def _vm_module(name: str):
    """tests/vm/<name>.py, loaded once under the name every tests/vm conftest uses for it
    (test modules and conftests cannot import each other with --import-mode=importlib)."""
    key = f"nri_sla_vm_{name}"
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(key, HERE.parent / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[key] = module
        spec.loader.exec_module(module)
    return sys.modules[key]


def cgroup2_skip_reason() -> str | None:
    """Why guest tests cannot run here, or None if they can."""
    h = _vm_module("harness")
    if os.environ.get(h.GUEST_ENV_FLAG) != "1" and os.environ.get(HOST_OPT_IN) != "1":
        return (
            "cgroup v2 guest test: runs inside the qemu guest booted by "
            "tests/vm/test_cgroup_v2_guest.py (or set NRI_SLA_CGROUP2_HOST=1 on a "
            "disposable cgroup v2 machine)"
        )
    if os.geteuid() != 0:
        return "cgroup v2 guest test: needs root"
    mounts = Path("/proc/mounts").read_text().split("\n")
    if not any(line.split()[1:3] == [str(CGROUP_ROOT), "cgroup2"] for line in mounts if line):
        return f"cgroup v2 guest test: {CGROUP_ROOT} is not a cgroup2 mount"
    enabled = set((CGROUP_ROOT / "cgroup.subtree_control").read_text().split())
    missing = set(h.GUEST_CONTROLLERS) - enabled
    if missing:
        return (
            f"cgroup v2 guest test: controllers {sorted(missing)} not enabled in "
            f"{CGROUP_ROOT}/cgroup.subtree_control"
        )
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reason = cgroup2_skip_reason()
    for item in items:
        if HERE not in Path(item.path).resolve().parents:
            continue
        item.add_marker(pytest.mark.vm)
        if reason:
            item.add_marker(pytest.mark.skip(reason=reason))


# --------------------------------------------------------------- cgroup helpers


@dataclasses.dataclass(frozen=True)
class Cgroup:
    """A cgroup v2 directory with small read/write helpers."""

    path: Path

    def read(self, name: str) -> str:
        return (self.path / name).read_text().strip()

    def write(self, name: str, value: str) -> None:
        # One write() call per value: the kernel parses each write separately.
        with open(self.path / name, "w") as f:
            f.write(value)

    def keyed(self, name: str) -> dict[str, int]:
        """A flat keyed file (cpu.stat, memory.events) as a dict."""
        return {k: int(v) for k, v in (line.split() for line in self.read(name).splitlines())}

    def spawn(self, argv: list[str]) -> subprocess.Popen:
        """Start argv already inside this cgroup (the shell joins, then execs)."""
        script = f'echo $$ > "{self.path}/cgroup.procs" && exec "$@"'
        proc = subprocess.Popen(
            ["sh", "-c", script, "sh", *argv],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        # Return once it has joined (the shell's pid is the exec'd program's), so callers
        # can rely on the cgroup being populated.
        deadline = time.monotonic() + 10
        while proc.poll() is None and time.monotonic() < deadline:
            if str(proc.pid) in self.read("cgroup.procs").split():
                break
            time.sleep(0.01)
        return proc


def _remove_cgroup(path: Path) -> None:
    if not path.exists():
        return
    for child in path.iterdir():
        if child.is_dir():
            _remove_cgroup(child)
    with contextlib.suppress(OSError):
        (path / "cgroup.kill").write_text("1")
    for _ in range(50):  # killed tasks leave the cgroup asynchronously
        try:
            path.rmdir()
            return
        except OSError:
            time.sleep(0.05)
    path.rmdir()


@pytest.fixture
def scratch_cgroup() -> Iterator[Cgroup]:
    """A fresh child of the root cgroup with every guest controller available."""
    path = CGROUP_ROOT / f"nri-sla-test-{uuid.uuid4().hex[:8]}"
    path.mkdir()
    try:
        yield Cgroup(path)
    finally:
        _remove_cgroup(path)


@pytest.fixture
def cgroup_tree() -> Iterator[Callable[[str], Cgroup]]:
    """make(rel) creates /sys/fs/cgroup/<rel> (e.g. kubepods/burstable/pod1/ctr) with every
    guest controller delegated down to it, as kubelet and runc would; removed afterwards."""
    created: list[Path] = []
    controllers = " ".join(f"+{c}" for c in _vm_module("harness").GUEST_CONTROLLERS)

    def make(rel: str) -> Cgroup:
        path = CGROUP_ROOT
        parts = [p for p in rel.strip("/").split("/") if p]
        for i, part in enumerate(parts):
            path = path / part
            if not path.exists():
                path.mkdir()
                created.append(path)
            if i < len(parts) - 1:
                (path / "cgroup.subtree_control").write_text(controllers)
        return Cgroup(path)

    yield make
    for path in reversed(created):
        _remove_cgroup(path)


@dataclasses.dataclass(frozen=True)
class BlockDevice:
    path: Path
    major: int
    minor: int

    @property
    def majmin(self) -> str:
        return f"{self.major}:{self.minor}"


@pytest.fixture(scope="session")
def virtio_disk() -> BlockDevice:
    """The guest's blank scratch disk (/dev/vda), for io.max/io.weight on a real device."""
    dev = Path("/sys/block/vda/dev")
    if not dev.exists():
        pytest.skip("no /dev/vda: the harness attaches a raw virtio disk (-drive if=virtio)")
    major, minor = dev.read_text().strip().split(":")
    return BlockDevice(Path("/dev/vda"), int(major), int(minor))


@pytest.fixture(scope="session")
def virtio_partition(virtio_disk) -> BlockDevice:
    """/dev/vda1: the harness writes an MBR with one partition into the scratch disk."""
    dev = Path("/sys/block/vda/vda1/dev")
    if not dev.exists():
        pytest.skip("no /dev/vda1: the harness's disk image carries an MBR partition table")
    major, minor = dev.read_text().strip().split(":")
    return BlockDevice(Path("/dev/vda1"), int(major), int(minor))


@pytest.fixture
def busybox_bundle(tmp_path: Path):
    bundles = _vm_module("oci_bundle")
    if reason := bundles.runc_skip_reason():
        pytest.skip(reason)
    return bundles.make_busybox_bundle(tmp_path)


@pytest.fixture
def read_files_script() -> Callable[[list[str]], list[str]]:
    """argv for a container that prints `== name` and the content of each cgroup file."""

    def make(names: list[str]) -> list[str]:
        loop = 'for f in "$@"; do echo "== $f"; cat "/sys/fs/cgroup/$f" || echo "<absent>"; done'
        return ["/bin/sh", "-c", loop, "sh", *names]

    return make


def parse_sections(text: str) -> dict[str, str]:
    """Parse `== name` headed sections printed by read_files_script."""
    out: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        if line.startswith("== "):
            current = line[3:]
            out[current] = []
        elif current is not None:
            out[current].append(line)
    return {k: "\n".join(v).strip() for k, v in out.items()}


@pytest.fixture
def sections() -> Callable[[str], dict[str, str]]:
    return parse_sections
