"""GPUs vanishing from and appearing in the inventory while containers hold GPUs.

The node reads its GPUs through the fake NVML of nri_plugin/simulated/hardware.py (over a
fake DGX-like sysfs); taking a GPU out of its list is a GPU falling off the bus (NVML
then numbers the others anew). The plugin runs over a real unix socket to the runtime
simulator and rescans as its Periodic and every Synchronize do (SlaPlugin.rescan_inventory).
"""

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
    NVML_ERROR_LIBRARY_NOT_FOUND,
    NVML_ERROR_UNKNOWN,
    FakeNvml,
    build_sysfs,
    dgx_like_gpus,
    dgx_like_pci,
    mig_box_gpus,
)
from nri_plugin.simulated.runtime import PluginCallError, make_container, make_pod
from nri_plugin.topology.cpus import read_topology
from nri_plugin.topology.inventory import InventoryReader, load_inventory

CONFIG = NodeConfig(
    permissions=Permissions(gpus=("*",), ungranted_gpus=("*",),
                            exceed_runtime_limits=("*",)),
    pod_caps=PodCaps(gpus=Cap(100, percent=True)))


def nvml_node(tmp_path, nvml: FakeNvml) -> NodeState:
    sysfs = build_sysfs(tmp_path / "sys", nodes=2, cores_per_node=8, threads=2,
                        pci=dgx_like_pci())

    def read():
        return load_inventory("nvml", sysfs_root=sysfs, nvml=nvml)
    return NodeState(CONFIG, 2, allocator=Allocator(read_topology(sysfs), read()),
                     record_key=RECORD_KEY, read_inventory=read)


def uuids(resp) -> set[str]:
    return {d.name.removeprefix("nvidia.com/gpu=") for d in resp.adjust.CDI_devices}


def test_gpus_vanishing_and_appearing_while_held(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="nri_sla.plugin")
    nvml = FakeNvml(dgx_like_gpus())
    metrics = Metrics()
    node = nvml_node(tmp_path, nvml)

    def gauge(name):
        return metrics.value(f"nri_sla_{name}")

    async def gpus(session, name, count):
        pod = make_pod(name, annotations={
            "sla.nri.io/pod": f"gpu: {{count: {count}, align: false}}"})
        ctr = make_container(pod, "c")
        await session.run_pod_sandbox(pod)
        try:
            return pod, ctr, uuids(await session.create_container(pod, ctr))
        except PluginCallError as exc:
            return pod, ctr, exc.message

    async def scenario():
        seen = {}
        async with plugin_session(node, tmp_path, metrics=metrics) as (sim, session, plugin):
            a_pod, a, seen["a"] = await gpus(session, "a", 2)
            gone = next(g for g in nvml.gpus if g.uuid in seen["a"])
            nvml.gpus.remove(gone)  # falls off the bus while "a" holds it
            plugin.rescan_inventory()
            seen["missing"] = (gauge("gpus_missing"), gauge("gpus_in_use"))
            _p, _c, seen["b"] = await gpus(session, "b", 7)  # 7 listed, "a" holds one
            c_pod, c, seen["c"] = await gpus(session, "c", 6)
            plugin.rescan_inventory()  # nothing new: no second "GPU vanished"
            # Synchronize while it is gone: "a"'s record still counts, GPU included.
            stored = list(sim.state.containers.values())
            plugin.synchronize(list(sim.state.pods.values()), stored)
            seen["synced"] = (gauge("gpus_missing"), gauge("gpus_in_use"))
            await session.stop_container(c_pod, c)
            nvml.gpus.append(gone)  # back on the bus; "a" still holds it
            plugin.rescan_inventory()
            _p, _c, seen["d"] = await gpus(session, "d", 7)
            await session.stop_container(a_pod, a)  # now it is free again
            _p, _c, seen["e"] = await gpus(session, "e", 8)
            extra = replace(dgx_like_gpus()[0], uuid="GPU-e0000000-0000-0000-0000-000000000009",
                            bus="00000000:C1:00.0", minor=8)
            nvml.gpus.append(extra)  # a ninth GPU appears
            plugin.rescan_inventory()
            _p, _c, seen["f"] = await gpus(session, "f", 1)
            seen["end"] = (gauge("gpus_missing"), gauge("gpus_in_use"))
        return gone.uuid, extra.uuid, seen

    gone, extra, seen = asyncio.run(asyncio.wait_for(scenario(), 30))
    assert gone in seen["a"]
    (vanished,) = [r for r in caplog.records if r.getMessage() == "GPU vanished"]
    assert vanished.fields["gpu"] == gone and vanished.fields["holders"]
    # Still held by "a", never handed out: 7 listed GPUs, one of them "a"'s.
    assert seen["missing"] == (1, 2)
    assert "free" in seen["b"]
    assert len(seen["c"]) == 6 and gone not in seen["c"] and not seen["c"] & seen["a"]
    assert seen["synced"] == (1, 8)  # restore kept "a"'s vanished GPU
    # Back while held: still "a"'s (the 6 free ones went to "c" and back)...
    assert any(r.getMessage() == "GPU back" and r.fields["gpu"] == gone
               for r in caplog.records)
    assert "free" in seen["d"]
    # ... and offered once "a" let go: all 8 again.
    assert len(seen["e"]) == 8 and gone in seen["e"]
    assert any(r.getMessage() == "GPU appeared" and r.fields["gpu"] == extra
               for r in caplog.records)
    assert seen["f"] == {extra}
    assert seen["end"] == (0, 9)


def test_a_failed_rescan_changes_nothing(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="nri_sla.plugin")
    nvml = FakeNvml(dgx_like_gpus())
    node = nvml_node(tmp_path, nvml)
    from nri_plugin.plugin import SlaPlugin

    plugin = SlaPlugin(node)
    nvml.fail_init = 9  # the driver is being reloaded
    plugin.rescan_inventory()
    assert len(node.allocator.inventory.gpus) == 8
    assert any(r.getMessage() == "GPU inventory rescan failed" for r in caplog.records)


@pytest.mark.parametrize(("interval", "runs"), [(60.0, 1), (0.0, 0)])
def test_rescan_interval_becomes_a_periodic_of_the_service(tmp_path, interval, runs):
    node = nvml_node(tmp_path, FakeNvml(dgx_like_gpus()))
    node.config = replace(CONFIG, gpu=GpuConfig(rescan_interval=interval))
    plugin, options = build_service(node, Metrics(), socket=str(tmp_path / "s"))
    rescans = [p for p in options.periodic if p.run == plugin.rescan_inventory]
    assert [p.interval for p in rescans] == [interval] * runs



MIG_BOX_PCI = [("0000:07:00.0", 0x030200, 0), ("0000:0f:00.0", 0x030200, 0)]


@pytest.mark.parametrize("fault", ["one GPU's call", "the whole library"])
def test_nvml_failing_after_it_worked_never_offers_a_mig_gpu_whole(tmp_path, fault):
    """Before: one NVML error in a rescan dropped the inventory to sysfs, where GPU 0 lost
    its MIG flag; it was then handed out whole while "a" held one of its MIG instances."""
    nvml = FakeNvml(mig_box_gpus())
    sysfs = build_sysfs(tmp_path / "sys", nodes=1, cores_per_node=8, threads=2,
                        pci=MIG_BOX_PCI)
    reader = InventoryReader("auto", sysfs_root=sysfs, nvml=nvml)
    node = NodeState(CONFIG, 2, allocator=Allocator(read_topology(sysfs), reader.read()),
                     record_key=RECORD_KEY, read_inventory=reader.read)
    mig_gpu, whole_gpu = nvml.gpus

    async def ask(session, name, sla):
        pod = make_pod(name, annotations={"sla.nri.io/pod": sla})
        await session.run_pod_sandbox(pod)
        try:
            resp = await session.create_container(pod, make_container(pod, "c"))
        except PluginCallError as exc:
            return exc.message
        return {d.name.partition("=")[2] for d in resp.adjust.CDI_devices}

    async def scenario():
        async with plugin_session(node, tmp_path) as (_sim, session, plugin):
            held = await ask(session, "a", "gpu: {mig: 1g.10gb, align: false}")
            if fault == "one GPU's call":
                whole_gpu.errors = {"nvmlDeviceGetUUID": NVML_ERROR_UNKNOWN}
            else:
                nvml.fail_init = NVML_ERROR_LIBRARY_NOT_FOUND
            plugin.rescan_inventory()
            both = await ask(session, "b", "gpu: {count: 2, align: false}")
            one = await ask(session, "c", "gpu: {count: 1, align: false}")
            mig = await ask(session, "d", "gpu: {mig: 1g.10gb, align: false}")
            return held, both, one, mig

    held, both, one, mig = asyncio.run(asyncio.wait_for(scenario(), 30))
    assert held == {mig_gpu.migs[2].uuid}
    assert isinstance(both, str) and "free: none" in both  # GPU 0 is never whole
    assert isinstance(one, str) and "free: none" in one  # GPU 1 is unknown: not offered
    inventory = node.allocator.inventory
    assert inventory.source == "nvml" and inventory.gpus[0].mig_enabled
    assert mig_gpu.migs[2].uuid in node.allocator.migs_in_use()  # still "a"'s
    if fault == "one GPU's call":  # GPU 0 still reads well: its other instance is offered
        assert mig == {mig_gpu.migs[3].uuid}
    else:  # nothing reads: no new placement on any GPU
        assert isinstance(mig, str) and "free MIG instances: none" in mig
