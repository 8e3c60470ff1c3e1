"""What the plugin loads: grpcio (about 8 MiB of `nri-sla run`'s memory) only once a
container's GPU evidence is its env alone and the kubelet's books must be asked
(plugin.kubelet_grants); docs/benchmarks.md, "Plugin memory"."""

from __future__ import annotations

import subprocess
import sys

from tests.support.plugin_helpers import DGX

SCRIPT = """
import sys
from nri_plugin.config import NodeConfig
from nri_plugin.core import build_node
from nri_plugin.plugin import SlaPlugin
from nri_plugin.simulated.runtime import DEFAULT_ENV, make_container, make_pod

node = build_node(NodeConfig(), cgroup_version=2, inventory_file=sys.argv[1], detect=False,
                  record_key=bytes(32))
plugin = SlaPlugin(node)
pod = make_pod("p", annotations={"sla.nri.io/pod": "cpu: {limit: 1}"})
plugin.synchronize([pod], [make_container(pod, "old")])
plugin.create_container(pod, make_container(pod, "new"))
print("grpc" in sys.modules)
plugin.create_container(pod, make_container(
    pod, "gpu", env=(*DEFAULT_ENV, "NVIDIA_VISIBLE_DEVICES=0")))
print("grpc" in sys.modules)
"""


def test_run_loads_grpc_only_when_the_kubelet_is_asked():
    out = subprocess.run([sys.executable, "-I", "-c", SCRIPT, str(DGX)], capture_output=True,
                         text=True, check=True).stdout.split()
    assert out == ["False", "True"]
