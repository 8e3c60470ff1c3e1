"""The drift watch on a real cgroup v2 hierarchy: drift detected and repaired (hard) or
reported (soft), a container above memory.high shows high events, a CPU-bound one its
throttling and CPU pressure, in the metrics and the status table.

In-process (Python starts slowly under TCG): the plugin's handlers are called directly
with the simulator's messages; the container's cgroup is made as kubelet and runc make it
(cgroup_tree) and holds the adjustment's values (written as runc writes them).
"""

from __future__ import annotations

import time
import uuid

from nri_plugin.commands.status import render
from nri_plugin.config.values import NodeConfig, WatchConfig
from nri_plugin.core.nodebuild import build_node
from nri_plugin.ops.metrics import Metrics
from nri_plugin.plugin import SlaPlugin
from nri_plugin.plugin.container_metrics import ContainerCollector
from nri_plugin.simulated.runtime import make_container, make_pod, make_resources

MiB = 1 << 20


def watching_plugin() -> tuple[SlaPlugin, Metrics]:
    metrics = Metrics()
    node = build_node(NodeConfig(watch=WatchConfig(interval=30)), detect=True)
    plugin = SlaPlugin(node, metrics)
    metrics.registry.register(ContainerCollector(lambda: plugin.watch.last, 100))
    return plugin, metrics


def started(plugin: SlaPlugin, cgroup_tree, name: str, sla: str):
    """A started SLA container in a real v2 cgroup: returns (its Cgroup, the labels)."""
    pod = make_pod(name, namespace="guest", annotations={"sla.nri.io/pod": sla})
    ctr = make_container(
        pod,
        "app",
        resources=make_resources(
            cpu_shares=1024, cpu_quota=100_000, cpu_period=100_000, memory_limit=64 * MiB
        ),
    )
    rel = f"kubepods/burstable/pod{uuid.uuid4().hex[:8]}/ctr"
    ctr.linux.cgroups_path = f"/{rel}"
    plugin.create_container(pod, ctr)
    cgroup = cgroup_tree(rel)
    plan = plugin.registry.get(ctr.id).current_plan
    assert plugin.node.write_plan(plan, ctr.linux.cgroups_path, scope="runtime") == []
    plugin.start_container(pod, ctr)
    return cgroup, {"namespace": "guest", "pod": name, "container": "app"}


def test_drift_on_v2_is_repaired_in_hard_mode_and_reported_in_soft(cgroup_tree):
    plugin, metrics = watching_plugin()
    hard, _ = started(
        plugin, cgroup_tree, "hard", "cpu: {limit: 0.5}\nmemory: {max: 64Mi, high: 48Mi}\n"
    )
    soft, _ = started(
        plugin,
        cgroup_tree,
        "soft",
        "enforcement: soft\ncpu: {limit: 0.5}\nmemory: {max: 64Mi, high: 48Mi}\n",
    )
    assert plugin.drift_pass() == []
    for cgroup in (hard, soft):  # memory.high lifted, the quota halved behind our back
        cgroup.write("memory.high", "max")
        cgroup.write("cpu.max", "25000 100000")
    (update,) = plugin.drift_pass()  # hard only; soft is reported
    assert update.linux.resources.unified["memory.high"] == str(48 * MiB)
    assert update.linux.resources.cpu.quota.value == 50_000
    assert metrics.value("nri_sla_drift_detected_total", kind="memory") == 2
    assert metrics.value("nri_sla_drift_detected_total", kind="cpu") == 2
    # What runc update writes for that ContainerUpdate, on the hard container only.
    hard.write("memory.high", update.linux.resources.unified["memory.high"])
    hard.write(
        "cpu.max",
        f"{update.linux.resources.cpu.quota.value} {update.linux.resources.cpu.period.value}",
    )
    assert plugin.drift_pass() == []
    assert metrics.value("nri_sla_drift_repairs_total", kind="memory", outcome="repaired") == 1
    states = {r.pod: r.drifted for r in plugin.watch.last.containers}
    assert states == {"hard": 0, "soft": 2}
    assert soft.read("memory.high") == "max"  # soft: left as found


def test_a_container_above_memory_high_shows_high_events(cgroup_tree):
    plugin, metrics = watching_plugin()
    cgroup, who = started(plugin, cgroup_tree, "reclaimed", "memory: {max: 64Mi, high: 8Mi}\n")
    plugin.drift_pass()
    with open("/proc/sys/vm/drop_caches", "w") as f:  # the disk's pages charged anew
        f.write("3")
    reader = cgroup.spawn(["dd", "if=/dev/vda", "of=/dev/null", "bs=1M", "count=48"])
    assert reader.wait(60) == 0, reader.stderr.read() if reader.stderr else ""
    plugin.drift_pass()
    high = metrics.value("nri_sla_container_memory_events_total", event="high", **who)
    assert high is not None and high > 0, cgroup.read("memory.events")
    (row,) = [r for r in plugin.watch.look().to_json(True)["containers"] if r["pod"] == "reclaimed"]
    assert row["memory_events"]["high"] >= high
    line = next(
        x
        for x in render(plugin.watch.look().to_json(True)).splitlines()
        if x.startswith("guest/reclaimed")
    )
    assert f"high={row['memory_events']['high']}" in line


def test_a_cpu_bound_container_shows_throttling_and_pressure(cgroup_tree):
    plugin, metrics = watching_plugin()
    cgroup, who = started(plugin, cgroup_tree, "busy", "cpu: {limit: 0.05, period: 100ms}\n")
    busy = cgroup.spawn(["sh", "-c", "while :; do :; done"])
    try:
        plugin.drift_pass()
        time.sleep(2)
        plugin.drift_pass()
    finally:
        busy.kill()
        busy.wait()
    ratio = metrics.value("nri_sla_container_cpu_throttled_ratio", **who)
    assert ratio is not None and ratio > 0.5, cgroup.read("cpu.stat")
    stalled = metrics.value(
        "nri_sla_container_pressure_stalled_seconds_total", resource="cpu", kind="some", **who
    )
    assert stalled is not None and stalled > 0, cgroup.read("cpu.pressure")
    report = plugin.watch.last.containers[0]
    assert report.compliance is not None and report.compliance.cpu is not None
    assert report.compliance.cpu.throttled > 5


def test_status_of_a_v2_node_lists_psi_where_the_kernel_has_it(cgroup_tree):
    plugin, _ = watching_plugin()
    started(plugin, cgroup_tree, "idle", "cpu: {limit: 0.5}\n")
    doc = plugin.watch.look().to_json(True)
    (row,) = doc["containers"]
    assert set(row["pressure"]) >= {"cpu.some", "memory.some", "memory.full", "io.some"}
    assert all(0 <= share <= 1 for share in row["pressure"].values())
