"""GPU health through the plugin: NVML XID events and lost GPUs (the fake NVML of
nri_plugin/simulated/hardware.py) reach the allocator, the metrics and the status
document; the plugin runs over a real unix socket to the runtime simulator."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace

import pytest
from plugin_helpers import RECORD_KEY, plugin_session

from nri_plugin.commands.run import build_service
from nri_plugin.config import Cap, GpuConfig, NodeConfig, Permissions, PodCaps
from nri_plugin.core import NodeState
from nri_plugin.metrics import Metrics
from nri_plugin.plan.allocator import Allocator
from nri_plugin.simulated.hardware import (
    NVML_ERROR_UNKNOWN,
    FakeNvml,
    build_sysfs,
    dgx_like_gpus,
    dgx_like_pci,
)
from nri_plugin.simulated.runtime import PluginCallError, make_container, make_pod
from nri_plugin.topology.cpus import read_topology
from nri_plugin.topology.health_monitor import GpuHealthMonitor
from nri_plugin.topology.inventory import InventoryReader

CONFIG = NodeConfig(
    permissions=Permissions(gpus=("*",), ungranted_gpus=("*",),
                            exceed_runtime_limits=("*",)),
    pod_caps=PodCaps(gpus=Cap(100, percent=True)))


def watched_node(tmp_path, nvml: FakeNvml) -> NodeState:
    sysfs = build_sysfs(tmp_path / "sys", nodes=2, cores_per_node=8, threads=2,
                        pci=dgx_like_pci())
    reader = InventoryReader("auto", sysfs_root=sysfs, nvml=nvml)
    monitor = GpuHealthMonitor(nvml)
    inventory = reader.read()
    monitor.track(inventory)
    return NodeState(CONFIG, 2, allocator=Allocator(read_topology(sysfs), inventory),
                     record_key=RECORD_KEY, read_inventory=reader.read,
                     health_monitor=monitor)


async def ask(session, name, sla):
    pod = make_pod(name, annotations={"sla.nri.io/pod": sla})
    await session.run_pod_sandbox(pod)
    try:
        resp = await session.create_container(pod, make_container(pod, "c"))
    except PluginCallError as exc:
        return exc.message
    return {d.name.partition("=")[2] for d in resp.adjust.CDI_devices}


def test_unhealthy_and_unknown_gpus_are_never_chosen_and_are_reported(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="nri_sla.topology.health")
    nvml = FakeNvml(dgx_like_gpus())
    node = watched_node(tmp_path, nvml)
    metrics = Metrics()
    uuids = [g.uuid for g in nvml.gpus]

    def healthy(i):
        return metrics.value("nri_sla_gpu_healthy", gpu=uuids[i], index=str(i))

    async def scenario():
        seen = {}
        async with plugin_session(node, tmp_path, metrics=metrics) as (_sim, session, plugin):
            seen["a"] = await ask(session, "a", "gpu: {count: 2, align: false}")
            held = sorted(uuids.index(u) for u in seen["a"])
            nvml.queue_xid(nvml.gpus[held[0]], 79)  # a held GPU fell off the bus
            nvml.queue_xid(nvml.gpus[7], 48)  # a free one: double-bit ECC error
            nvml.queue_xid(nvml.gpus[6], 13)  # an application fault on a free one
            plugin.poll_gpu_health()
            nvml.gpus[5].errors = {"nvmlDeviceGetUUID": NVML_ERROR_UNKNOWN}
            plugin.rescan_inventory()
            seen["gauges"] = [healthy(i) for i in range(8)]
            seen["b"] = await ask(session, "b", "gpu: {count: 4, align: false}")
            seen["c"] = await ask(session, "c", "gpu: {count: 1, align: false}")
            seen["named"] = await ask(session, "d", "gpu: {ids: ['7'], align: false}")
            seen["status"] = await asyncio.to_thread(plugin.status, 5)  # as the socket does
            return held, seen

    held, seen = asyncio.run(asyncio.wait_for(scenario(), 30))
    expected = [1.0] * 8
    expected[held[0]], expected[7], expected[5] = 0.0, 0.0, -1.0
    assert seen["gauges"] == expected
    # 8 GPUs: 2 held ("a" keeps its unhealthy one), 7 and 5 not offered: 4 left
    offered = {uuids[i] for i in range(8) if i not in (*held, 5, 7)}
    assert seen["b"] == offered
    assert isinstance(seen["c"], str) and "free: none" in seen["c"]
    assert "gpu.ids: GPU 7 is unhealthy (XID 48)" in seen["named"]
    gpus = {g["index"]: g for g in seen["status"]["gpus"]}
    assert (gpus[7]["health"], gpus[7]["reason"]) == ("unhealthy", "XID 48")
    assert (gpus[5]["health"], gpus[5]["mig"]) == ("unknown", "unknown")
    assert gpus[6]["health"] == "healthy"  # XID 13 is the application's fault
    changed = sorted((r.fields["index"], r.fields["health"]) for r in caplog.records
                     if r.getMessage() == "GPU health changed")
    assert changed == sorted([(held[0], "unhealthy"), (7, "unhealthy"), (5, "unknown")])


@pytest.mark.parametrize(("interval", "runs"), [(10.0, 1), (0.0, 0)])
def test_health_interval_becomes_a_periodic_of_the_service(tmp_path, interval, runs):
    node = watched_node(tmp_path, FakeNvml(dgx_like_gpus()))
    node.config = replace(CONFIG, gpu=GpuConfig(health_interval=interval))
    plugin, options = build_service(node, Metrics(), socket=str(tmp_path / "s"))
    polls = [p for p in options.periodic if p.run == plugin.poll_gpu_health]
    assert [p.interval for p in polls] == [interval] * runs
