"""GPU health through the plugin: NVML XID events and lost GPUs (the fake NVML of
nri_plugin/simulated/hardware.py) reach the allocator, the metrics and the status
document; the plugin runs over a real unix socket to the runtime simulator."""

from __future__ import annotations

import asyncio
import logging

import pytest

from nri_plugin.config.values import GpuConfig, NodeConfig, Permissions
from nri_plugin.core.nodestate import NodeState
from nri_plugin.ops.metrics import Metrics
from nri_plugin.plan.allocator import Allocator
from nri_plugin.plan.rt_budget import RtBudget
from nri_plugin.plugin.service import build_service
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
from nri_plugin.topology.watched import WatchedInventory
from nri_plugin.value import replace
from tests.support.plugin_helpers import RECORD_KEY, plugin_session

CONFIG = NodeConfig(permissions=Permissions(gpus=("*",), exceed_runtime_limits=("*",)))


def watched_node(tmp_path, nvml: FakeNvml) -> NodeState:
    sysfs = build_sysfs(tmp_path / "sys", nodes=2, cores_per_node=8, threads=2, pci=dgx_like_pci())
    gpus = WatchedInventory(
        InventoryReader("auto", sysfs_root=sysfs, nvml=nvml), GpuHealthMonitor(nvml)
    )
    return NodeState(
        CONFIG,
        2,
        allocator=Allocator(read_topology(sysfs), gpus.read()),
        rt_budget=RtBudget(0.5),
        record_key=RECORD_KEY,
        gpus=gpus,
    )


async def ask(session, name, sla, granted):
    """A pod whose device plugin granted GPUs `granted` (UUIDs): its warnings, or the
    refusal's message."""
    pod = make_pod(name, annotations={"sla.nri.io/pod": sla})
    await session.run_pod_sandbox(pod)
    ctr = make_container(pod, "c", cdi_devices=[f"nvidia.com/gpu={u}" for u in granted])
    try:
        resp = await session.create_container(pod, ctr)
    except PluginCallError as exc:
        return exc.message
    return resp.adjust.annotations.get("sla.nri.io/warnings", "")


def test_unhealthy_and_unknown_gpus_are_reported_and_fail_a_hard_sla(tmp_path, caplog):
    """Health reaches the metrics, the status document and the log; a hard SLA granted a
    GPU that needs a reset is refused, a soft one warned; a GPU NVML could not read this
    time only warns."""
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
            seen["a"] = await ask(session, "a", "gpu: {count: 2}", uuids[0:2])
            nvml.queue_xid(nvml.gpus[0], 79)  # a held GPU fell off the bus
            nvml.queue_xid(nvml.gpus[7], 48)  # a free one: double-bit ECC error
            nvml.queue_xid(nvml.gpus[6], 13)  # an application fault on a free one
            plugin.poll_gpu_health()
            nvml.gpus[5].errors = {"nvmlDeviceGetUUID": NVML_ERROR_UNKNOWN}
            plugin.rescan_inventory()
            seen["gauges"] = [healthy(i) for i in range(8)]
            seen["hard"] = await ask(session, "b", "gpu: {count: 1}", uuids[7:8])
            seen["soft"] = await ask(session, "c", "gpu: {count: 1}\nenforcement: soft", uuids[7:8])
            seen["unknown"] = await ask(session, "d", "gpu: {count: 1}", uuids[5:6])
            seen["fine"] = await ask(session, "e", "gpu: {count: 1}", uuids[6:7])
            seen["status"] = await asyncio.to_thread(plugin.status, 5)  # as the socket does
            return seen

    seen = asyncio.run(asyncio.wait_for(scenario(), 30))
    assert seen["a"] == ""
    expected = [1.0] * 8
    expected[0], expected[7], expected[5] = 0.0, 0.0, -1.0
    assert seen["gauges"] == expected
    assert "gpu: granted GPU 7 is unhealthy (XID 48) and needs a reset" in seen["hard"]
    assert "gpu: granted GPU 7 is unhealthy (XID 48)" in seen["soft"]
    assert "gpu: granted GPU 5 is unknown" in seen["unknown"]
    assert seen["fine"] == ""  # XID 13 is the application's fault
    gpus = {g["index"]: g for g in seen["status"]["gpus"]}
    assert (gpus[7]["health"], gpus[7]["reason"]) == ("unhealthy", "XID 48")
    assert (gpus[5]["health"], gpus[5]["mig"]) == ("unknown", "unknown")
    assert gpus[6]["health"] == "healthy"
    changed = sorted(
        (r.fields["index"], r.fields["health"])
        for r in caplog.records
        if r.getMessage() == "GPU health changed"
    )
    assert changed == sorted([(0, "unhealthy"), (7, "unhealthy"), (5, "unknown")])


@pytest.mark.parametrize(("interval", "runs"), [(10.0, 1), (0.0, 0)])
def test_health_interval_becomes_a_periodic_of_the_service(tmp_path, interval, runs):
    node = watched_node(tmp_path, FakeNvml(dgx_like_gpus()))
    node.config = replace(CONFIG, gpu=GpuConfig(health_interval=interval))
    plugin, options = build_service(node, Metrics(), socket=str(tmp_path / "s"))
    polls = [p for p in options.periodic if p.run == plugin.poll_gpu_health]
    assert [p.interval for p in polls] == [interval] * runs
