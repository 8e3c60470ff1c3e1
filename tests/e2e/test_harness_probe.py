"""The e2e harness checked with a minimal independent plugin (probe_plugin.py).

If these fail, the environment (containerd, runc, cgroups, image) is at fault, not
nri-sla. The same checks with the real SLA plugin are in test_sla_containerd.py.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.e2e

MIB = 1024 * 1024
PROBE = "10-e2e-probe"


def probe_annotations(quota: int, period: int, memory: int) -> dict[str, str]:
    return {
        "e2e.nri-sla.io/cpu-quota": str(quota),
        "e2e.nri-sla.io/cpu-period": str(period),
        "e2e.nri-sla.io/memory-limit": str(memory),
    }


def test_probe_adjustment_lands_in_real_cgroup(cluster, plugins):
    probe = plugins.start_probe(cluster)
    cluster.wait_plugin_synchronized(PROBE)
    probe.wait_output(r"^configured runtime=\S+ version=\S+")
    probe.wait_output(r"^synchronized pods=0 containers=0")

    plain = cluster.run_pod("plain", {})
    assert cluster.cgroup(plain).cpu_quota == -1  # nothing asked, nothing limited

    pc = cluster.run_pod("probed", probe_annotations(50000, 100000, 256 * MIB))
    probe.wait_output(r"^create pod=probed container=work$")
    values = cluster.cgroup(pc)
    assert (values.cpu_quota, values.cpu_period, values.memory_limit) == (50000, 100000, 268435456)
    assert cluster.spec_annotations(pc).get("e2e.nri-sla.io/probe") == "seen"


def test_probe_reconnects_after_containerd_restart(cluster, plugins):
    probe = plugins.start_probe(cluster)
    cluster.wait_plugin_synchronized(PROBE)
    before = cluster.run_pod("before", probe_annotations(50000, 100000, 256 * MIB))

    cluster.restart()  # SIGKILL: the plugin sees its connection drop
    cluster.wait_plugin_synchronized(PROBE, count=2)
    # The pod and container that survived the restart are replayed in Synchronize.
    probe.wait_output(r"^synchronized pods=1 containers=1", timeout=30)

    after = cluster.run_pod("after", probe_annotations(20000, 100000, 128 * MIB))
    values = cluster.cgroup(after)
    assert (values.cpu_quota, values.cpu_period, values.memory_limit) == (20000, 100000, 134217728)
    assert cluster.cgroup(before).cpu_quota == 50000  # untouched by the restart
