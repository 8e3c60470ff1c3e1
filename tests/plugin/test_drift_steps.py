"""The periodic drift pass in steps (`watch.PASS_STEP` containers each, the service's
loop serving requests between them): a container removed before its step is not read, one
created meanwhile waits for the next pass, none is read twice; drift in any step is
logged, counted and repaired; a pass closed half-way leaves the last report as it was."""

from __future__ import annotations

import logging

from nri_plugin.config.values import WatchConfig
from nri_plugin.ops.metrics import Metrics
from nri_plugin.plugin import SlaPlugin, watch
from nri_plugin.simulated.runtime import make_container, make_pod
from tests.support.cgroups import CgroupTree
from tests.support.plugin_helpers import guaranteed, make_node

HARD = "enforcement: hard\ncpu: {limit: 2, period: 100ms}\nmemory: {max: 1Gi}"
COUNT = 2 * watch.PASS_STEP + 5  # three steps of the watch, the last one short


def start(plugin: SlaPlugin, tree: CgroupTree, name: str):
    """One started SLA container whose cgroup holds what runc and nri-sla wrote."""
    pod = make_pod(name, annotations={"sla.nri.io/pod": HARD})
    ctr = make_container(pod, "app", resources=guaranteed(4))
    plugin.create_container(pod, ctr)
    dirs = tree.add_cgroup(ctr.linux.cgroups_path)
    plan = plugin.registry.get(ctr.id).current_plan
    assert plugin.node.write_plan(plan, ctr.linux.cgroups_path, scope="runtime") == []
    plugin.start_container(pod, ctr)
    return pod, ctr, dirs


def setup(tree: CgroupTree) -> tuple[SlaPlugin, Metrics, list]:
    metrics = Metrics()
    plugin = SlaPlugin(make_node(1, tree, watch=WatchConfig(interval=30)), metrics)
    started = [start(plugin, tree, f"p{i:03d}") for i in range(COUNT)]
    return plugin, metrics, started


def read_back(plugin: SlaPlugin) -> list[str]:
    return [report.id for report in plugin.watch.last.containers]


def passes(metrics: Metrics) -> float:
    return metrics.value("nri_sla_request_seconds_count", event="DriftWatch") or 0.0


def test_a_container_removed_mid_pass_is_skipped_and_a_new_one_waits(v1_tree):
    plugin, metrics, started = setup(v1_tree)
    order = [e.id for e in plugin.registry.watched()]
    steps = plugin.drift_steps()
    next(steps)  # the CPU pool's cpusets
    next(steps)  # the first PASS_STEP containers read back
    by_id = {ctr.id: (pod, ctr) for pod, ctr, _ in started}
    read, later = order[0], order[-1]
    plugin.remove_container(*by_id[read])  # read already: its report stays
    plugin.remove_container(*by_id[later])  # not read yet: never read
    _, new, _ = start(plugin, v1_tree, "zz-new")  # after the pass began: the next one's
    rest = list(steps)
    assert len(rest) == 2  # the two other steps of the watch
    ids = read_back(plugin)
    assert len(ids) == len(set(ids)) == COUNT - 1  # none twice, none lost
    assert set(ids) == set(order) - {later} and new.id not in ids
    assert passes(metrics) == 1
    assert plugin.drift_pass() == []
    assert set(read_back(plugin)) == set(order) - {read, later} | {new.id}


def test_drift_in_every_step_is_logged_counted_and_repaired(v1_tree, caplog):
    caplog.set_level(logging.WARNING, logger="nri_sla.watch")
    plugin, metrics, started = setup(v1_tree)
    order = [e.id for e in plugin.registry.watched()]
    dirs = {ctr.id: d for _, ctr, d in started}
    drifted = (order[0], order[watch.PASS_STEP + 1], order[-1])  # one in each step
    for container_id in drifted:
        (dirs[container_id]["cpu"] / "cpu.cfs_quota_us").write_text("100000")
    steps = list(plugin.drift_steps())
    per_step = [[u.container_id for u in step] for step in steps]
    assert per_step == [[], [drifted[0]], [drifted[1]], [drifted[2]]]
    assert all(u.linux.resources.cpu.quota.value == 200_000 for s in steps for u in s)
    assert metrics.value("nri_sla_drift_detected_total", kind="cpu") == 3
    assert [r.fields["id"] for r in caplog.records if r.getMessage() == "drift"] == [
        container_id[:12] for container_id in drifted
    ]


def test_a_pass_closed_half_way_leaves_the_last_report(v1_tree):
    plugin, metrics, _ = setup(v1_tree)
    plugin.drift_pass()
    before = plugin.watch.last
    steps = plugin.drift_steps()
    next(steps)
    next(steps)
    steps.close()  # what the service does when the connection ends mid-pass
    assert plugin.watch.last is before and passes(metrics) == 1
    assert plugin.drift_pass() == [] and len(read_back(plugin)) == COUNT
    assert passes(metrics) == 2
