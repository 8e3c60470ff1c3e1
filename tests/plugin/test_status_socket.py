"""The status document from a served plugin, through the real status socket: read now on
the plugin's event loop, side-effect free (no drift logged, counted or repaired)."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from pathlib import Path

from nri_plugin.commands.status import render
from nri_plugin.config.values import WatchConfig
from nri_plugin.ops.metrics import Metrics
from nri_plugin.ops.statussocket import StatusServer, read_status
from nri_plugin.simulated.runtime import make_container, make_pod
from tests.support.plugin_helpers import guaranteed, make_node, plugin_session


def test_status_reads_the_watched_containers_now(tmp_path, v1_tree):
    metrics = Metrics()
    node = make_node(1, v1_tree, watch=WatchConfig(interval=30))
    run_dir = Path(tempfile.mkdtemp(prefix="nri-sla-", dir="/tmp"))  # a short socket path
    path = str(run_dir / "status.sock")

    async def scenario():
        async with plugin_session(node, tmp_path, metrics=metrics) as (_, session, plugin):
            pod = make_pod(
                "web-0",
                namespace="shop",
                annotations={"sla.nri.io/container.app": "cpu: {limit: 2}"},
            )
            ctr = make_container(pod, "app", resources=guaranteed(4))
            await session.create_container(pod, ctr)
            dirs = v1_tree.add_cgroup(ctr.linux.cgroups_path)
            node.write_plan(
                plugin.registry.get(ctr.id).current_plan, ctr.linux.cgroups_path, scope="runtime"
            )
            await session.start_container(pod, ctr)
            (dirs["cpu"] / "cpu.cfs_quota_us").write_text("50000")
            (dirs["cpu"] / "cpu.stat").write_text(
                "nr_periods 400\nnr_throttled 100\nthrottled_time 2000000000\n"
            )
            with StatusServer(path, lambda: plugin.status(5.0)):
                return await asyncio.to_thread(read_status, path)

    try:
        doc = asyncio.run(asyncio.wait_for(scenario(), 30))
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    assert doc["registered"] is True and doc["interval"] == 30
    (row,) = doc["containers"]
    assert (row["namespace"], row["pod"], row["container"]) == ("shop", "web-0", "app")
    assert row["sla"] == "hard cpu=2" and row["state"] == "watched" and row["drifted"] == 1
    quota = {s["file"]: s for s in row["settings"]}["cpu.cfs_quota_us"]
    assert quota == {
        "controller": "cpu",
        "file": "cpu.cfs_quota_us",
        "via": "runtime",
        "expected": "200000",
        "actual": "50000",
        "drifted": True,
    }
    assert row["cpu"] == {"periods": 400, "throttled": 100, "throttled_seconds": 2.0}
    assert row["throttled_ratio"] is None  # no pass yet: no interval to measure over
    # Reading the status is not the watch: nothing counted, logged or repaired.
    assert metrics.value("nri_sla_drift_detected_total", kind="cpu") == 0
    assert "shop/web-0" in render(doc)
