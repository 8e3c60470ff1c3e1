"""A private, throwaway containerd (+ runc, crictl) for the e2e suite.

Everything lives under one base directory: config, root/state dirs, the containerd GRPC
socket, the NRI socket and runc's state root, so several instances (and the host's own
containerd, if any) never meet. Pods run in the host network namespace (no CNI) under a
private cgroup parent. `cleanup()` undoes it all even after a failed test: pods, the
daemon, stray shims and container processes, mounts under the base dir, cgroups, files.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from e2e_image import GOARCH

CGROUP_ROOT = Path("/sys/fs/cgroup")
NAMESPACE = "nri-e2e"  # the Kubernetes namespace of every e2e pod
MNT_DETACH = 2


class ClusterError(RuntimeError):
    """containerd did not come up, or a crictl/ctr command failed."""


@dataclass(frozen=True)
class Binaries:
    containerd: Path
    shim: Path
    ctr: Path
    crictl: Path
    runc: Path

    def missing(self) -> list[str]:
        return [f"{k}={v}" for k, v in vars(self).items()
                if not (Path(v).is_file() and os.access(v, os.X_OK))]


def containerd_version(binary: Path) -> tuple[int, int, int]:
    """(major, minor, patch) from `containerd --version`, e.g. '... v2.3.4 <rev>'."""
    out = subprocess.run([str(binary), "--version"], capture_output=True, text=True,
                         timeout=30, check=True).stdout
    m = re.search(r"\sv?(\d+)\.(\d+)\.(\d+)", out)
    if not m:
        raise ClusterError(f"cannot read a version from {binary} --version: {out!r}")
    return int(m[1]), int(m[2]), int(m[3])


def goarch() -> str:
    return GOARCH.get(platform.machine(), platform.machine())


def cgroup_v2_only() -> bool:
    return (CGROUP_ROOT / "cgroup.controllers").exists()


def _runc_options(runc: Path, runc_root: Path) -> str:
    return (f'BinaryName = "{runc}"\n'
            f'Root = "{runc_root}"\n'
            "SystemdCgroup = false\n")


def render_config(major: int, base: Path, runc: Path, image: str, arch: str) -> str:
    """containerd config: NRI on a private socket, CRI with cgroupfs, native snapshots."""
    common = (f'root = "{base}/root"\nstate = "{base}/state"\n'
              "disabled_plugins = [\"io.containerd.snapshotter.v1.aufs\", "
              "\"io.containerd.snapshotter.v1.btrfs\", \"io.containerd.snapshotter.v1.zfs\", "
              "\"io.containerd.snapshotter.v1.devmapper\", \"io.containerd.internal.v1.opt\", "
              "\"io.containerd.tracing.processor.v1.otlp\"]\n"
              f'[grpc]\n  address = "{base}/containerd.sock"\n'
              f'[ttrpc]\n  address = "{base}/containerd.sock.ttrpc"\n'
              '[debug]\n  level = "debug"\n'
              '[metrics]\n  address = ""\n')
    nri = (f'socket_path = "{base}/nri.sock"\n'
           f'plugin_path = "{base}/nri/plugins"\n'
           f'plugin_config_path = "{base}/nri/conf.d"\n'
           'plugin_registration_timeout = "5s"\n'
           'plugin_request_timeout = "2s"\n'
           "disable = false\ndisable_connections = false\n")
    # No CAP_SYS_RESOURCE in CI sandboxes: CRI must not raise oom_score_adj.
    cri_common = ("restrict_oom_score_adj = true\n"
                  "disable_apparmor = true\nenable_selinux = false\n"
                  "enable_unprivileged_ports = false\nenable_unprivileged_icmp = false\n")
    opts = _runc_options(runc, base / "runc")
    if major < 2:
        return ("version = 2\n" + common
                + '[plugins."io.containerd.nri.v1.nri"]\n' + nri
                + '[plugins."io.containerd.grpc.v1.cri"]\n' + cri_common
                + f'sandbox_image = "{image}"\n'
                + 'stream_server_address = "127.0.0.1"\nstream_server_port = "0"\n'
                + '[plugins."io.containerd.grpc.v1.cri".containerd]\n'
                + 'snapshotter = "native"\ndefault_runtime_name = "runc"\n'
                + '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]\n'
                + 'runtime_type = "io.containerd.runc.v2"\n'
                + '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]\n'
                + opts
                + '[plugins."io.containerd.grpc.v1.cri".cni]\n'
                + f'bin_dir = "{base}/cni/bin"\nconf_dir = "{base}/cni/net.d"\n')
    rt = "plugins.'io.containerd.cri.v1.runtime'"
    return ("version = 3\n" + common
            + "[plugins.'io.containerd.nri.v1.nri']\n" + nri
            + "[plugins.'io.containerd.cri.v1.images']\n" + 'snapshotter = "native"\n'
            + "[plugins.'io.containerd.cri.v1.images'.pinned_images]\n"
            + f'sandbox = "{image}"\n'
            + f"[{rt}]\n" + cri_common
            + f"[{rt}.containerd]\n" + 'default_runtime_name = "runc"\n'
            + f"[{rt}.containerd.runtimes.runc]\n" + 'runtime_type = "io.containerd.runc.v2"\n'
            + f"[{rt}.containerd.runtimes.runc.options]\n" + opts
            + f"[{rt}.cni]\n" + f'bin_dirs = ["{base}/cni/bin"]\nconf_dir = "{base}/cni/net.d"\n'
            # The transfer service (ctr import, CRI pulls) unpacks only for listed platforms.
            + "[[plugins.'io.containerd.transfer.v1.local'.unpack_config]]\n"
            + f'platform = "linux/{arch}"\nsnapshotter = "native"\n'
            + "[plugins.'io.containerd.grpc.v1.cri']\n"
            + 'stream_server_address = "127.0.0.1"\nstream_server_port = "0"\n')


@dataclass(frozen=True)
class CgroupValues:
    """What the kernel holds for a container (None: no such file on this hierarchy)."""

    cpu_quota: int | None
    cpu_period: int | None
    memory_limit: int | None


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def read_cgroup(cgroups_path: str) -> CgroupValues:
    rel = cgroups_path.lstrip("/")
    if cgroup_v2_only():
        d = CGROUP_ROOT / rel
        cpu_max, mem = _read(d / "cpu.max"), _read(d / "memory.max")
        quota = period = None
        if cpu_max:
            q, p = cpu_max.split()
            quota, period = (-1 if q == "max" else int(q)), int(p)
        limit = None if mem is None else (-1 if mem == "max" else int(mem))
        return CgroupValues(quota, period, limit)
    q = _read(CGROUP_ROOT / "cpu" / rel / "cpu.cfs_quota_us")
    p = _read(CGROUP_ROOT / "cpu" / rel / "cpu.cfs_period_us")
    m = _read(CGROUP_ROOT / "memory" / rel / "memory.limit_in_bytes")
    return CgroupValues(*(None if v is None else int(v) for v in (q, p, m)))


@dataclass(frozen=True)
class PodContainer:
    pod_id: str
    container_id: str
    cgroups_path: str
    inspect: dict


@dataclass
class Cluster:
    """One private containerd. Use start(), run_pod(), restart(), cleanup()."""

    Error: ClassVar[type[ClusterError]] = ClusterError  # for tests, which can't import this
    bins: Binaries
    base: Path
    image_tar: Path
    image: str
    major: int = 0
    cgroup_parent: str = field(default_factory=lambda: f"/nri-e2e-{uuid.uuid4().hex[:10]}")
    proc: subprocess.Popen | None = None
    starts: int = 0

    @property
    def sock(self) -> Path:
        return self.base / "containerd.sock"

    @property
    def nri_sock(self) -> Path:
        return self.base / "nri.sock"

    @property
    def log_path(self) -> Path:
        return self.base / "containerd.log"

    # -- daemon ------------------------------------------------------------------
    def prepare(self) -> None:
        self.major = containerd_version(self.bins.containerd)[0]
        for d in ("root", "state", "runc", "nri/plugins", "nri/conf.d", "cni/bin",
                  "cni/net.d", "pods"):
            (self.base / d).mkdir(parents=True, exist_ok=True)
        (self.base / "config.toml").write_text(
            render_config(self.major, self.base, self.bins.runc, self.image, goarch()))
        (self.base / "crictl.yaml").write_text(
            f"runtime-endpoint: unix://{self.sock}\nimage-endpoint: unix://{self.sock}\n"
            "timeout: 30\ndebug: false\npull-image-on-create: false\n")

    def start(self, timeout: float = 60.0) -> None:
        env = {"PATH": f"{self.bins.shim.parent}:{self.bins.runc.parent}:"
                       "/usr/sbin:/usr/bin:/sbin:/bin",
               "HOME": str(self.base)}
        self.starts += 1
        with self.log_path.open("a") as log:
            log.write(f"---- nri-e2e: start #{self.starts} ----\n")
            log.flush()
            self.proc = subprocess.Popen(
                [str(self.bins.containerd), "--config", str(self.base / "config.toml")],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                start_new_session=True)
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise ClusterError(f"containerd exited with {self.proc.returncode}:\n"
                                   + self.log_tail())
            if self.sock.exists() and subprocess.run(
                    self._crictl_argv("info"), capture_output=True, timeout=30).returncode == 0:
                return
            if time.monotonic() > deadline:
                raise ClusterError(f"containerd not ready after {timeout}s:\n"
                                   + self.log_tail())
            time.sleep(0.2)

    def kill(self, sig: int = signal.SIGKILL, timeout: float = 20.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)

    def restart(self) -> None:
        """Crash-style restart: SIGKILL (shims survive), then start on the same state."""
        self.kill(signal.SIGKILL)
        self.start()

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def log_tail(self, n: int = 40) -> str:
        return "\n".join(self.log_text().splitlines()[-n:])

    def wait_log(self, pattern: str, count: int = 1, timeout: float = 30.0) -> list[str]:
        """Wait until `pattern` (regex) matched `count` log lines; return those lines."""
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while True:
            hits = [ln for ln in self.log_text().splitlines() if rx.search(ln)]
            if len(hits) >= count:
                return hits
            if time.monotonic() > deadline:
                raise ClusterError(f"containerd log: {pattern!r} seen {len(hits)}/{count} "
                                   f"times in {timeout}s; tail:\n{self.log_tail()}")
            time.sleep(0.1)

    def wait_plugin_synchronized(self, name: str, count: int = 1,
                                 timeout: float = 30.0) -> list[str]:
        """containerd's own record that plugin `name` (e.g. "10-e2e-probe", or a regex)
        registered and got its Synchronize answered, `count` times so far."""
        # logrus quotes msg="..." and escapes the inner quotes.
        return self.wait_log(rf'plugin \\?"{name}\\?" connected and synchronized', count,
                             timeout)

    # -- clients -----------------------------------------------------------------
    def _crictl_argv(self, *args: str) -> list[str]:
        return [str(self.bins.crictl), "--config", str(self.base / "crictl.yaml"), *args]

    def crictl(self, *args: str, timeout: float = 90.0) -> str:
        r = subprocess.run(self._crictl_argv(*args), capture_output=True, text=True,
                           timeout=timeout)
        if r.returncode:
            raise ClusterError(f"crictl {' '.join(args)} failed ({r.returncode}): "
                               f"{r.stderr.strip() or r.stdout.strip()}")
        return r.stdout

    def ctr(self, *args: str, timeout: float = 120.0) -> str:
        argv = [str(self.bins.ctr), "--address", str(self.sock), "-n", "k8s.io", *args]
        r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        if r.returncode:
            raise ClusterError(f"ctr {' '.join(args)} failed ({r.returncode}): "
                               f"{r.stderr.strip()}")
        return r.stdout

    def import_image(self) -> None:
        self.ctr("images", "import", "--snapshotter", "native", str(self.image_tar))
        if self.image not in self.ctr("images", "ls", "-q").split():
            raise ClusterError(f"{self.image} not listed after importing {self.image_tar}")

    # -- pods --------------------------------------------------------------------
    def run_pod(self, name: str, annotations: dict[str, str],
                container: str = "work") -> PodContainer:
        """Host-network pod + one started container; raises ClusterError on refusal."""
        d = self.base / "pods" / name
        d.mkdir(parents=True, exist_ok=True)
        uid = uuid.uuid4().hex
        pod = {
            "metadata": {"name": name, "namespace": NAMESPACE, "uid": uid, "attempt": 0},
            "annotations": annotations,
            "log_directory": str(d),
            # One cgroup per pod under the private parent, as kubelet lays them out.
            "linux": {"cgroup_parent": f"{self.cgroup_parent}/pod{uid}",
                      "security_context": {"namespace_options": {"network": 2}}},
        }
        ctr = {"metadata": {"name": container}, "image": {"image": self.image},
               "command": ["/bin/sleep", "infinity"], "log_path": f"{container}.log",
               "linux": {}}
        (d / "pod.json").write_text(json.dumps(pod))
        (d / "ctr.json").write_text(json.dumps(ctr))
        pod_id = self.crictl("runp", str(d / "pod.json")).strip()
        cid = self.crictl("create", "--no-pull", pod_id, str(d / "ctr.json"),
                          str(d / "pod.json")).strip()
        self.crictl("start", cid)
        info = json.loads(self.crictl("inspect", "-o", "json", cid))
        path = info["info"]["runtimeSpec"]["linux"]["cgroupsPath"]
        return PodContainer(pod_id, cid, path, info)

    @staticmethod
    def cgroup(pc: PodContainer) -> CgroupValues:
        return read_cgroup(pc.cgroups_path)

    @staticmethod
    def cgroup_file(pc: PodContainer, controller: str, name: str) -> str | None:
        """One file of the container's cgroup (controller is ignored on cgroup v2)."""
        rel = pc.cgroups_path.lstrip("/")
        d = CGROUP_ROOT / rel if cgroup_v2_only() else CGROUP_ROOT / controller / rel
        return _read(d / name)

    @staticmethod
    def pid(pc: PodContainer) -> int:
        return int(pc.inspect["info"]["pid"])

    @staticmethod
    def spec_annotations(pc: PodContainer) -> dict[str, str]:
        """The annotations in the OCI spec runc got (adjustments included)."""
        return pc.inspect["info"]["runtimeSpec"].get("annotations", {})

    # -- teardown ----------------------------------------------------------------
    def cleanup(self) -> list[str]:
        """Best effort, in dependency order; returns what could not be undone."""
        problems: list[str] = []
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.crictl("rmp", "--all", "--force", timeout=120)
            except (ClusterError, subprocess.TimeoutExpired) as exc:
                problems.append(f"removing pods: {exc}")
            self.kill(signal.SIGTERM)
        for pid in self._stray_pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.2)
        problems += self._unmount_all()
        problems += self._remove_cgroups()
        shutil.rmtree(self.base, onerror=lambda _f, p, e: problems.append(f"rm {p}: {e[1]}"))
        return problems

    def _stray_pids(self) -> set[int]:
        """Shims started by this containerd, and processes left in this cgroup parent."""
        pids: set[int] = set()
        addr = str(self.sock)
        for p in Path("/proc").iterdir():
            if not p.name.isdigit():
                continue
            try:
                argv = (p / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if argv and b"containerd-shim" in argv[0] and addr.encode() in argv:
                pids.add(int(p.name))
        for procs in self._cgroup_dirs():
            for f in procs.rglob("cgroup.procs"):
                with contextlib.suppress(OSError, ValueError):
                    pids.update(int(x) for x in f.read_text().split())
        pids.discard(os.getpid())
        return pids

    def _cgroup_dirs(self) -> list[Path]:
        rel = self.cgroup_parent.lstrip("/")
        if cgroup_v2_only():
            return [CGROUP_ROOT / rel] if (CGROUP_ROOT / rel).is_dir() else []
        return [c / rel for c in CGROUP_ROOT.iterdir() if (c / rel).is_dir()]

    def _remove_cgroups(self) -> list[str]:
        problems = []
        for top in self._cgroup_dirs():
            below = sorted((p for p in top.rglob("*") if p.is_dir()),
                           key=lambda p: len(p.parts), reverse=True)
            dirs = [*below, top]
            for d in dirs:
                for _ in range(50):  # the kernel frees a cgroup a moment after its last task
                    try:
                        d.rmdir()
                        break
                    except FileNotFoundError:
                        break
                    except OSError:
                        time.sleep(0.1)
                else:
                    problems.append(f"cgroup {d} still busy")
        return problems

    def _unmount_all(self) -> list[str]:
        libc = ctypes.CDLL(None, use_errno=True)
        base = str(self.base.resolve())
        problems = []
        for _ in range(5):  # mounts can stack; repeat until none is left
            points = [ln.split()[4] for ln in Path("/proc/self/mountinfo").read_text()
                      .splitlines() if ln.split()[4] == base or ln.split()[4]
                      .startswith(base + "/")]
            if not points:
                return problems
            for mp in sorted(points, key=len, reverse=True):
                if libc.umount2(mp.encode(), MNT_DETACH) != 0:
                    problems.append(f"umount {mp}: errno {ctypes.get_errno()}")
        return problems
