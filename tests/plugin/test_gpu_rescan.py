"""GPUs vanishing from and appearing in the inventory while containers hold GPUs.

The node reads its GPUs through the fake NVML of nri_plugin/simulated/hardware.py (over a
fake DGX-like sysfs); taking a GPU out of its list is a GPU falling off the bus (NVML
then numbers the others anew). The plugin runs over a real unix socket to the runtime
simulator and rescans as its Periodic and every Synchronize do (SlaPlugin.rescan_inventory).
"""

from __future__ import annotations

import asyncio
import json
import logging
from types import SimpleNamespace

import pytest

from nri_plugin.config.values import GpuConfig, NodeConfig, Permissions
from nri_plugin.core.nodestate import NodeState
from nri_plugin.ops.metrics import Metrics
from nri_plugin.plan.allocator import Allocator
from nri_plugin.plan.rt_budget import RtBudget
from nri_plugin.plugin.service import build_service
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
from nri_plugin.topology.watched import WatchedInventory
from nri_plugin.value import replace
from tests.support.plugin_helpers import RECORD_KEY, plugin_session

CONFIG = NodeConfig(permissions=Permissions(gpus=("*",), exceed_runtime_limits=("*",)))


def nvml_node(tmp_path, nvml: FakeNvml) -> NodeState:
    sysfs = build_sysfs(tmp_path / "sys", nodes=2, cores_per_node=8, threads=2, pci=dgx_like_pci())

    # each read a fresh one: no last good read kept (tests/topology covers keeping it)
    fresh = SimpleNamespace(read=lambda: load_inventory("nvml", sysfs_root=sysfs, nvml=nvml))
    return NodeState(
        CONFIG,
        2,
        allocator=Allocator(read_topology(sysfs), fresh.read()),
        rt_budget=RtBudget(0.5),
        record_key=RECORD_KEY,
        gpus=WatchedInventory(fresh),
    )


def uuids(resp) -> set[str]:
    """The GPUs the container's record holds (its grant)."""
    return set(
        json.loads(resp.adjust.annotations["sla.nri.io/applied"])["placement_record"]["gpus"]
    )


def test_gpus_vanishing_and_appearing_while_held(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="nri_sla.plugin")
    nvml = FakeNvml(dgx_like_gpus())
    metrics = Metrics()
    node = nvml_node(tmp_path, nvml)

    def gauge(name):
        return metrics.value(f"nri_sla_{name}")

    async def gpus(session, name, granted):
        """A pod the kubelet granted the GPUs `granted` (UUIDs) and whose SLA asks them."""
        pod = make_pod(
            name, annotations={"sla.nri.io/pod": f"gpu: {{count: {len(granted)}, align: false}}"}
        )
        ctr = make_container(pod, "c", cdi_devices=[f"nvidia.com/gpu={u}" for u in granted])
        await session.run_pod_sandbox(pod)
        try:
            return pod, ctr, uuids(await session.create_container(pod, ctr))
        except PluginCallError as exc:
            return pod, ctr, exc.message

    async def scenario():
        seen = {}
        all_gpus = [g.uuid for g in nvml.gpus]
        async with plugin_session(node, tmp_path, metrics=metrics) as (sim, session, plugin):
            a_pod, a, seen["a"] = await gpus(session, "a", all_gpus[:2])
            gone = next(g for g in nvml.gpus if g.uuid in seen["a"])
            nvml.gpus.remove(gone)  # falls off the bus while "a" holds it
            plugin.rescan_inventory()
            seen["missing"] = (gauge("gpus_missing"), gauge("gpus_in_use"))
            # a grant naming the vanished GPU matches nothing listed: refused, named
            _p, _c, seen["b"] = await gpus(session, "b", [gone.uuid])
            c_pod, c, seen["c"] = await gpus(session, "c", all_gpus[2:])
            plugin.rescan_inventory()  # nothing new: no second "GPU vanished"
            # Synchronize while it is gone: "a"'s record still counts, GPU included.
            stored = list(sim.state.containers.values())
            plugin.synchronize(list(sim.state.pods.values()), stored)
            plugin.restorer.restore()
            seen["synced"] = (gauge("gpus_missing"), gauge("gpus_in_use"))
            await session.stop_container(c_pod, c)
            nvml.gpus.append(gone)  # back on the bus; "a" still holds it
            plugin.rescan_inventory()
            seen["back"] = plugin.node.allocator.gpus_in_use()
            await session.stop_container(a_pod, a)  # now nobody holds it
            _p, _c, seen["e"] = await gpus(session, "e", all_gpus)
            extra = replace(
                dgx_like_gpus()[0],
                uuid="GPU-e0000000-0000-0000-0000-000000000009",
                bus="00000000:C1:00.0",
                minor=8,
            )
            nvml.gpus.append(extra)  # a ninth GPU appears
            plugin.rescan_inventory()
            _p, _c, seen["f"] = await gpus(session, "f", [extra.uuid])
            seen["end"] = (gauge("gpus_missing"), gauge("gpus_in_use"))
        return gone.uuid, extra.uuid, seen

    gone, extra, seen = asyncio.run(asyncio.wait_for(scenario(), 30))
    assert gone in seen["a"]
    (vanished,) = [r for r in caplog.records if r.getMessage() == "GPU vanished"]
    assert vanished.fields["gpu"] == gone and vanished.fields["holders"]
    # Still held by "a": one listed GPU and the missing one.
    assert seen["missing"] == (1, 2)
    assert f"{gone!r}, which match no GPU on this node" in seen["b"]
    assert len(seen["c"]) == 6 and gone not in seen["c"] and not seen["c"] & seen["a"]
    assert seen["synced"] == (1, 8)  # restore kept "a"'s vanished GPU
    # Back while held: still "a"'s ...
    assert any(r.getMessage() == "GPU back" and r.fields["gpu"] == gone for r in caplog.records)
    assert len(seen["back"]) == 2 and all(len(h) == 1 for h in seen["back"].values())
    # ... and a grant naming it once "a" let go holds it again.
    assert len(seen["e"]) == 8 and gone in seen["e"]
    assert any(
        r.getMessage() == "GPU appeared" and r.fields["gpu"] == extra for r in caplog.records
    )
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
def test_nvml_failing_after_it_worked_never_takes_a_mig_gpu_for_whole(tmp_path, fault):
    """Before: one NVML error in a rescan dropped the inventory to sysfs, where GPU 0 lost
    its MIG flag and counted as a whole GPU while "a" held one of its MIG instances. Now
    the last good read keeps the flag: a grant of GPU 0 is no whole GPU, "a" keeps its
    instance, and `nri-sla device-plugin` (tests/kubelet) does not advertise GPU 0."""
    nvml = FakeNvml(mig_box_gpus())
    sysfs = build_sysfs(tmp_path / "sys", nodes=1, cores_per_node=8, threads=2, pci=MIG_BOX_PCI)
    reader = InventoryReader("auto", sysfs_root=sysfs, nvml=nvml)
    node = NodeState(
        CONFIG,
        2,
        allocator=Allocator(read_topology(sysfs), reader.read()),
        rt_budget=RtBudget(0.5),
        record_key=RECORD_KEY,
        gpus=WatchedInventory(reader),
    )
    mig_gpu, whole_gpu = nvml.gpus

    async def ask(session, name, sla, granted):
        pod = make_pod(name, annotations={"sla.nri.io/pod": sla})
        await session.run_pod_sandbox(pod)
        ctr = make_container(pod, "c", cdi_devices=[f"nvidia.com/gpu={granted}"])
        try:
            await session.create_container(pod, ctr)
        except PluginCallError as exc:
            return exc.message
        return "created"

    async def scenario():
        async with plugin_session(node, tmp_path) as (_sim, session, plugin):
            held = await ask(
                session, "a", "gpu: {mig: 1g.10gb, align: false}", mig_gpu.migs[2].uuid
            )
            if fault == "one GPU's call":
                whole_gpu.errors = {"nvmlDeviceGetUUID": NVML_ERROR_UNKNOWN}
            else:
                nvml.fail_init = NVML_ERROR_LIBRARY_NOT_FOUND
            plugin.rescan_inventory()
            whole = await ask(session, "b", "gpu: {count: 1, align: false}", mig_gpu.uuid)
            return held, whole

    held, whole = asyncio.run(asyncio.wait_for(scenario(), 30))
    assert held == "created"
    assert "gpu.count: asks for 1 whole GPU; the grant has 0" in whole
    inventory = node.allocator.inventory
    assert inventory.source == "nvml" and inventory.gpus[0].mig_enabled
    assert mig_gpu.migs[2].uuid in node.allocator.migs_in_use()  # still "a"'s
    assert inventory.gpus[1].health.state == "unknown"
