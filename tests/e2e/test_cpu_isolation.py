"""Issue 19, CPUs, against a real containerd: one tenant's exclusive CPUs never squeeze a
neighbour below its CPU request, never leave a container without an SLA on them, and a
resize answers with the container's current cpuset; exclusive CPUs follow a resize down.
Every cpuset is read back from the container's real cgroup.

Designed for a 2-CPU host (the smallest this suite runs on): CPU 1 becomes exclusive,
CPU 0 is the shared pool. The plugin reads the host's own topology (no --inventory):
cgroup cpusets must name CPUs that exist.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

PLUGIN = "50-nri-sla"
ONE_CPU = {"cpu_period": 100000, "cpu_quota": 100000, "cpu_shares": 1024,
           "memory_limit_in_bytes": 256 << 20}
ALIGNED = {"sla.nri.io/pod": 'numa: {nodes: "0"}\n'}
EXCLUSIVE = {"sla.nri.io/pod": "cpu: {exclusive: 1}\n"}
NODE_CONFIG = """\
enforcement: hard
cgroup:
  driver: cgroupfs
nri:
  reconnect-max-seconds: 1
metrics:
  address: ""
pod-caps:
  exclusive-cpus: 100%
"""


def online() -> str:
    return Path("/sys/devices/system/cpu/online").read_text().strip()


@pytest.fixture
def sla_plugin(cluster, plugins, sla_plugin_argv):
    if online() != "0-1" or not Path("/sys/devices/system/node/node0").exists():
        pytest.skip(f"designed for a 2-CPU, 1-NUMA-node host (online CPUs: {online()})")
    if os.sched_getaffinity(0) != {0, 1}:
        pytest.skip("the test process is not allowed both CPUs")
    config = cluster.base / "nri-sla.yaml"
    config.write_text(NODE_CONFIG + f"state-dir: {cluster.base / 'nri-sla-state'}\n")
    argv = [*sla_plugin_argv, "--config", str(config), "--socket", str(cluster.nri_sock),
            "--name", "nri-sla", "--index", "50", "--metrics-address", ""]
    proc = plugins.start(argv, "nri-sla")
    cluster.wait_plugin_synchronized(PLUGIN)
    proc.wait_output(r"synchronized: 0 pods, 0 containers")
    return proc


def cpus(cluster, pc) -> str:
    return cluster.cgroup_file(pc, "cpuset", "cpuset.cpus.effective" if cluster.cgroup_v2
                               else "cpuset.cpus")


def test_exclusive_cpus_never_squeeze_or_share(cluster, sla_plugin):
    """An aligned 1-CPU pod and a pod without an SLA are moved to CPU 0 when another
    tenant takes CPU 1 exclusively; a second `exclusive: 1` would leave them no CPU and is
    refused naming only its own request and the node policy; a pod created afterwards
    starts on CPU 0."""
    aligned = cluster.run_pod("aligned", ALIGNED, resources=ONE_CPU)
    plain = cluster.run_pod("plain", {})
    assert cpus(cluster, aligned) == "0-1"
    excl = cluster.run_pod("excl", EXCLUSIVE, resources=ONE_CPU)
    assert cpus(cluster, excl) == "1"
    assert cpus(cluster, aligned) == "0"  # narrowed in the same answer, not squeezed to 0
    assert cpus(cluster, plain) == "0"  # no SLA: off the exclusive CPU all the same
    with pytest.raises(cluster.Error) as refused:
        cluster.run_pod("second", EXCLUSIVE, resources=ONE_CPU)
    print("evidence: refused:", refused.value)
    assert ("cpu.exclusive: requested 1 exclusive CPUs on this node; taking them would "
            "leave running containers fewer CPUs than their CPU requests") in str(refused.value)
    assert "aligned" not in str(refused.value) and "plain" not in str(refused.value)
    later = cluster.run_pod("later", {})
    assert cpus(cluster, later) == "0"
    assert (cpus(cluster, aligned), cpus(cluster, excl)) == ("0", "1")


def test_resizes_keep_the_current_cpuset_and_give_exclusive_cpus_back(cluster, sla_plugin):
    """A resize of the narrowed aligned pod is answered with CPU 0 (not its creation-time
    0-1, which holds the other tenant's exclusive CPU); the exclusive pod resized to half
    a CPU gives CPU 1 back, and both neighbours widen to 0-1 in the same answer."""
    aligned = cluster.run_pod("aligned", ALIGNED, resources=ONE_CPU)
    plain = cluster.run_pod("plain", {})
    excl = cluster.run_pod("excl", EXCLUSIVE, resources=ONE_CPU)
    assert (cpus(cluster, aligned), cpus(cluster, excl)) == ("0", "1")
    cluster.crictl("update", "--cpu-quota", "50000", "--cpu-period", "100000",
                   "--cpu-share", "1024", aligned.container_id)
    assert cpus(cluster, aligned) == "0"
    assert cluster.cgroup(aligned).cpu_quota == 50000  # the resize itself landed
    cluster.crictl("update", "--cpu-quota", "50000", "--cpu-period", "100000",
                   "--cpu-share", "512", excl.container_id)
    sla_plugin.wait_output(r"exclusive CPUs given back after a resize")
    assert (cpus(cluster, excl), cpus(cluster, aligned), cpus(cluster, plain)) == (
        "0-1", "0-1", "0-1")
    # CPU 1 is free again: a new exclusive request gets it
    again = cluster.run_pod("again", EXCLUSIVE, resources=ONE_CPU)
    assert cpus(cluster, again) == "1"
    assert (cpus(cluster, aligned), cpus(cluster, plain), cpus(cluster, excl)) == (
        "0", "0", "0")
