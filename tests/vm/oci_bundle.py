"""OCI bundles for runc in the qemu guests: the static busybox as the rootfs, config.json
built per container. Shared by the busybox guest's and the systemd guest's fixtures
(tests/vm/guest/conftest.py, tests/vm/systemd_guest/conftest.py).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

BUSYBOX_APPLETS = ("sh", "cat", "ls", "echo", "sleep", "grep", "true")
# The hook as docs/hook.md says to install it (nri_plugin.hookspec.fast_hook_entry):
# `python3 -I -S -X utf8 <this>`, no site. Under TCG site alone (the venv's .pth
# files: the editable-install finder, pynvml's redirector) costs a second or more per run.
HOOK_MAIN = Path(__file__).resolve().parents[2] / "nri_plugin" / "hook" / "__main__.py"


@dataclasses.dataclass
class RuncResult:
    rc: int
    stdout: str
    stderr: str


@dataclasses.dataclass
class BusyboxBundle:
    """An OCI bundle whose rootfs is the static busybox; config.json is built per test.

    runc_flags: runc's global options, e.g. ("--systemd-cgroup",): cgroupsPath is then
    `slice:prefix:name` and runc asks systemd for a transient scope in that slice.
    """

    dir: Path
    runc_flags: tuple[str, ...] = ()

    def config(
        self, args: list[str], resources: dict[str, Any], cgroups_path: str
    ) -> dict[str, Any]:
        return {
            "ociVersion": "1.0.2",
            "process": {
                "user": {"uid": 0, "gid": 0},
                "args": args,
                "cwd": "/",
                "env": ["PATH=/bin"],
                "terminal": False,
            },
            "root": {"path": "rootfs", "readonly": True},
            "hostname": "nri-sla-guest",
            "mounts": [
                {"destination": "/proc", "type": "proc", "source": "proc"},
                {
                    "destination": "/dev",
                    "type": "tmpfs",
                    "source": "tmpfs",
                    "options": ["nosuid", "mode=755"],
                },
                {
                    "destination": "/sys",
                    "type": "sysfs",
                    "source": "sysfs",
                    "options": ["nosuid", "noexec", "nodev", "ro"],
                },
                # With a cgroup namespace this shows the container's own cgroup as root.
                {
                    "destination": "/sys/fs/cgroup",
                    "type": "cgroup",
                    "source": "cgroup",
                    "options": ["nosuid", "noexec", "nodev", "ro"],
                },
            ],
            "linux": {
                "cgroupsPath": cgroups_path,
                "namespaces": [{"type": t} for t in ("pid", "mount", "ipc", "uts", "cgroup")],
                "resources": resources,
            },
        }

    def run(self, args: list[str], resources: dict[str, Any], timeout: float = 60) -> RuncResult:
        """`runc run` in the foreground; the container's stdout comes back."""
        cid = f"nri-sla-{uuid.uuid4().hex[:8]}"
        return self._runc_run(cid, self.config(args, resources, f"/{cid}"), timeout)

    def _runc_run(self, cid: str, config: dict[str, Any], timeout: float) -> RuncResult:
        (self.dir / "config.json").write_text(json.dumps(config, indent=1))
        try:
            proc = subprocess.run(
                ["runc", *self.runc_flags, "run", "--bundle", str(self.dir), cid],
                capture_output=True,
                text=True,
                timeout=timeout,
                stdin=subprocess.DEVNULL,
            )
        finally:
            self.delete(cid)
        return RuncResult(proc.returncode, proc.stdout, proc.stderr)

    def start(self, cid: str, config: dict[str, Any], timeout: float = 180) -> RuncResult:
        """`runc run --detach`: the container keeps running (delete() ends it); its
        createRuntime hooks have run when this returns."""
        (self.dir / "config.json").write_text(json.dumps(config, indent=1))
        # Files, not pipes: the container inherits runc's stdio and keeps it open, so
        # reading pipes to their end would wait for the container to exit.
        with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
            proc = subprocess.run(
                ["runc", *self.runc_flags, "run", "--detach", "--bundle", str(self.dir), cid],
                stdout=out,
                stderr=err,
                text=True,
                timeout=timeout,
                stdin=subprocess.DEVNULL,
            )
            out.seek(0)
            err.seek(0)
            result = RuncResult(proc.returncode, out.read(), err.read())
        if proc.returncode != 0:
            self.delete(cid)
        return result

    def pid(self, cid: str) -> int:
        state = subprocess.run(
            ["runc", *self.runc_flags, "state", cid],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout
        return int(json.loads(state)["pid"])

    def delete(self, cid: str) -> None:
        subprocess.run(
            ["runc", *self.runc_flags, "delete", "--force", cid], capture_output=True, timeout=60
        )

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

    def run_with_hook(
        self,
        args: list[str],
        annotations: dict[str, str],
        work: Path,
        timeout: float = 180,
        cache: str = "off",
        cgroups_path: str | None = None,
        node_config: str = "enforcement: hard\n",
        runtime_keys: dict[str, str] | None = None,
    ) -> tuple[RuncResult, str]:
        """`runc run` of a spec without resources whose createRuntime hook is nri-sla's
        (`node_config` in `work`; `runtime_keys`: the runtime's own annotations, default
        containerd's container name); returns runc's result and the hook's log."""
        cid = f"nri-sla-hook-{uuid.uuid4().hex[:8]}"
        config = self.config(args, {}, cgroups_path or f"/{cid}")
        if runtime_keys is None:
            runtime_keys = {"io.kubernetes.cri.container-name": "app"}
        config["annotations"] = {**runtime_keys, **annotations}
        log = work / "hook.log"
        config["hooks"] = {
            "createRuntime": [
                {
                    "path": sys.executable,
                    # TCG is slow: a generous limit of the hook's own, below the runtime's.
                    "args": [
                        sys.executable,
                        "-I",
                        "-S",
                        "-X",
                        "utf8",
                        str(HOOK_MAIN),
                        "--stage",
                        "createRuntime",
                        "--timeout",
                        "100",
                        "--config",
                        str(work / "config.yaml"),
                        "--cache-dir",
                        cache,
                    ],
                    "env": [f"NRI_SLA_HOOK_LOG={log}"],
                    "timeout": 120,
                }
            ]
        }
        (work / "config.yaml").write_text(node_config)
        result = self._runc_run(cid, config, timeout)
        return result, (log.read_text() if log.exists() else "")


def make_busybox_bundle(directory: Path, runc_flags: tuple[str, ...] = ()) -> BusyboxBundle:
    """A bundle in `directory` (rootfs: /bin/busybox and its applet links)."""
    rootfs = directory / "rootfs"
    for d in ("bin", "proc", "sys", "dev", "tmp"):
        (rootfs / d).mkdir(parents=True)
    shutil.copy2("/bin/busybox", rootfs / "bin" / "busybox")
    for applet in BUSYBOX_APPLETS:
        (rootfs / "bin" / applet).symlink_to("busybox")
    return BusyboxBundle(directory, runc_flags)


def runc_skip_reason() -> str | None:
    if shutil.which("runc") is None or not Path("/bin/busybox").exists():
        return "needs runc and /bin/busybox (apt-get install runc busybox-static)"
    return None
