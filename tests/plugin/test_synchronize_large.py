"""Synchronize on a node of many containers stays one short answer: the containers created
unenforced are named one line each only up to `unenforced.NAMED` (then one line says how
many more; the metric counts and `nri-sla status` lists every one), and the drift watch's
pass inside it reads back at most `watch.SYNC_READBACK` containers (the next periodic pass
reads the others)."""

from __future__ import annotations

import gc
import logging

import pytest

from nri_plugin.config.values import WatchConfig
from nri_plugin.enforce.plan_writes import cgroup_writes
from nri_plugin.nri.pb import nri_pb2 as pb
from nri_plugin.ops.metrics import Metrics
from nri_plugin.plugin import SlaPlugin, restore, unenforced, watch
from nri_plugin.simulated.runtime import make_container, make_pod, make_resources
from tests.support.cgroups import CgroupTree
from tests.support.plugin_helpers import make_node

HARD = "enforcement: hard\nmemory: {max: 1Gi}"


def running(count: int, sla: str, prefix: str = "p") -> tuple[list, list]:
    pods, containers = [], []
    for i in range(count):
        pod = make_pod(f"{prefix}{i:03d}", annotations={"sla.nri.io/pod": sla})
        pods.append(pod)
        containers.append(
            make_container(
                pod, "app", state=pb.CONTAINER_RUNNING, resources=make_resources(cpu_shares=102)
            )
        )
    return pods, containers


def test_many_created_unenforced_are_summarised_and_all_in_the_status(caplog):
    metrics = Metrics()
    plugin = SlaPlugin(make_node(2), metrics)
    more = 8
    pods, containers = running(unenforced.NAMED + more, HARD)
    with caplog.at_level(logging.INFO, logger="nri_sla.plugin"):
        plugin.synchronize(pods, containers)
        plugin.restorer.restore()
        named = [
            r.fields["container"] for r in caplog.records if r.getMessage() == "created unenforced"
        ]
        (rest,) = [r.fields for r in caplog.records if r.getMessage() == "created unenforced, more"]
        summary = [m for m in caplog.messages if m.startswith("synchronized:")]
        caplog.clear()
        plugin.synchronize(pods, containers)  # a reconnect: nothing new to say
        plugin.restorer.restore()
        again = [m for m in caplog.messages if m.startswith("created unenforced")]
    everyone = {c.id for c in containers}
    assert len(named) == unenforced.NAMED and set(named) <= everyone
    assert rest == {"containers": more, "named": unenforced.NAMED, "see": "nri-sla status"}
    assert summary[-1].endswith(f", {len(containers)} created unenforced")
    assert again == []
    assert metrics.value("nri_sla_unenforced_containers_total") == len(containers)
    listed = plugin.status(1.0)["unenforced"]
    assert {u["id"] for u in listed} == everyone
    assert listed[0] == {
        "id": containers[0].id,
        "namespace": "default",
        "pod": "p000",
        "container": "app",
    }
    assert all(plugin.registry.get(c.id).unenforced for c in containers)  # the registry's
    # Gone from the runtime: gone from the status.
    plugin.synchronize(pods[1:], containers[1:])
    plugin.restorer.restore()
    assert {u["id"] for u in plugin.status(1.0)["unenforced"]} == everyone - {containers[0].id}
    # Removed between two Synchronizes: gone at once, with its entry.
    plugin.remove_container(pods[1], containers[1])
    assert {u["id"] for u in plugin.status(1.0)["unenforced"]} == everyone - {
        containers[0].id,
        containers[1].id,
    }


def test_the_pass_inside_synchronize_reads_back_a_bounded_number(v2_tree: CgroupTree, monkeypatch):
    """Drift while disconnected in three hard containers, the in-sync read-back bounded to
    two: the answer repairs two, the next periodic pass the third."""
    monkeypatch.setattr(watch, "SYNC_READBACK", 2)
    node = make_node(2, v2_tree, watch=WatchConfig(interval=30))
    plugin = SlaPlugin(node)
    pods, containers = running(3, HARD)
    for pod, ctr in zip(pods, containers, strict=True):
        ctr.state = pb.CONTAINER_CREATED
        answer = plugin.create_container(pod, ctr)
        ctr.annotations.update(answer.adjustment.annotations)  # the runtime keeps them
        cgroup = v2_tree.root / ctr.linux.cgroups_path.lstrip("/")
        cgroup.mkdir(parents=True)
        for write in cgroup_writes(plugin.registry.get(ctr.id).current_plan, "all", False):
            (cgroup / write.file).write_text(write.value)  # what runc wrote
        plugin.start_container(pod, ctr)
        ctr.state = pb.CONTAINER_RUNNING
        (cgroup / "memory.max").write_text("max")  # then drift, while disconnected
    plugin.synchronize(pods, containers)
    in_sync = {u.container_id for u in plugin.restorer.restore()}
    later = {u.container_id for u in plugin.drift_pass()}
    everyone = {c.id for c in containers}
    assert len(in_sync) == 2 and in_sync < everyone
    assert everyone - in_sync <= later  # the periodic pass repairs the third


def test_synchronize_pauses_the_collector_and_leaves_it_as_it_was(monkeypatch):
    """Off while the handler runs (it makes objects that all stay), on again when it
    ends, also when it fails; a collector someone else turned off stays off."""
    plugin = SlaPlugin(make_node(2), Metrics())
    pods, containers = running(4, HARD)
    seen = []
    report = plugin.restorer.unenforced.report

    def spying(*args, **kwargs):
        seen.append(gc.isenabled())
        return report(*args, **kwargs)

    monkeypatch.setattr(plugin.restorer.unenforced, "report", spying)
    assert gc.isenabled()
    plugin.synchronize(pods, containers)
    plugin.restorer.restore()
    assert seen == [False] and gc.isenabled()

    def failing(*args, **kwargs):
        raise OSError("no inventory")

    monkeypatch.setattr(restore, "restore_node", failing)
    plugin.synchronize(pods, containers)
    with pytest.raises(OSError):
        plugin.restorer.restore()
    assert gc.isenabled()
    gc.disable()
    try:
        monkeypatch.undo()
        plugin.synchronize(pods, containers)
        plugin.restorer.restore()
        assert not gc.isenabled()
    finally:
        gc.enable()
