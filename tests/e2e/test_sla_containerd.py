"""`nri-sla run` against a real containerd: SLA annotations become real cgroup values.

Each test starts its own private containerd (see conftest.py for the environment
variables that enable the suite), dials it with `nri-sla run --socket ...`, creates
host-network pods with crictl and reads the container's cgroup files back.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e import e2e_sla_cases as cases
from tests.e2e.e2e_sla_cases import POD_SLA, triple

pytestmark = pytest.mark.e2e

PLUGIN = "50-nri-sla"


# Node policy for the run: real-time allowed for the e2e namespace only, quick reconnects.
NODE_CONFIG = """\
enforcement: hard
permissions:
  realtime: ["nri-e2e"]
cgroup:
  driver: cgroupfs
nri:
  reconnect-max-seconds: 1
metrics:
  address: ""
"""


def write_node_config(cluster) -> Path:
    """NODE_CONFIG with a state directory (the record key) inside the cluster's base, so
    that the suite never touches the host's /var/lib/nri-sla."""
    config = cluster.base / "nri-sla.yaml"
    config.write_text(NODE_CONFIG + f"state-dir: {cluster.base / 'nri-sla-state'}\n")
    return config


@pytest.fixture
def sla_plugin(cluster, plugins, sla_plugin_argv):
    config = write_node_config(cluster)
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
    cluster.wait_plugin_synchronized(PLUGIN)
    # The plugin's own log agrees: configured by this runtime, then synchronized.
    proc.wait_output(r"configured by containerd")
    print("evidence: plugin log:", *proc.wait_output(r"synchronized: 0 pods, 0 containers"))
    return proc


def test_pod_sla_lands_in_real_cgroup(cluster, sla_plugin):
    plain = cluster.run_pod("no-sla", {})
    assert triple(cluster.cgroup(plain))[0] == -1  # no SLA: the plugin leaves it alone
    assert "sla.nri.io/applied" not in cluster.spec_annotations(plain)

    pc = cluster.run_pod("sla", {"sla.nri.io/pod": POD_SLA})
    assert triple(cluster.cgroup(pc)) == (50000, 100000, 268435456)
    # The runtime's own record says who enforced it (design: sla.nri.io/applied).
    assert "sla.nri.io/applied" in cluster.spec_annotations(pc)


def test_container_sla_overrides_pod_sla(cluster, sla_plugin):
    cases.container_sla_overrides_pod_sla(cluster)


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
    sla_plugin.wait_output(r"NRI connection lost")
    # The surviving pod and container are replayed to the plugin after the reconnect, the
    # plugin's record in the container's spec authenticated and taken again.
    print(
        "evidence: plugin log:",
        *sla_plugin.wait_output(
            r"synchronized: 1 pods, 1 containers, 1 allocations rebuilt, 0 records ignored"
        ),
    )

    after = cluster.run_pod(
        "after", {"sla.nri.io/pod": "cpu: {limit: 0.2, period: 50ms}\nmemory: {max: 128Mi}\n"}
    )
    assert triple(cluster.cgroup(after)) == (10000, 50000, 134217728)
    assert triple(cluster.cgroup(before)) == (50000, 100000, 268435456)


def test_soft_sla_direct_writes_land_at_start(cluster, sla_plugin):
    cases.soft_sla_direct_writes_land(cluster)


def test_numa_nodes_bind_cpuset(cluster, sla_plugin):
    cases.numa_nodes_bind_cpuset(cluster)


def test_rt_budget_lands_with_ancestors_raised(cluster, sla_plugin):
    cases.rt_budget_lands_with_ancestors_raised(cluster)


def test_memory_policy_bind_reaches_the_process(cluster, sla_plugin):
    if (cluster.major, cluster.minor) < (2, 3):
        pytest.skip("LinuxMemoryPolicy needs NRI v0.12 (containerd >= 2.3)")
    if not Path("/sys/devices/system/node/node0").exists():
        pytest.skip("no NUMA sysfs (/sys/devices/system/node/node0)")
    pc = cluster.run_pod("mpol", {"sla.nri.io/pod": 'numa: {nodes: "0", memory-policy: bind}\n'})
    maps = Path(f"/proc/{cluster.pid(pc)}/numa_maps").read_text().splitlines()
    print("evidence: numa_maps:", *maps[:2], sep="\n  ")
    # Every mapping of the container's process carries the task policy set by runc.
    assert maps and all(" bind:0 " in f"{ln} " for ln in maps), maps[:3]


VALIDATOR = """
[plugins.'io.containerd.nri.v1.nri'.default_validator]
enable = true
required_plugins = ["nri-sla"]
tolerate_missing_plugins_annotation = "tolerate-missing-nri-plugins.noderesource.dev"
"""


def test_fail_closed_validator_requires_nri_sla(cluster, plugins, sla_plugin_argv):
    """The packaging's fail-closed setup, for real: no nri-sla, no container."""
    if (cluster.major, cluster.minor) < (2, 3):
        pytest.skip(
            "the default validator with a configurable toleration key needs containerd >= 2.3"
        )
    cluster.reconfigure(VALIDATOR)
    with pytest.raises(cluster.Error) as err:
        cluster.run_pod("unguarded", {"sla.nri.io/pod": POD_SLA})
    print("refused without nri-sla:", err.value)
    assert "nri-sla" in str(err.value)
    tolerated = cluster.run_pod(
        "tolerated", {"tolerate-missing-nri-plugins.noderesource.dev": "true"}
    )
    assert cluster.cgroup(tolerated).cpu_quota == -1

    config = write_node_config(cluster)
    plugins.start(
        [
            *sla_plugin_argv,
            "--config",
            str(config),
            "--socket",
            str(cluster.nri_sock),
            "--name",
            "nri-sla",
            "--index",
            "50",
        ],
        "nri-sla",
    )
    cluster.wait_plugin_synchronized(PLUGIN)
    guarded = cluster.run_pod("guarded", {"sla.nri.io/pod": POD_SLA})
    assert triple(cluster.cgroup(guarded)) == (50000, 100000, 268435456)


def test_preinstalled_plugin_launched_by_containerd(cluster, sla_plugin_argv):
    """containerd starts `NN-name` from its plugin_path itself and hands it fd 3."""
    config = write_node_config(cluster)
    log = cluster.base / "preinstalled.log"
    args = " ".join(f"'{a}'" for a in [*sla_plugin_argv, "--config", str(config)])
    launcher = cluster.base / "nri" / "plugins" / "50-nri-sla"
    # The runtime passes only NRI_PLUGIN_* variables (no PATH): absolute paths throughout.
    launcher.write_text(f"#!/bin/sh\nexec {args} >>'{log}' 2>&1\n")
    launcher.chmod(0o755)
    cluster.reconfigure("")  # pre-installed plugins are started when containerd starts
    print(
        "evidence: containerd log:",
        *cluster.wait_log(r'pre-installed NRI plugin \\?"50-nri-sla\\?" synchronization success'),
    )

    pc = cluster.run_pod("preinstalled", {"sla.nri.io/pod": POD_SLA})
    assert triple(cluster.cgroup(pc)) == (50000, 100000, 268435456)
    assert "configured by containerd" in log.read_text()


def test_pod_raising_its_kubelet_limits_is_refused_or_clamped(cluster, sla_plugin):
    message = cases.kubelet_limits_refused_or_clamped(cluster)
    assert "crictl create" in message
    assert (
        "sla.nri.io/pod: cpu.limit: 64 exceeds the 0.5 CPUs the runtime granted "
        "(the pod's limit, quota 50000us per 100000us); allowed: at most 0.5"
    ) in message
    assert (
        "memory.max: 512Gi exceeds the 256Mi the runtime granted (the pod's limit); "
        "allowed: at most 256Mi"
    ) in message


def test_resize_below_the_sla_is_rechecked(cluster, sla_plugin):
    cases.resize_below_the_sla_is_rechecked(cluster, sla_plugin)
