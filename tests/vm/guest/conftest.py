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
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

CGROUP_ROOT = Path("/sys/fs/cgroup")
HOST_OPT_IN = "NRI_SLA_CGROUP2_HOST"
HERE = Path(__file__).resolve().parent


def _harness():
    name = "nri_sla_vm_harness"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, HERE.parent / "harness.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def cgroup2_skip_reason() -> str | None:
    """Why guest tests cannot run here, or None if they can."""
    h = _harness()
    if os.environ.get(h.GUEST_ENV_FLAG) != "1" and os.environ.get(HOST_OPT_IN) != "1":
        return ("cgroup v2 guest test: runs inside the qemu guest booted by "
                "tests/vm/test_cgroup_v2_guest.py (or set NRI_SLA_CGROUP2_HOST=1 on a "
                "disposable cgroup v2 machine)")
    if os.geteuid() != 0:
        return "cgroup v2 guest test: needs root"
    mounts = Path("/proc/mounts").read_text().split("\n")
    if not any(line.split()[1:3] == [str(CGROUP_ROOT), "cgroup2"] for line in mounts if line):
        return f"cgroup v2 guest test: {CGROUP_ROOT} is not a cgroup2 mount"
    enabled = set((CGROUP_ROOT / "cgroup.subtree_control").read_text().split())
    missing = set(h.GUEST_CONTROLLERS) - enabled
    if missing:
        return (f"cgroup v2 guest test: controllers {sorted(missing)} not enabled in "
                f"{CGROUP_ROOT}/cgroup.subtree_control")
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reason = cgroup2_skip_reason()
    for item in items:
        if HERE not in Path(item.path).resolve().parents:
            continue
        item.add_marker(pytest.mark.vm)
        if reason:
            item.add_marker(pytest.mark.skip(reason=reason))


# --------------------------------------------------------------- results for the host

_results: dict[str, dict[str, Any]] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Fold setup/call/teardown into one result per test, for the outer host test."""
    entry = _results.setdefault(report.nodeid, {"outcome": "passed", "longrepr": "",
                                                 "sections": "", "duration": 0.0})
    entry["duration"] += report.duration
    if report.outcome == "failed":
        entry["outcome"] = "failed" if report.when == "call" else "error"
        entry["longrepr"] += f"[{report.when}] {report.longreprtext}\n"
    elif report.outcome == "skipped" and entry["outcome"] == "passed":
        entry["outcome"] = "skipped"
        longrepr = report.longrepr
        entry["longrepr"] = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    if report.when in ("call", "teardown") or report.outcome != "passed":
        entry["sections"] = "\n".join(f"--- {title}\n{text}" for title, text in
                                      report.sections)
    if report.when == "teardown":
        # Written after every test: if the guest dies or times out mid-run, the tests that
        # finished still report their own results on the host.
        _write_results()


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.failed:
        _results[report.nodeid] = {"outcome": "error", "longrepr": report.longreprtext,
                                   "sections": "", "duration": 0.0}


def _write_results() -> None:
    h = _harness()
    io_dir = Path(h.GUEST_IO_DIR)
    if os.environ.get(h.GUEST_ENV_FLAG) == "1" and io_dir.is_dir():
        tmp = io_dir / "results.json.tmp"
        tmp.write_text(json.dumps(_results, indent=1))
        tmp.replace(io_dir / "results.json")


def pytest_sessionfinish(session: pytest.Session) -> None:
    _write_results()


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
        return {k: int(v) for k, v in (line.split() for line in
                                       self.read(name).splitlines())}

    def spawn(self, argv: list[str]) -> subprocess.Popen:
        """Start argv already inside this cgroup (the shell joins, then execs)."""
        script = f'echo $$ > "{self.path}/cgroup.procs" && exec "$@"'
        proc = subprocess.Popen(["sh", "-c", script, "sh", *argv],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
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
    controllers = " ".join(f"+{c}" for c in _harness().GUEST_CONTROLLERS)

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


# --------------------------------------------------------------- runc bundles

BUSYBOX_APPLETS = ("sh", "cat", "ls", "echo", "sleep", "grep", "true")


@dataclasses.dataclass
class RuncResult:
    rc: int
    stdout: str
    stderr: str


@dataclasses.dataclass
class BusyboxBundle:
    """An OCI bundle whose rootfs is the static busybox; config.json is built per test."""

    dir: Path

    def config(self, args: list[str], resources: dict[str, Any],
               cgroups_path: str) -> dict[str, Any]:
        return {
            "ociVersion": "1.0.2",
            "process": {"user": {"uid": 0, "gid": 0}, "args": args, "cwd": "/",
                        "env": ["PATH=/bin"], "terminal": False},
            "root": {"path": "rootfs", "readonly": True},
            "hostname": "nri-sla-guest",
            "mounts": [
                {"destination": "/proc", "type": "proc", "source": "proc"},
                {"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
                 "options": ["nosuid", "mode=755"]},
                {"destination": "/sys", "type": "sysfs", "source": "sysfs",
                 "options": ["nosuid", "noexec", "nodev", "ro"]},
                # With a cgroup namespace this shows the container's own cgroup as root.
                {"destination": "/sys/fs/cgroup", "type": "cgroup", "source": "cgroup",
                 "options": ["nosuid", "noexec", "nodev", "ro"]},
            ],
            "linux": {
                "cgroupsPath": cgroups_path,
                "namespaces": [{"type": t} for t in ("pid", "mount", "ipc", "uts", "cgroup")],
                "resources": resources,
            },
        }

    def run(self, args: list[str], resources: dict[str, Any],
            timeout: float = 60) -> RuncResult:
        """`runc run` in the foreground; the container's stdout comes back."""
        cid = f"nri-sla-{uuid.uuid4().hex[:8]}"
        return self._runc_run(cid, self.config(args, resources, f"/{cid}"), timeout)

    def _runc_run(self, cid: str, config: dict[str, Any], timeout: float) -> RuncResult:
        (self.dir / "config.json").write_text(json.dumps(config, indent=1))
        try:
            proc = subprocess.run(["runc", "run", "--bundle", str(self.dir), cid],
                                  capture_output=True, text=True, timeout=timeout,
                                  stdin=subprocess.DEVNULL)
        finally:
            subprocess.run(["runc", "delete", "--force", cid], capture_output=True)
        return RuncResult(proc.returncode, proc.stdout, proc.stderr)

    @staticmethod
    def oci_resources(adjustment: Any) -> dict[str, Any]:
        """What containerd copies from an NRI adjustment into the spec's linux.resources."""
        res = adjustment.linux.resources
        cpu: dict[str, Any] = {}
        if res.cpu.HasField("quota"):
            cpu["quota"] = res.cpu.quota.value
        if res.cpu.HasField("period"):
            cpu["period"] = res.cpu.period.value
        if res.cpu.cpus:
            cpu["cpus"] = res.cpu.cpus
        if res.cpu.mems:
            cpu["mems"] = res.cpu.mems
        out: dict[str, Any] = {"cpu": cpu, "unified": dict(res.unified)}
        if res.memory.HasField("limit"):
            out["memory"] = {"limit": res.memory.limit.value, "swap": res.memory.limit.value}
        return out

    def run_with_hook(self, args: list[str], annotations: dict[str, str], work: Path,
                      timeout: float = 180, cache: str = "off",
                      cgroups_path: str | None = None,
                      node_config: str = "enforcement: hard\n",
                      runtime_keys: dict[str, str] | None = None) -> tuple[RuncResult, str]:
        """`runc run` of a spec without resources whose createRuntime hook is nri-sla's
        (`node_config` in `work`; `runtime_keys`: the runtime's own annotations, default
        containerd's container name); returns runc's result and the hook's log."""
        cid = f"nri-sla-hook-{uuid.uuid4().hex[:8]}"
        config = self.config(args, {}, cgroups_path or f"/{cid}")
        if runtime_keys is None:
            runtime_keys = {"io.kubernetes.cri.container-name": "app"}
        config["annotations"] = {**runtime_keys, **annotations}
        log = work / "hook.log"
        config["hooks"] = {"createRuntime": [{
            "path": sys.executable,
            # TCG is slow: a generous limit of the hook's own, below the runtime's.
            "args": [sys.executable, "-I", "-m", "nri_plugin.hook", "--stage",
                     "createRuntime", "--timeout", "100", "--config",
                     str(work / "config.yaml"), "--cache-dir", cache],
            "env": [f"NRI_SLA_HOOK_LOG={log}"], "timeout": 120}]}
        (work / "config.yaml").write_text(node_config)
        result = self._runc_run(cid, config, timeout)
        return result, (log.read_text() if log.exists() else "")


@pytest.fixture
def busybox_bundle(tmp_path: Path) -> BusyboxBundle:
    runc = shutil.which("runc")
    busybox = Path("/bin/busybox")
    if runc is None or not busybox.exists():
        pytest.skip("needs runc and /bin/busybox (apt-get install runc busybox-static)")
    rootfs = tmp_path / "rootfs"
    for d in ("bin", "proc", "sys", "dev", "tmp"):
        (rootfs / d).mkdir(parents=True)
    shutil.copy2(busybox, rootfs / "bin" / "busybox")
    for applet in BUSYBOX_APPLETS:
        (rootfs / "bin" / applet).symlink_to("busybox")
    return BusyboxBundle(tmp_path)


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
