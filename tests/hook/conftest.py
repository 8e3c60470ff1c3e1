"""Fixtures for the OCI hook tests: real runc with busybox bundles, fake cgroup v2 trees.

Everything runc-related is skipped (with what to supply) when runc, a static busybox,
root or a cgroup v1 `cpu` hierarchy is missing.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import struct
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.cgroups import V2_CONTROLLERS, make_v2_tree

CGROUP_ROOT = Path("/sys/fs/cgroup")
V1_CONTROLLERS = (
    "cpu",
    "cpuacct",
    "cpuset",
    "memory",
    "blkio",
    "pids",
    "devices",
    "freezer",
    "hugetlb",
    "net_cls",
    "net_prio",
    "perf_event",
    "rdma",
    "misc",
    "systemd",
    "unified",
)  # runc on a hybrid host also makes a dir in the v2 mount
BUSYBOX = Path("/bin/busybox")


def runc_skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "needs root (runc creates cgroups)"
    if shutil.which("runc") is None:
        return "needs runc: apt-get install runc"
    if not _is_static_elf(BUSYBOX):
        return "needs a static busybox at /bin/busybox: apt-get install busybox-static"
    if not (CGROUP_ROOT / "cpu" / "cpu.cfs_quota_us").exists():
        return "needs a cgroup v1 host (cpu controller at /sys/fs/cgroup/cpu); v2 runs in tests/vm"
    return None


def _is_static_elf(path: Path) -> bool:
    """An ELF64 file without a PT_INTERP program header (it runs inside any rootfs)."""
    try:
        data = path.read_bytes()
    except OSError:
        return False
    if data[:5] != b"\x7fELF\x02":
        return False
    (phoff,) = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    types = (struct.unpack_from("<I", data, phoff + i * phentsize)[0] for i in range(phnum))
    return 3 not in types  # PT_INTERP


def first_disk() -> tuple[str, str]:
    """(/dev/NAME, MAJ:MIN) of a real whole disk (not loop/zram/ram)."""
    for entry in sorted(Path("/sys/block").iterdir()):
        if entry.name.startswith(("loop", "ram", "zram", "dm-", "md")):
            continue
        dev = Path("/dev") / entry.name
        if dev.exists():
            return str(dev), (entry / "dev").read_text().strip()
    pytest.skip("needs a real block device in /sys/block (not loop/zram) for io.max")


@pytest.fixture(scope="session")
def rootfs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    reason = runc_skip_reason()
    if reason:
        pytest.skip(reason)
    root = tmp_path_factory.mktemp("rootfs")
    (root / "bin").mkdir()
    shutil.copy2(BUSYBOX, root / "bin" / "busybox")
    for tool in ("sh", "sleep", "cat", "true"):
        (root / "bin" / tool).symlink_to("busybox")
    for d in ("proc", "sys", "dev", "tmp", "etc"):
        (root / d).mkdir()
    return root


@pytest.fixture(scope="session")
def base_spec(tmp_path_factory: pytest.TempPathFactory, rootfs: Path) -> dict:
    work = tmp_path_factory.mktemp("spec")
    subprocess.run(["runc", "spec"], cwd=work, check=True)
    spec = json.loads((work / "config.json").read_text())
    spec["process"]["terminal"] = False
    spec["process"]["args"] = ["sleep", "300"]
    spec["root"] = {"path": str(rootfs), "readonly": True}
    return spec


def hook_command(stage: str, *extra: str, entry: str = "module") -> dict:
    """The hook as config.json runs it: the venv's python -I -m nri_plugin.hook (or nri-sla)."""
    if entry == "console":
        script = str(Path(sys.executable).parent / "nri-sla")
        args = [script, "hook", "--stage", stage, *extra]
        return {"path": script, "args": args, "timeout": 30}
    if entry == "fast":
        from nri_plugin.hookspec import fast_hook_entry

        hook = fast_hook_entry(stage, python=sys.executable, timeout=30)
        hook["args"] += list(extra)
        return hook
    args = [sys.executable, "-I", "-m", "nri_plugin.hook", "--stage", stage, *extra]
    return {"path": sys.executable, "args": args, "timeout": 30}


@dataclass
class Created:
    name: str
    returncode: int
    stderr: str
    log: str  # the hook's own log file (NRI_SLA_HOOK_LOG)


def own_cgroup(controller: str) -> str:
    """This process's cgroup in a v1 controller's hierarchy (runc, our child, starts in it
    and takes a relative cgroupsPath from it)."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _id, controllers, path = line.split(":", 2)
        if controller in controllers.split(","):
            return path
    raise LookupError(f"no {controller} line in /proc/self/cgroup")


class Runc:
    """Busybox containers under the real runc, in a scratch cgroup parent; cleans up."""

    def __init__(self, base: Path, spec: dict) -> None:
        self.base = base
        self.spec = spec
        self.state_root = base / "runc-state"
        self.parent = f"nri-sla-test-{uuid.uuid4().hex[:12]}"
        self.names: list[str] = []

    def cgroups_path(self, name: str) -> str:
        return f"/{self.parent}/{name}"

    def cgroup_dir(self, controller: str, name: str | None = None) -> Path:
        rel = self.parent if name is None else f"{self.parent}/{name}"
        return CGROUP_ROOT / controller / rel

    def read(self, controller: str, name: str, file: str) -> str:
        return (self.cgroup_dir(controller, name) / file).read_text().strip()

    def bundle(
        self,
        name: str,
        annotations: dict[str, str],
        stage: str = "createRuntime",
        hook_args: tuple[str, ...] = (),
        env: tuple[str, ...] = (),
        entry: str = "module",
        cgroups_path: str | None = None,
        run_at: str | None = None,
        capture: bool = False,
    ) -> Path:
        """`run_at`: the stage the runtime runs the hook at, when it is not the one the
        hook was installed for (CRI-O runs hooks.d `prestart` hooks at createRuntime).
        `capture`: a shell hook before ours saves the OCI state it got and whether the
        container's cpu cgroup existed then (bundle/state.json, bundle/cgroup)."""
        bundle = self.base / name
        bundle.mkdir()
        spec = json.loads(json.dumps(self.spec))
        spec["annotations"] = annotations
        spec["process"]["env"] = [*spec["process"]["env"], *env]
        spec["linux"]["cgroupsPath"] = cgroups_path or self.cgroups_path(name)
        hook = hook_command(stage, *hook_args, entry=entry)
        # The test's own decision cache, not the host's /run/nri-sla/hook-cache.
        hook["env"] = [
            f"NRI_SLA_HOOK_LOG={bundle / 'hook.log'}",
            "PATH=/usr/bin:/bin",
            f"NRI_SLA_HOOK_CACHE={self.base / 'hook-cache'}",
        ]
        hooks = [hook]
        if capture:
            cpu_dir = self.cgroup_dir("cpu", name)
            script = (
                f"cat > {bundle}/state.json; "
                f"if test -d {cpu_dir}; then echo exists; else echo absent; fi "
                f"> {bundle}/cgroup"
            )
            hooks.insert(0, {"path": "/bin/sh", "args": ["sh", "-c", script], "timeout": 10})
        spec["hooks"] = {run_at or stage: hooks}
        (bundle / "config.json").write_text(json.dumps(spec))
        return bundle

    def runc(
        self, *args: str, stderr_file: Path | None = None, timeout: float = 60
    ) -> subprocess.CompletedProcess:
        # The container inherits runc's stdio: never give it a pipe we wait on.
        if stderr_file is None:
            return subprocess.run(
                ["runc", "--root", str(self.state_root), *args],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=timeout,
            )
        with open(stderr_file, "w") as err:
            return subprocess.run(
                ["runc", "--root", str(self.state_root), *args],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
                text=True,
                timeout=timeout,
            )

    def create(self, name: str, annotations: dict[str, str], **kw) -> Created:
        bundle = self.bundle(name, annotations, **kw)
        self.names.append(name)
        err = bundle / "runc.stderr"
        proc = self.runc("create", "--bundle", str(bundle), name, stderr_file=err)
        log = bundle / "hook.log"
        return Created(
            name, proc.returncode, err.read_text(), log.read_text() if log.exists() else ""
        )

    def start(self, name: str) -> subprocess.CompletedProcess:
        return self.runc("start", name)

    def status(self, name: str) -> str:
        proc = self.runc("state", name)
        return json.loads(proc.stdout)["status"] if proc.returncode == 0 else "absent"

    def cleanup(self) -> None:
        for name in self.names:
            self.runc("delete", "--force", name)
        # runc removes the container's cgroups; the scratch parent is ours to remove (also
        # below our own cgroup, where runc puts a relative cgroupsPath).
        for controller in V1_CONTROLLERS:
            try:
                own = own_cgroup(controller).strip("/")
            except LookupError:
                own = ""
            for top in {
                CGROUP_ROOT / controller / self.parent,
                CGROUP_ROOT / controller / own / self.parent,
            }:
                if not top.is_dir():
                    continue
                for sub in sorted(top.glob("**/"), key=lambda p: len(p.parts), reverse=True):
                    with contextlib.suppress(OSError):
                        sub.rmdir()


@pytest.fixture
def runc_env(tmp_path: Path, base_spec: dict) -> Iterator[Runc]:
    env = Runc(tmp_path, base_spec)
    try:
        yield env
    finally:
        env.cleanup()


# ------------------------------------------------------------------ in-process helpers


def state_json(bundle: Path | str, cid: str = "ctr-1", pid: int | None = None, **extra) -> bytes:
    """The OCI state. No pid by default (a "creating" state may lack one): the hook then
    takes linux.cgroupsPath inside the fake tree. With a pid it reads <proc>/<pid>/cgroup:
    give such runs a fake /proc (fake_proc) or a real process."""
    doc = {"ociVersion": "1.0.2", "id": cid, "status": "creating", "bundle": str(bundle), **extra}
    if pid is not None:
        doc["pid"] = pid
    return json.dumps(doc).encode()


def write_bundle(
    path: Path,
    annotations: dict[str, str],
    cgroups_path: str | None,
    env: list[str] | None = None,
    resources: dict | None = None,
    devices: list[dict] | None = None,
    mounts: list[dict] | None = None,
) -> Path:
    """config.json; `resources`: linux.resources as the runtime writes it (kubelet limits);
    `devices` (linux.devices) and `mounts`: where a device plugin's GPU grant shows."""
    path.mkdir(parents=True, exist_ok=True)
    spec = {
        "ociVersion": "1.0.2",
        "process": {"env": env or ["PATH=/bin"]},
        "annotations": annotations,
        "linux": {},
    }
    if devices is not None:
        spec["linux"]["devices"] = devices
    if mounts is not None:
        spec["mounts"] = mounts
    if cgroups_path is not None:
        spec["linux"]["cgroupsPath"] = cgroups_path
    if resources is not None:
        spec["linux"]["resources"] = resources
    (path / "config.json").write_text(json.dumps(spec))
    return path


def run_hook_inproc(state: bytes, **opts):
    """Run the hook flow in this process; returns the Outcome."""
    from nri_plugin.hook.options import HookOptions
    from nri_plugin.hook.run import run

    return run(HookOptions(**opts), io.BytesIO(state))


def run_hook_subprocess(
    state: bytes, *args: str, timeout: float = 30, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-I", "-m", "nri_plugin.hook", *args],
        input=state,
        capture_output=True,
        timeout=timeout,
        env=env,
    )


def fake_v2_tree(root: Path, container_rel: str, controllers: str = V2_CONTROLLERS) -> Path:
    """A cgroup2 mount at `root` with the container's cgroup in it; its dir."""
    return make_v2_tree(root, controllers).add_cgroup(container_rel)["unified"]


def fake_proc(proc: Path, pid: int, cgroup: str) -> str:
    """A /proc with <pid>/cgroup holding `cgroup` (e.g. "0::/kubepods/pod/ctr\n"), for the
    hook's proc_root option; returns the root."""
    (proc / str(pid)).mkdir(parents=True, exist_ok=True)
    (proc / str(pid) / "cgroup").write_text(cgroup)
    return str(proc)


class Helpers:
    """The helpers above as one fixture (test modules cannot import conftest)."""

    state_json = staticmethod(state_json)
    write_bundle = staticmethod(write_bundle)
    run_inproc = staticmethod(run_hook_inproc)
    run_subprocess = staticmethod(run_hook_subprocess)
    fake_v2_tree = staticmethod(fake_v2_tree)
    fake_proc = staticmethod(fake_proc)
    first_disk = staticmethod(first_disk)
    hook_command = staticmethod(hook_command)
    own_cgroup = staticmethod(own_cgroup)


@pytest.fixture
def h() -> type[Helpers]:
    return Helpers


@pytest.fixture(autouse=True)
def hook_cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each test gets its own decision cache (in-process runs and subprocesses that inherit
    the environment; Runc.bundle gives runc's hooks the same directory)."""
    where = tmp_path / "hook-cache"
    monkeypatch.setenv("NRI_SLA_HOOK_CACHE", str(where))
    return where
