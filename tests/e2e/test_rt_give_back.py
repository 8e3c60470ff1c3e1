"""The real-time budget nri-sla raises in a pod's ancestors comes back down on real
containerd and runc (cgroup v1): when the RT pod is removed, and when the plugin restarts
after RT pods went away while it was down. The cluster's private cgroup parent plays the
persistent parent (kubepods); each pod has its own cgroup below it, as the kubelet makes.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.e2e.test_sla_containerd import NODE_CONFIG, PLUGIN

pytestmark = pytest.mark.e2e

CPU = Path("/sys/fs/cgroup/cpu")
# Big RT pods, so that a raise left behind is seen: one pod may take 90% of CPU time as
# real time, SLA containers all the kernel's RT share (the root's 95%).
RT_CONFIG = NODE_CONFIG + "pod-caps: {rt-share: 0.9}\nrt-budget: 1.0\n"


def rt_sla(ms: int) -> dict[str, str]:
    return {"sla.nri.io/pod": f"cpu: {{rt-runtime: {ms}ms, rt-period: 1s}}\n"}


def budget(path: Path) -> int | None:
    try:
        return int((path / "cpu.rt_runtime_us").read_text())
    except FileNotFoundError:
        return None  # removed (a pod's cgroup, by whoever removes it)


def settles(path: Path, want: int | None, timeout: float = 45.0) -> int | None:
    """The budget once it is `want` (the drift pass retries a give-back the kernel refused
    while a removed child was still counted); the last value seen after `timeout`."""
    deadline = time.monotonic() + timeout
    while (seen := budget(path)) != want and time.monotonic() < deadline:
        time.sleep(0.2)
    print(f"evidence: {path}/cpu.rt_runtime_us = {seen}")
    return seen


def remove(cluster, pc) -> None:
    cluster.crictl("rmp", "--force", pc.pod_id)


@pytest.fixture
def rt_host(cluster):
    if cluster.cgroup_v2:
        pytest.skip("real-time budgets are cgroup v1 only (v2 ignores them)")
    if not (CPU / "cpu.rt_runtime_us").exists():
        pytest.skip("kernel without CONFIG_RT_GROUP_SCHED (no cpu.rt_runtime_us)")
    return CPU / cluster.cgroup_parent.lstrip("/")


def start_plugin(cluster, plugins, sla_plugin_argv, starts: int):
    config = cluster.base / "nri-sla-rt.yaml"  # the state dir (the ledger) outlives restarts
    config.write_text(RT_CONFIG + f"state-dir: {cluster.base / 'nri-sla-state'}\n")
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
    proc = plugins.start(argv, f"nri-sla-{starts}")
    cluster.wait_plugin_synchronized(PLUGIN, count=starts)
    proc.wait_output(r"synchronized: ")
    return proc


def test_removed_rt_pod_leaves_the_ancestors_as_they_were(
    cluster, plugins, sla_plugin_argv, rt_host
):
    start_plugin(cluster, plugins, sla_plugin_argv, 1)
    cluster.run_pod("plain", {})  # the parent exists, as kubepods does
    before = budget(rt_host)
    rt = cluster.run_pod("rt", rt_sla(50))
    pod_dir = (CPU / rt.cgroups_path.lstrip("/")).parent
    assert cluster.cgroup_file(rt, "cpu", "cpu.rt_runtime_us") == "50000"
    assert budget(rt_host) == budget(pod_dir) == 50_000 + before
    remove(cluster, rt)
    assert settles(rt_host, before) == before
    # Lowered before its parent could be; containerd leaves the pod's dir (the kubelet
    # removes it): its raise given back too.
    assert budget(pod_dir) in (None, 0)


def test_plugin_restart_gives_back_what_went_away_meanwhile(
    cluster, plugins, sla_plugin_argv, rt_host
):
    first = start_plugin(cluster, plugins, sla_plugin_argv, 1)
    cluster.run_pod("plain", {})
    before = budget(rt_host)
    kept = cluster.run_pod("kept", rt_sla(30))
    gone = cluster.run_pod("gone", rt_sla(500))
    assert budget(rt_host) == 530_000 + before
    first.stop()
    remove(cluster, gone)  # the plugin is down: nobody gives its budget back now
    time.sleep(1)
    assert budget(rt_host) == 530_000 + before
    second = start_plugin(cluster, plugins, sla_plugin_argv, 2)
    # One RT pod live: exactly its budget stays.
    assert settles(rt_host, 30_000 + before) == 30_000 + before
    second.stop()
    remove(cluster, kept)
    third = start_plugin(cluster, plugins, sla_plugin_argv, 3)
    assert settles(rt_host, before) == before  # none live: all of it given back
    print("evidence: plugin log:", *third.wait_output(r"RT budget given back"))
    # The budget is available: with the 530 ms left behind (and the empty pod cgroup of
    # "gone" still holding 500 ms) the kernel could not hold this one.
    big = cluster.run_pod("big", rt_sla(600))
    assert cluster.cgroup_file(big, "cpu", "cpu.rt_runtime_us") == "600000"
