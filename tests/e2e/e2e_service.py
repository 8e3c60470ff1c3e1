"""`nri-sla run` beside a private containerd, as a node runs it: started, killed, stopped,
restarted with a changed node config, scraped.

GPUs are the fake ones of e2e_gpu.py (the 8 A100s of examples/dgx-like.yaml as device
nodes and CDI specs, the inventory `--inventory` reads), granted to pods by the kubelet's
books (`GpuBooks`, `SlaService.run_gpu_pod`) as the NVIDIA device plugin's CDI devices:
nri-sla verifies a grant, never makes one. The state directory (the record key) lives in
the cluster's base dir and survives plugin restarts.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

from tests.e2e import e2e_metrics
from tests.e2e.e2e_gpu import GPU_UUIDS, FakeGpus, GpuBooks, spec_gpus

PLUGIN = "50-nri-sla"  # how containerd names it in its log
GPUS = len(GPU_UUIDS)


def gpu_sla(count: int) -> dict[str, str]:
    """Pod annotations asking `count` GPUs of the grant (align: false keeps the GPUs' NUMA
    CPUs out of this host's cpusets)."""
    return {"sla.nri.io/pod": f"gpu: {{count: {count}, align: false}}\n"}


def visible_gpus(pc) -> list[str]:
    """The GPUs a started container can open (the GPU device nodes in its OCI spec)."""
    gpus = spec_gpus(pc.inspect["info"]["runtimeSpec"])
    print(f"evidence: {pc.container_id[:12]} GPUs {','.join(gpus) or 'none'}")
    return gpus


def node_config(state_dir: Path, metrics_port: int | None, **overrides: Any) -> dict:
    """The fault tests' node policy; keyword overrides replace top-level keys
    (`permissions=...`, `enforcement="soft"`)."""
    config = {
        "enforcement": "hard",
        "state-dir": str(state_dir),
        "gpu": {"injection": "env"},
        "cgroup": {"driver": "cgroupfs"},
        "nri": {"reconnect-max-seconds": 1},
        "metrics": {"address": f"127.0.0.1:{metrics_port}" if metrics_port else ""},
        # The grant rules have their own e2e test. (permissions.ungranted-gpus is gone:
        # nri-sla no longer hands out GPUs; GPU pods need a grant the runtime passes.)
        "permissions": {"exceed-runtime-limits": ["*"]},
        "pod-caps": {"exclusive-cpus": "100%"},
    }
    return config | {k.replace("_", "-"): v for k, v in overrides.items()}


class SlaService:
    """Starts `nri-sla run` processes for one cluster (at most one alive at a time)."""

    def __init__(
        self,
        cluster,
        plugins,
        argv: list[str],
        *,
        metrics: bool = True,
        gpus: FakeGpus | None = None,
    ) -> None:
        self.cluster = cluster
        self.plugins = plugins
        self.gpus = gpus or FakeGpus.make(cluster.base)
        self.books = GpuBooks(self.gpus)
        self.config_path = cluster.base / "nri-sla.yaml"
        self.port = e2e_metrics.free_port() if metrics else None
        self.argv = [
            *argv,
            "--config",
            str(self.config_path),
            "--socket",
            str(cluster.nri_sock),
            "--name",
            "nri-sla",
            "--index",
            "50",
            "--inventory",
            str(self.gpus.inventory),
        ]
        self.processes: list = []
        self.registrations = 0  # "connected and synchronized" lines containerd logged
        self.configure()

    def configure(self, **overrides: Any) -> dict:
        """Write the node config (read by the next start); returns it."""
        config = node_config(self.cluster.base / "nri-sla-state", self.port, **overrides)
        # JSON is YAML: the plugin reads this file with its YAML reader.
        self.config_path.write_text(json.dumps(config, indent=1) + "\n")
        return config

    @property
    def current(self):
        return self.processes[-1]

    def start(self, wait: bool = True):
        """A new plugin process; with `wait`, returns once containerd logged it synchronized
        (the count of such lines tells this connection from an earlier one)."""
        self.processes.append(self.plugins.start(self.argv, f"nri-sla-{len(self.processes)}"))
        if wait:
            self.wait_registered()
        return self.current

    def wait_registered(self, timeout: float = 60.0) -> None:
        """The next registration: a started process's first, or the running one's again
        after containerd restarted or dropped it."""
        self.registrations += 1
        self.cluster.wait_plugin_synchronized(PLUGIN, count=self.registrations, timeout=timeout)

    def signal(self, sig: int) -> None:
        self.current.proc.send_signal(sig)

    def kill(self) -> None:
        """SIGKILL, as the OOM killer does: no clean-up of any kind."""
        self.signal(signal.SIGKILL)
        self.current.proc.wait(10)

    def stop(self) -> None:
        self.current.stop()

    def run_gpu_pod(
        self, name: str, count: int, annotations: dict[str, str] | None = None, **kwargs: Any
    ):
        """A pod granted `count` GPUs by the kubelet's books, its SLA `annotations` (default
        gpu_sla(count)); raises NoGpuLeft (the kubelet would keep it pending) or the
        runtime's refusal, after removing the pod and freeing its GPUs (as once the pod
        is deleted)."""
        grant = self.books.allocate(name, count)
        try:
            return self.cluster.run_pod(name, annotations or gpu_sla(count), grant=grant, **kwargs)
        except self.cluster.Error:
            self.cluster.remove_pod(name)
            self.books.release(name)
            raise

    def assert_gpus_counted(self, in_use: int) -> None:
        """The plugin counts `in_use` GPUs held by live containers, none by two."""
        samples = self.scrape()
        counted = samples.get("nri_sla_gpus_in_use"), samples.get("nri_sla_gpus_shared")
        print("evidence: metrics: nri_sla_gpus_in_use, nri_sla_gpus_shared =", counted)
        assert counted == (in_use, 0)

    def scrape(self) -> e2e_metrics.Samples:
        if self.port is None:
            raise AssertionError("this SlaService was started without metrics")
        return e2e_metrics.scrape(self.port)
