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
import hashlib
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from tests.e2e.e2e_cgroup import CGROUP_ROOT, CgroupValues, cgroup_v2_only, read_cgroup, read_file
from tests.e2e.e2e_config import goarch, render_config, runc_options

SHIM_SOCKET_DIR = Path("/run/containerd/s")  # fixed by containerd, whatever its state dir
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
        return [
            f"{k}={v}"
            for k, v in vars(self).items()
            if not (Path(v).is_file() and os.access(v, os.X_OK))
        ]


def containerd_version(binary: Path) -> tuple[int, int, int]:
    """(major, minor, patch) from `containerd --version`, e.g. '... v2.3.4 <rev>'."""
    out = subprocess.run(
        [str(binary), "--version"], capture_output=True, text=True, timeout=30, check=True
    ).stdout
    m = re.search(r"\sv?(\d+)\.(\d+)\.(\d+)", out)
    if not m:
        raise ClusterError(f"cannot read a version from {binary} --version: {out!r}")
    return int(m[1]), int(m[2]), int(m[3])


@dataclass(frozen=True)
class PodFiles:
    """crictl's input files for one pod: the sandbox config and the container config."""

    pod: Path
    container: Path


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
    minor: int = 0
    cgroup_parent: str = field(default_factory=lambda: f"/nri-e2e-{uuid.uuid4().hex[:10]}")
    proc: subprocess.Popen | None = None
    starts: int = 0
    _shim_sockets: set[Path] = field(default_factory=set)

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
        self.major, self.minor, _ = containerd_version(self.bins.containerd)
        for d in (
            "root",
            "state",
            "runc",
            "nri/plugins",
            "nri/conf.d",
            "cni/bin",
            "cni/net.d",
            "pods",
            "cdi",
        ):
            (self.base / d).mkdir(parents=True, exist_ok=True)
        # containerd finds the shim by its fixed name on PATH: link whatever was supplied.
        (self.base / "bin").mkdir(exist_ok=True)
        link = self.base / "bin" / "containerd-shim-runc-v2"
        link.unlink(missing_ok=True)
        link.symlink_to(self.bins.shim.resolve())
        (self.base / "config.toml").write_text(
            render_config(self.major, self.base, self.bins.runc, self.image, goarch())
        )
        (self.base / "crictl.yaml").write_text(
            f"runtime-endpoint: unix://{self.sock}\nimage-endpoint: unix://{self.sock}\n"
            "timeout: 30\ndebug: false\npull-image-on-create: false\n"
        )

    def start(self, timeout: float = 60.0) -> None:
        env = {"PATH": f"{self.base / 'bin'}:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": str(self.base)}
        self.starts += 1
        with self.log_path.open("a") as log:
            log.write(f"---- nri-e2e: start #{self.starts} ----\n")
            log.flush()
            self.proc = subprocess.Popen(
                [str(self.bins.containerd), "--config", str(self.base / "config.toml")],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise ClusterError(
                    f"containerd exited with {self.proc.returncode}:\n" + self.log_tail()
                )
            if (
                self.sock.exists()
                and subprocess.run(
                    self._crictl_argv("info"), capture_output=True, timeout=30
                ).returncode
                == 0
            ):
                return
            if time.monotonic() > deadline:
                raise ClusterError(f"containerd not ready after {timeout}s:\n" + self.log_tail())
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

    def reconfigure(self, extra_toml: str) -> None:
        """Stop cleanly, append TOML tables to the config, start again (state kept)."""
        self.kill(signal.SIGTERM)
        with (self.base / "config.toml").open("a") as f:
            f.write(extra_toml)
        self.start()

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
                raise ClusterError(
                    f"containerd log: {pattern!r} seen {len(hits)}/{count} "
                    f"times in {timeout}s; tail:\n{self.log_tail()}"
                )
            time.sleep(0.1)

    def wait_plugin_synchronized(
        self, name: str, count: int = 1, timeout: float = 30.0
    ) -> list[str]:
        """containerd's own record that plugin `name` (e.g. "10-e2e-probe", or a regex)
        registered and got its Synchronize answered, `count` times so far."""
        # logrus quotes msg="..." and escapes the inner quotes.
        lines = self.wait_log(rf'plugin \\?"{name}\\?" connected and synchronized', count, timeout)
        print("evidence: containerd log:", *lines, sep="\n  ")
        return lines

    # -- clients -----------------------------------------------------------------
    def _crictl_argv(self, *args: str) -> list[str]:
        return [str(self.bins.crictl), "--config", str(self.base / "crictl.yaml"), *args]

    def crictl(self, *args: str, timeout: float = 90.0) -> str:
        r = subprocess.run(
            self._crictl_argv(*args), capture_output=True, text=True, timeout=timeout
        )
        if r.returncode:
            raise ClusterError(
                f"crictl {' '.join(args)} failed ({r.returncode}): "
                f"{r.stderr.strip() or r.stdout.strip()}"
            )
        return r.stdout

    def ctr(self, *args: str, timeout: float = 120.0) -> str:
        argv = [str(self.bins.ctr), "--address", str(self.sock), "-n", "k8s.io", *args]
        r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        if r.returncode:
            raise ClusterError(f"ctr {' '.join(args)} failed ({r.returncode}): {r.stderr.strip()}")
        return r.stdout

    def import_image(self) -> None:
        self.ctr("images", "import", "--snapshotter", "native", str(self.image_tar))
        if self.image not in self.ctr("images", "ls", "-q").split():
            raise ClusterError(f"{self.image} not listed after importing {self.image_tar}")

    # -- pods --------------------------------------------------------------------
    def runtime_table(self, handler: str) -> str:
        """TOML table name of a CRI runtime handler, for reconfigure()."""
        if self.major < 2:
            return f'plugins."io.containerd.grpc.v1.cri".containerd.runtimes.{handler}'
        return f"plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.{handler}"

    def add_runtime_handler(self, handler: str, settings: str) -> None:
        """A second runc handler (same runc, same options) with extra settings (TOML)."""
        table = self.runtime_table(handler)
        self.reconfigure(
            f'\n[{table}]\nruntime_type = "io.containerd.runc.v2"\n{settings}'
            f"[{table}.options]\n{runc_options(self.bins.runc, self.base / 'runc')}"
        )

    def pod_files(
        self,
        name: str,
        annotations: dict[str, str],
        container: str = "work",
        resources: dict[str, int] | None = None,
        namespace: str = NAMESPACE,
        command: tuple[str, ...] = ("/bin/sleep", "infinity"),
        grant: dict | None = None,
    ) -> PodFiles:
        """The CRI pod sandbox and container configs of a host-network pod, as files.
        `resources`: the container's CRI linux.resources as the kubelet sends them
        (cpu_period, cpu_quota, cpu_shares, memory_limit_in_bytes); `command`: what the
        container runs (busybox applets); `grant`: more CRI ContainerConfig fields, as the
        kubelet fills them from a device plugin's Allocate answer (`CDI_devices`,
        `devices`, `envs`, `mounts`)."""
        d = self.base / "pods" / name
        d.mkdir(parents=True, exist_ok=True)
        uid = uuid.uuid4().hex
        pod = {
            "metadata": {"name": name, "namespace": namespace, "uid": uid, "attempt": 0},
            "annotations": annotations,
            "log_directory": str(d),
            # One cgroup per pod under the private parent, as kubelet lays them out.
            "linux": {
                "cgroup_parent": f"{self.cgroup_parent}/pod{uid}",
                "security_context": {"namespace_options": {"network": 2}},
            },
        }
        ctr = {
            "metadata": {"name": container},
            "image": {"image": self.image},
            "command": list(command),
            "log_path": f"{container}.log",
            "linux": {"resources": resources} if resources else {},
        } | (grant or {})
        files = PodFiles(d / "pod.json", d / "ctr.json")
        files.pod.write_text(json.dumps(pod))
        files.container.write_text(json.dumps(ctr))
        return files

    def run_sandbox(self, files: PodFiles, runtime: str = "") -> str:
        """CRI RunPodSandbox; returns the pod id."""
        handler = ("--runtime", runtime) if runtime else ()
        return self.crictl("runp", *handler, str(files.pod)).strip()

    def create_container(self, pod_id: str, files: PodFiles) -> str:
        """CRI CreateContainer (where NRI's CreateContainer runs); returns its id."""
        return self.crictl(
            "create", "--no-pull", pod_id, str(files.container), str(files.pod)
        ).strip()

    def inspect(self, pod_id: str, container_id: str) -> PodContainer:
        info = json.loads(self.crictl("inspect", "-o", "json", container_id))
        path = info["info"]["runtimeSpec"]["linux"]["cgroupsPath"]
        return PodContainer(pod_id, container_id, path, info)

    def run_pod(
        self,
        name: str,
        annotations: dict[str, str],
        container: str = "work",
        runtime: str = "",
        resources: dict[str, int] | None = None,
        namespace: str = NAMESPACE,
        command: tuple[str, ...] = ("/bin/sleep", "infinity"),
        grant: dict | None = None,
    ) -> PodContainer:
        """Host-network pod + one started container; raises ClusterError on refusal."""
        files = self.pod_files(name, annotations, container, resources, namespace, command, grant)
        pod_id = self.run_sandbox(files, runtime)
        cid = self.create_container(pod_id, files)
        self.crictl("start", cid)
        return self.inspect(pod_id, cid)

    def update(self, pc: PodContainer, cpu_quota: int, cpu_period: int, memory: int) -> None:
        """What the kubelet does on an in-place resize (CRI UpdateContainerResources)."""
        self.crictl(
            "update",
            "--cpu-quota",
            str(cpu_quota),
            "--cpu-period",
            str(cpu_period),
            "--memory",
            str(memory),
            pc.container_id,
        )

    @staticmethod
    def cgroup(pc: PodContainer) -> CgroupValues:
        values = read_cgroup(pc.cgroups_path)
        print(f"evidence: cgroup {pc.cgroups_path}: {values}")  # shown by pytest -rP
        return values

    @property
    def cgroup_v2(self) -> bool:
        return cgroup_v2_only()

    @staticmethod
    def cgroup_file(pc: PodContainer, controller: str, name: str) -> str | None:
        """One file of the container's cgroup (controller is ignored on cgroup v2)."""
        rel = pc.cgroups_path.lstrip("/")
        d = CGROUP_ROOT / rel if cgroup_v2_only() else CGROUP_ROOT / controller / rel
        value = read_file(d / name)
        print(f"evidence: {d / name} = {value!r}")
        return value

    @staticmethod
    def pid(pc: PodContainer) -> int:
        return int(pc.inspect["info"]["pid"])

    @staticmethod
    def spec_annotations(pc: PodContainer) -> dict[str, str]:
        """The annotations in the OCI spec runc got (adjustments included)."""
        return pc.inspect["info"]["runtimeSpec"].get("annotations", {})

    def remove_pod(self, name: str) -> None:
        """Stop and remove the pod(s) named `name` (crictl's --name is a regex)."""
        for pod in json.loads(self.crictl("pods", "-o", "json"))["items"]:
            if pod["metadata"]["name"] == name:
                self.crictl("rmp", "--force", pod["id"])

    def remove_pods(self, workers: int = 8) -> list[str]:
        """Stop and remove every pod, `workers` at a time (`crictl rmp --all` stops them
        all at once, and 200 stops on two busy CPUs outlive crictl's 30 s deadline);
        returns what could not be removed."""
        ids = self.crictl("pods", "-q").split()

        def remove(pod_id: str) -> str:
            problem = ""
            for _ in range(3):  # a stop that ran out of time goes on: try again
                try:
                    self.crictl("rmp", "--force", pod_id, timeout=120)
                    return ""
                except (ClusterError, subprocess.TimeoutExpired) as exc:
                    problem = f"removing pod {pod_id}: {exc}"
            return problem

        with ThreadPoolExecutor(workers) as pool:
            return [p for p in pool.map(remove, ids) if p]

    # -- teardown ----------------------------------------------------------------
    def cleanup(self) -> list[str]:
        """Best effort, in dependency order; returns what could not be undone."""
        problems: list[str] = []
        if self.proc is not None and self.proc.poll() is None:
            try:
                problems += self.remove_pods()
            except (ClusterError, subprocess.TimeoutExpired) as exc:
                problems.append(f"listing pods: {exc}")
            self.kill(signal.SIGTERM)
        for pid in self._stray_pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.2)
        for sock in self._shim_sockets:  # a killed shim leaves its socket behind
            sock.unlink(missing_ok=True)
        problems += self._unmount_all()
        problems += self._remove_cgroups()
        shutil.rmtree(self.base, onerror=lambda _f, p, e: problems.append(f"rm {p}: {e[1]}"))
        return problems

    def _stray_pids(self) -> set[int]:
        """Shims and plugins started by this containerd (their argv names its socket or
        base dir), and processes left in this cgroup parent."""
        pids: set[int] = set()
        addr = str(self.sock)
        base = str(self.base).encode()
        for p in Path("/proc").iterdir():
            if not p.name.isdigit():
                continue
            try:
                argv = (p / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if argv and b"containerd-shim" in argv[0] and addr.encode() in argv:
                pids.add(int(p.name))
                self._note_shim_socket([a.decode(errors="replace") for a in argv])
            elif any(base in a for a in argv):  # e.g. a pre-installed plugin it launched
                pids.add(int(p.name))
        for procs in self._cgroup_dirs():
            for f in procs.rglob("cgroup.procs"):
                with contextlib.suppress(OSError, ValueError):
                    pids.update(int(x) for x in f.read_text().split())
        pids.discard(os.getpid())
        return pids

    def _note_shim_socket(self, argv: list[str]) -> None:
        """containerd names a shim's socket /run/containerd/s/<sha256 of
        address/namespace/id> (plus a '/debug' variant): remember it for removal."""
        opts = {
            flag: value for flag, value in itertools.pairwise(argv) if flag in ("-namespace", "-id")
        }
        ns, sid = opts.get("-namespace"), opts.get("-id")
        if ns and sid:
            key = os.path.join(str(self.sock), ns, sid)
            for k in (key, os.path.join(key, "debug")):
                self._shim_sockets.add(SHIM_SOCKET_DIR / hashlib.sha256(k.encode()).hexdigest())

    def _cgroup_dirs(self) -> list[Path]:
        rel = self.cgroup_parent.lstrip("/")
        if cgroup_v2_only():
            return [CGROUP_ROOT / rel] if (CGROUP_ROOT / rel).is_dir() else []
        return [c / rel for c in CGROUP_ROOT.iterdir() if (c / rel).is_dir()]

    def _remove_cgroups(self) -> list[str]:
        problems = []
        for top in self._cgroup_dirs():
            below = sorted(
                (p for p in top.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True
            )
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
            points = [
                ln.split()[4]
                for ln in Path("/proc/self/mountinfo").read_text().splitlines()
                if ln.split()[4] == base or ln.split()[4].startswith(base + "/")
            ]
            if not points:
                return problems
            for mp in sorted(points, key=len, reverse=True):
                if libc.umount2(mp.encode(), MNT_DETACH) != 0:
                    problems.append(f"umount {mp}: errno {ctypes.get_errno()}")
        return problems
