"""A private, throwaway CRI-O (+ conmon, runc, crictl) for the e2e suite.

The same Cluster (e2e_cluster.py) with CRI-O as the daemon: everything under one base
directory (config, storage root and run root, the CRI socket, the NRI socket, hooks.d,
runc's state root), the cgroupfs manager, pods in the host network namespace under a
private cgroup parent. CRI-O has no image import: the suite's OCI archive is served by a
tiny local registry on 127.0.0.1 (plain HTTP, `insecure` in a private registries.conf) and
pulled once with crictl. Enabled by NRI_SLA_CRIO (conftest.py).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tarfile
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tests.e2e.e2e_cluster import Cluster, ClusterError, PodFiles

INDEX = "application/vnd.oci.image.index.v1+json"


@dataclass(frozen=True)
class CrioBinaries:
    crio: Path
    conmon: Path
    pinns: Path
    crictl: Path
    runc: Path

    def missing(self) -> list[str]:
        return [
            f"{k}={v}"
            for k, v in vars(self).items()
            if not (Path(v).is_file() and os.access(v, os.X_OK))
        ]


class ArchiveRegistry:
    """Serves one OCI archive (index.json + blobs) over the registry API v2, read-only:
    the manifest by tag or digest, blobs by digest. Enough for containers/image's pull."""

    def __init__(self, archive: Path, repo: str, tag: str) -> None:
        with tarfile.open(archive) as tar:
            self.files = {
                m.name: tar.extractfile(m).read()  # type: ignore[union-attr]
                for m in tar.getmembers()
                if m.isfile()
            }
        index = json.loads(self.files["index.json"])
        self.tag_manifest = index["manifests"][0]
        self.repo, self.tag = repo, tag
        registry = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:  # quiet: pytest captures stderr
                pass

            def do_HEAD(self) -> None:
                self.answer(body=False)

            def do_GET(self) -> None:
                self.answer(body=True)

            def answer(self, body: bool) -> None:
                found = registry.lookup(self.path)
                if found is None:
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                data, media, digest = found
                self.send_response(200)
                self.send_header("Content-Type", media)
                self.send_header("Content-Length", str(len(data)))
                if digest:
                    self.send_header("Docker-Content-Digest", digest)
                self.end_headers()
                if body:
                    self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.server.server_address[1]}"

    @property
    def image(self) -> str:
        return f"{self.address}/{self.repo}:{self.tag}"

    def blob(self, digest: str) -> bytes | None:
        return self.files.get(f"blobs/sha256/{digest.removeprefix('sha256:')}")

    def lookup(self, path: str) -> tuple[bytes, str, str] | None:
        if path == "/v2/":
            return b"{}", "application/json", ""
        prefix = f"/v2/{self.repo}/"
        if not path.startswith(prefix):
            return None
        kind, _, ref = path[len(prefix) :].partition("/")
        if kind == "manifests":
            digest = self.tag_manifest["digest"] if ref == self.tag else ref
            data = self.blob(digest)
            media = json.loads(data).get("mediaType", INDEX) if data else ""
            return (data, media, digest) if data is not None else None
        if kind == "blobs":
            data = self.blob(ref)
            return (data, "application/octet-stream", ref) if data is not None else None
        return None

    def __enter__(self) -> ArchiveRegistry:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def render_crio_config(base: Path, bins: CrioBinaries, image: str) -> str:
    """CRI-O's config for one private instance: every path under `base`, cgroupfs, NRI on
    at base/nri.sock, hooks.d at base/hooks.d (empty until a test installs a hook). The
    suite's image is the pause image too: CRI-O pulls it for every pod even when it drops
    the infra container (host-network pods, drop_infra_ctr)."""
    return f"""\
[crio]
root = "{base}/root"
runroot = "{base}/run"
storage_driver = "vfs"
log_dir = "{base}/logs"
version_file = "{base}/version"
version_file_persist = "{base}/version-persist"
clean_shutdown_file = "{base}/clean.shutdown"

[crio.api]
listen = "{base}/crio.sock"
stream_port = "0"

[crio.runtime]
default_runtime = "runc"
cgroup_manager = "cgroupfs"
hooks_dir = ["{base}/hooks.d"]
pinns_path = "{bins.pinns}"
container_exits_dir = "{base}/exits"
container_attach_socket_dir = "{base}/attach"
namespaces_dir = "{base}/ns"

[crio.runtime.runtimes.runc]
runtime_path = "{bins.runc}"
runtime_root = "{base}/runc"
monitor_path = "{bins.conmon}"
monitor_cgroup = "pod"

[crio.image]
signature_policy = "{base}/policy.json"
pause_image = "{image}"
pause_command = "/bin/sleep"
short_name_mode = "disabled"

[crio.network]
network_dir = "{base}/cni/net.d"
plugin_dirs = ["/usr/lib/cni"]

[crio.nri]
enable_nri = true
nri_listen = "{base}/nri.sock"
nri_plugin_dir = "{base}/nri/plugins"
nri_plugin_config_dir = "{base}/nri/conf.d"
nri_plugin_registration_timeout = "5s"
nri_plugin_request_timeout = "2s"
"""


def crio_version(binary: Path) -> tuple[int, int, int]:
    out = subprocess.run(
        [str(binary), "version"], capture_output=True, text=True, timeout=30
    ).stdout
    for line in out.splitlines():
        if line.startswith("Version:"):
            parts = line.split()[1].split(".")
            return int(parts[0]), int(parts[1]), int(parts[2].split("-")[0])
    raise ClusterError(f"cannot read a version from {binary} version: {out!r}")


@dataclass
class CrioNode(Cluster):
    """One private CRI-O: start(), run_pod(), cleanup() as Cluster's."""

    registry: ArchiveRegistry | None = None
    runtime_name: str = field(default="cri-o")

    @property
    def sock(self) -> Path:
        return self.base / "crio.sock"

    @property
    def log_path(self) -> Path:
        return self.base / "crio.log"

    @property
    def hooks_dir(self) -> Path:
        return self.base / "hooks.d"

    def prepare(self) -> None:
        self.major, self.minor, _ = crio_version(self.bins.crio)
        for d in (
            "root",
            "run",
            "runc",
            "nri/plugins",
            "nri/conf.d",
            "cni/net.d",
            "pods",
            "hooks.d",
            "logs",
            "exits",
            "attach",
            "ns",
            "crio.conf.d",
            "registries.conf.d",
        ):
            (self.base / d).mkdir(parents=True, exist_ok=True)
        (self.base / "policy.json").write_text(
            '{"default": [{"type": "insecureAcceptAnything"}]}\n'
        )
        assert self.registry is not None
        (self.base / "crio.conf").write_text(render_crio_config(self.base, self.bins, self.image))
        # CRI-O 1.36 reads insecure registries only from registries.conf (containers/image);
        # its hidden --registries-conf(-dir) flags point it at this one, not the host's.
        (self.base / "registries.conf").write_text(
            f'[[registry]]\nlocation = "{self.registry.address}"\ninsecure = true\n'
        )
        (self.base / "crictl.yaml").write_text(
            f"runtime-endpoint: unix://{self.sock}\nimage-endpoint: unix://{self.sock}\n"
            "timeout: 30\ndebug: false\npull-image-on-create: false\n"
        )

    def start(self, timeout: float = 60.0) -> None:
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": str(self.base)}
        self.starts += 1
        with self.log_path.open("a") as log:
            log.write(f"---- nri-e2e: start #{self.starts} ----\n")
            log.flush()
            self.proc = subprocess.Popen(
                [
                    str(self.bins.crio),
                    "--config",
                    str(self.base / "crio.conf"),
                    "--config-dir",
                    str(self.base / "crio.conf.d"),
                    "--log-level",
                    "info",
                    "--registries-conf",
                    str(self.base / "registries.conf"),
                    "--registries-conf-dir",
                    str(self.base / "registries.conf.d"),
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise ClusterError(f"crio exited with {self.proc.returncode}:\n" + self.log_tail())
            if (
                self.sock.exists()
                and subprocess.run(
                    self._crictl_argv("version"), capture_output=True, timeout=30
                ).returncode
                == 0
            ):
                return
            if time.monotonic() > deadline:
                raise ClusterError(f"crio not ready after {timeout}s:\n" + self.log_tail())
            time.sleep(0.2)

    def import_image(self) -> None:
        self.crictl("pull", self.image, timeout=180)

    def wait_plugin_synchronized(
        self, name: str, count: int = 1, timeout: float = 30.0
    ) -> list[str]:
        """CRI-O logs through the same NRI adaptation as containerd."""
        lines = self.wait_log(rf'plugin \\?"{name}\\?" connected and synchronized', count, timeout)
        print("evidence: crio log:", *lines, sep="\n  ")
        return lines

    def add_drop_in(self, source: Path) -> None:
        """A crio.conf.d drop-in (as an operator installs the packaged ones): crio stopped
        cleanly, the file added to its --config-dir, crio started again (state kept)."""
        self.kill(signal.SIGTERM)
        (self.base / "crio.conf.d" / source.name).write_text(source.read_text())
        self.start()

    def pod_files(self, *args: Any, **kw: Any) -> PodFiles:
        """Cluster's pod, with its own PID namespace per container: then CRI-O drops the
        infra container (drop_infra_ctr), whose oom_score_adj -998 an unprivileged
        sandbox (as the test host) cannot set."""
        files = super().pod_files(*args, **kw)
        pod = json.loads(files.pod.read_text())
        pod["linux"]["security_context"]["namespace_options"]["pid"] = 1  # CONTAINER
        files.pod.write_text(json.dumps(pod))
        ctr = json.loads(files.container.read_text())
        ctr.setdefault("linux", {})["security_context"] = {"namespace_options": {"pid": 1}}
        # The labels the kubelet puts on every container: CRI-O names the container to NRI
        # and in the spec (io.kubernetes.container.name) from them, not from its metadata.
        meta = pod["metadata"]
        ctr["labels"] = {
            "io.kubernetes.container.name": ctr["metadata"]["name"],
            "io.kubernetes.pod.name": meta["name"],
            "io.kubernetes.pod.namespace": meta["namespace"],
            "io.kubernetes.pod.uid": meta["uid"],
        }
        files.container.write_text(json.dumps(ctr))
        return files

    def install_hook(self, document: dict) -> Path:
        """A hooks.d file, as the package installs nri-sla-hook.json (CRI-O reads the
        directory when it creates a container)."""
        path = self.hooks_dir / "nri-sla-hook.json"
        path.write_text(json.dumps(document))
        return path
