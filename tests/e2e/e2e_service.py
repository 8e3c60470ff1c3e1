"""`nri-sla run` beside a private containerd, as a node runs it: started, killed, stopped,
restarted with a changed node config, scraped.

GPUs come from the inventory snapshot examples/dgx-like.yaml (8 A100s on 2 NUMA nodes,
`--inventory`), injected as NVIDIA_VISIBLE_DEVICES (`gpu.injection: env`) so that no GPU
has to exist: they are what the fault tests count allocations with. The state directory
(the record key) lives in the cluster's base dir and survives plugin restarts.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import e2e_metrics
from e2e_rollout import spec_gpus

REPO = Path(__file__).resolve().parents[2]
INVENTORY = REPO / "examples" / "dgx-like.yaml"
PLUGIN = "50-nri-sla"  # how containerd names it in its log
GPUS = 8  # in INVENTORY
GPU_UUIDS = [f"GPU-d0000000-0000-0000-0000-00000000000{i}" for i in range(GPUS)]


def gpu_sla(count: int) -> dict[str, str]:
    """Pod annotations asking `count` GPUs (align: false keeps the snapshot's 64 CPUs out
    of this host's cpusets)."""
    return {"sla.nri.io/pod": f"gpu: {{count: {count}, align: false}}\n"}


def visible_gpus(pc) -> list[str]:
    """The GPUs a started container got (NVIDIA_VISIBLE_DEVICES in its OCI spec)."""
    gpus = spec_gpus(pc.inspect["info"]["runtimeSpec"])
    print(f"evidence: {pc.container_id[:12]} NVIDIA_VISIBLE_DEVICES={','.join(gpus)}")
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

    def __init__(self, cluster, plugins, argv: list[str], *, metrics: bool = True) -> None:
        self.cluster = cluster
        self.plugins = plugins
        self.config_path = cluster.base / "nri-sla.yaml"
        self.port = e2e_metrics.free_port() if metrics else None
        self.argv = [*argv, "--config", str(self.config_path), "--socket",
                     str(cluster.nri_sock), "--name", "nri-sla", "--index", "50",
                     "--inventory", str(INVENTORY)]
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
        self.cluster.wait_plugin_synchronized(PLUGIN, count=self.registrations,
                                              timeout=timeout)

    def signal(self, sig: int) -> None:
        self.current.proc.send_signal(sig)

    def kill(self) -> None:
        """SIGKILL, as the OOM killer does: no clean-up of any kind."""
        self.signal(signal.SIGKILL)
        self.current.proc.wait(10)

    def stop(self) -> None:
        self.current.stop()

    def scrape(self) -> e2e_metrics.Samples:
        if self.port is None:
            raise AssertionError("this SlaService was started without metrics")
        return e2e_metrics.scrape(self.port)
