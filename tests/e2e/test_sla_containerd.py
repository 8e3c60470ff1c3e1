"""`nri-sla run` against a real containerd: SLA annotations become real cgroup values.

Each test starts its own private containerd (see conftest.py for the environment
variables that enable the suite), dials it with `nri-sla run --socket ...`, creates
host-network pods with crictl and reads the container's cgroup files back.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.e2e

PLUGIN = "50-nri-sla"
POD_SLA = "cpu: {limit: 0.5, period: 100ms}\nmemory: {max: 256Mi}\n"


@pytest.fixture
def sla_plugin(cluster, plugins, sla_plugin_argv):
    argv = [*sla_plugin_argv, "--socket", str(cluster.nri_sock), "--name", "nri-sla",
            "--index", "50", "--metrics-address", ""]
    proc = plugins.start(argv, "nri-sla")
    cluster.wait_plugin_synchronized(PLUGIN)
    return proc


def triple(values):
    return values.cpu_quota, values.cpu_period, values.memory_limit


def test_pod_sla_lands_in_real_cgroup(cluster, sla_plugin):
    plain = cluster.run_pod("no-sla", {})
    assert triple(cluster.cgroup(plain))[0] == -1  # no SLA: the plugin leaves it alone
    assert "sla.nri.io/applied" not in cluster.spec_annotations(plain)

    pc = cluster.run_pod("sla", {"sla.nri.io/pod": POD_SLA})
    assert triple(cluster.cgroup(pc)) == (50000, 100000, 268435456)
    # The runtime's own record says who enforced it (design: sla.nri.io/applied).
    assert "sla.nri.io/applied" in cluster.spec_annotations(pc)


def test_container_sla_overrides_pod_sla(cluster, sla_plugin):
    pc = cluster.run_pod("override", {
        "sla.nri.io/pod": POD_SLA,
        "sla.nri.io/container.work": "cpu: {limit: 0.25}\n",
    })
    # cpu.limit from the container key, period and memory.max from the pod key.
    assert triple(cluster.cgroup(pc)) == (25000, 100000, 268435456)


def test_invalid_sla_fails_container_creation_with_named_key(cluster, sla_plugin):
    with pytest.raises(cluster.Error) as err:
        cluster.run_pod("bad", {"sla.nri.io/pod": "memory: {max: lots}\n"})
    message = str(err.value)
    assert "crictl create" in message  # the sandbox ran; the container was refused
    assert "sla.nri.io/pod" in message
    assert "memory.max" in message


def test_sla_plugin_reconnects_after_containerd_restart(cluster, sla_plugin):
    before = cluster.run_pod("before", {"sla.nri.io/pod": POD_SLA})

    cluster.restart()  # SIGKILL: the plugin's connection drops mid-life
    cluster.wait_plugin_synchronized(PLUGIN, count=2, timeout=60)

    after = cluster.run_pod("after", {
        "sla.nri.io/pod": "cpu: {limit: 0.2, period: 50ms}\nmemory: {max: 128Mi}\n"})
    assert triple(cluster.cgroup(after)) == (10000, 50000, 134217728)
    assert triple(cluster.cgroup(before)) == (50000, 100000, 268435456)
