"""CPUs against a real containerd: one tenant's exclusive CPUs never squeeze a neighbour
below its CPU request, never leave a container without an SLA on them, and a resize
answers with the container's current cpuset; exclusive CPUs follow a resize down, also
one made while nri-sla was stopped; a create or stop moves only the cpusets that must.
Every cpuset is read back from the container's real cgroup.

Designed for a 2-CPU host (the smallest this suite runs on): CPU 1 becomes exclusive,
CPU 0 is the shared pool. The plugin reads the host's own topology (no --inventory):
cgroup cpusets must name CPUs that exist.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

PLUGIN = "50-nri-sla"
ONE_CPU = {
    "cpu_period": 100000,
    "cpu_quota": 100000,
    "cpu_shares": 1024,
    "memory_limit_in_bytes": 256 << 20,
}
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
watch:
  interval-seconds: 0  # given-back CPUs stay out of every cpuset: what the answers moved
pod-caps:
  exclusive-cpus: 100%
"""


def online() -> str:
    return Path("/sys/devices/system/cpu/online").read_text().strip()


@pytest.fixture
def sla_plugin(cluster, plugins, sla_plugin_argv):
    return start_plugin(cluster, plugins, sla_plugin_argv)


def start_plugin(
    cluster, plugins, sla_plugin_argv, synchronized: str = "0 pods, 0 containers", count: int = 1
):
    if online() != "0-1" or not Path("/sys/devices/system/node/node0").exists():
        pytest.skip(f"designed for a 2-CPU, 1-NUMA-node host (online CPUs: {online()})")
    if os.sched_getaffinity(0) != {0, 1}:
        pytest.skip("the test process is not allowed both CPUs")
    config = cluster.base / "nri-sla.yaml"
    config.write_text(NODE_CONFIG + f"state-dir: {cluster.base / 'nri-sla-state'}\n")
    argv = [
        *sla_plugin_argv,
        "--config",
        str(config),
        "--socket",
        str(cluster.nri_sock),
        "--name",
        "nri-sla",
        "--index",
        "50",
        "--metrics-address",
        "",
    ]
    proc = plugins.start(argv, "nri-sla")
    cluster.wait_plugin_synchronized(PLUGIN, count)
    proc.wait_output(rf"synchronized: {synchronized}")
    return proc


def cpus(cluster, pc) -> str:
    return cluster.cgroup_file(
        pc, "cpuset", "cpuset.cpus.effective" if cluster.cgroup_v2 else "cpuset.cpus"
    )


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
    assert (
        "cpu.exclusive: requested 1 exclusive CPUs on this node; taking them would "
        "leave running containers fewer CPUs than their CPU requests"
    ) in str(refused.value)
    assert "aligned" not in str(refused.value) and "plain" not in str(refused.value)
    later = cluster.run_pod("later", {})
    assert cpus(cluster, later) == "0"
    assert (cpus(cluster, aligned), cpus(cluster, excl)) == ("0", "1")


def test_resizes_keep_the_current_cpuset_and_give_exclusive_cpus_back(cluster, sla_plugin):
    """A resize of the narrowed aligned pod is answered with CPU 0 (not its creation-time
    0-1, which holds the other tenant's exclusive CPU); the exclusive pod resized to half
    a CPU gives CPU 1 back in its own answer, which moves no neighbour (they get it with
    the drift pass); a new exclusive request takes CPU 1 again."""
    aligned = cluster.run_pod("aligned", ALIGNED, resources=ONE_CPU)
    plain = cluster.run_pod("plain", {})
    excl = cluster.run_pod("excl", EXCLUSIVE, resources=ONE_CPU)
    assert (cpus(cluster, aligned), cpus(cluster, excl)) == ("0", "1")
    cluster.crictl(
        "update",
        "--cpu-quota",
        "50000",
        "--cpu-period",
        "100000",
        "--cpu-share",
        "1024",
        aligned.container_id,
    )
    assert cpus(cluster, aligned) == "0"
    assert cluster.cgroup(aligned).cpu_quota == 50000  # the resize itself landed
    cluster.crictl(
        "update",
        "--cpu-quota",
        "50000",
        "--cpu-period",
        "100000",
        "--cpu-share",
        "512",
        excl.container_id,
    )
    sla_plugin.wait_output(r"exclusive CPUs given back after a resize")
    assert (cpus(cluster, excl), cpus(cluster, aligned), cpus(cluster, plain)) == ("0-1", "0", "0")
    # CPU 1 is free again: a new exclusive request gets it
    again = cluster.run_pod("again", EXCLUSIVE, resources=ONE_CPU)
    assert cpus(cluster, again) == "1"
    assert (cpus(cluster, aligned), cpus(cluster, plain), cpus(cluster, excl)) == ("0", "0", "0")


def until(check, timeout: float = 10.0):
    deadline = time.monotonic() + timeout
    while not check() and time.monotonic() < deadline:
        time.sleep(0.05)
    return check()


def test_a_resize_while_nri_sla_is_stopped_rules_from_its_first_synchronize(
    cluster, plugins, sla_plugin_argv, sla_plugin
):
    """`crictl update` of the exclusive pod to half a CPU while the plugin is stopped:
    started again, its first Synchronize gives CPU 1 back, and the neighbour's
    cpuset.cpus is 0-1 again (the restore's UpdateContainers right after the answer)."""
    plain = cluster.run_pod("plain", {})
    excl = cluster.run_pod("excl", EXCLUSIVE, resources=ONE_CPU)
    assert (cpus(cluster, excl), cpus(cluster, plain)) == ("1", "0")
    sla_plugin.stop()
    cluster.crictl(
        "update",
        "--cpu-quota",
        "50000",
        "--cpu-period",
        "100000",
        "--cpu-share",
        "512",
        excl.container_id,
    )
    assert cpus(cluster, plain) == "0"  # nobody there to give it back
    again = start_plugin(cluster, plugins, sla_plugin_argv, "2 pods, 2 containers", 2)
    again.wait_output(r"exclusive CPUs given back after a resize")
    # (the restore's one UpdateContainers: containerd applies its updates one by one)
    widened = until(lambda: (cpus(cluster, plain), cpus(cluster, excl)) == ("0-1", "0-1"))
    print("evidence:", *again.output().splitlines()[-6:], sep="\n  ")
    assert widened, f"the neighbour's cpuset.cpus stayed {cpus(cluster, plain)}"
    # half a CPU: no exclusive CPU, the shared pool
    assert cpus(cluster, excl) == "0-1"


def test_an_exclusive_create_and_stop_move_only_what_must_move(cluster, sla_plugin):
    """The first exclusive pod moves its neighbours off CPU 1 (they ran on it); its stop
    moves nobody (CPU 1 waits out of every cpuset until the drift pass); the next
    exclusive pod takes CPU 1 again without moving anyone."""
    neighbours = [cluster.run_pod(f"n{i}", {}) for i in range(3)]
    first = cluster.run_pod("first", EXCLUSIVE, resources=ONE_CPU)
    assert cpus(cluster, first) == "1"
    assert [cpus(cluster, n) for n in neighbours] == ["0"] * 3
    started = time.monotonic()
    cluster.crictl("stop", first.container_id)
    stopped = time.monotonic() - started
    cluster.remove_pod("first")
    assert [cpus(cluster, n) for n in neighbours] == ["0"] * 3  # the stop sent no update
    second = cluster.run_pod("second", EXCLUSIVE, resources=ONE_CPU)
    assert cpus(cluster, second) == "1"
    assert [cpus(cluster, n) for n in neighbours] == ["0"] * 3
    print(f"evidence: crictl stop with 3 neighbours: {stopped * 1000:.0f} ms")
