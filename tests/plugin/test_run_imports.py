"""What the plugin loads: grpcio (about 8 MiB of `nri-sla run`'s memory) only once a
container's GPU evidence is its env alone and the kubelet's books must be asked, on a
node where the kubelet's socket exists (plugin.kubelet_grants); prometheus_client,
http.server and shutil (bz2, lzma, zlib) only with a metrics endpoint;
docs/benchmarks.md, "Plugin memory"."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.support.plugin_helpers import DGX

SCRIPT = """
import socket, sys, tempfile
from nri_plugin.config.values import GpuConfig, NodeConfig
from nri_plugin.core.nodebuild import build_node
from nri_plugin.plugin import SlaPlugin
from nri_plugin.simulated.runtime import DEFAULT_ENV, make_container, make_pod

kubelet = tempfile.mkdtemp() + "/kubelet.sock"
node = build_node(NodeConfig(gpu=GpuConfig(podresources_socket=kubelet)), cgroup_version=2,
                  inventory_file=sys.argv[1], detect=False, record_key=bytes(32))
plugin = SlaPlugin(node)
pod = make_pod("p", annotations={"sla.nri.io/pod": "cpu: {limit: 1}"})
plugin.synchronize([pod], [make_container(pod, "old")])
plugin.restorer.restore()
plugin.create_container(pod, make_container(pod, "new"))
print("grpc" in sys.modules)
gpu = (*DEFAULT_ENV, "NVIDIA_VISIBLE_DEVICES=0")
plugin.create_container(pod, make_container(pod, "gpu", env=gpu))
print("grpc" in sys.modules)  # no kubelet socket: nothing to ask
mute = socket.socket(socket.AF_UNIX)
mute.bind(kubelet)
mute.listen()
plugin.kubelet.timeout = 0.1
plugin.create_container(pod, make_container(pod, "gpu2", env=gpu))
print("grpc" in sys.modules)
"""


def test_run_loads_grpc_only_when_the_kubelet_is_asked():
    out = subprocess.run(
        [sys.executable, "-I", "-c", SCRIPT, str(DGX)], capture_output=True, text=True, check=True
    ).stdout.split()
    assert out == ["False", "False", "True"]


# `nri-sla run` itself, up to its first connection attempt (the NRI socket missing), then
# SIGTERM: which of the modules that only a metrics endpoint needs it has loaded by then.
RUN = """
import json, os, signal, sys, threading, time
from nri_plugin import cli

config, log, metrics_address = sys.argv[1:4]
loaded = {}

def look_once_connecting():
    deadline = time.monotonic() + 60
    while "NRI runtime not reachable" not in open(log).read():
        if time.monotonic() > deadline:
            break
        time.sleep(0.05)
    loaded.update((name, name in sys.modules) for name in
                  ("prometheus_client", "http.server", "nri_plugin.ops.metrics_http",
                   "shutil", "nri_plugin.ops.kube_events", "nri_plugin.ops.health"))
    os.kill(os.getpid(), signal.SIGTERM)

threading.Thread(target=look_once_connecting, daemon=True).start()
rc = cli.main(["run", "--config", config, "--metrics-address", metrics_address,
               "--health-address", "", "--cgroup", "v2", "--inventory", sys.argv[4]])
print(json.dumps({"rc": rc, **loaded}))
"""


@pytest.mark.parametrize("metrics_address, served", [("", False), ("127.0.0.1:0", True)])
def test_run_loads_the_metrics_server_only_with_a_metrics_address(
    tmp_path, metrics_address, served
):
    # Without one the service keeps its registration state alone (ops.metrics.
    # RegistrationOnly): prometheus_client, whose package imports its exposition's
    # http.server, urllib and ssl, and http.server are 4.3 MiB of the plugin's memory.
    config, log = tmp_path / "config.yaml", tmp_path / "plugin.log"
    config.write_text(
        f"state-dir: {tmp_path / 'state'}\n"
        f"nri: {{socket: {tmp_path / 'none.sock'}}}\nstatus: {{socket: ''}}\n"
    )
    with log.open("w") as stderr:
        out = subprocess.run(
            [sys.executable, "-I", "-c", RUN, str(config), str(log), metrics_address, str(DGX)],
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            timeout=120,
        )
    assert json.loads(out.stdout) == {
        "rc": 0,
        "prometheus_client": served,
        "http.server": served,
        "nri_plugin.ops.metrics_http": served,
        # argparse's default help width would import it (nri_plugin.cli._help_width);
        # prometheus_client imports it through tempfile.
        "shutil": served,
        # Events are off (no service account): ops.kube_api alone is loaded.
        "nri_plugin.ops.kube_events": False,
        "nri_plugin.ops.health": False,  # --health-address "": no probe listener
    }, log.read_text()
