"""The drift watch on this host's real cgroup v1 hierarchies: a CPU-bound process at its
quota shows throttling in the metrics and the status table; values changed behind
nri-sla's back are found and repaired by the kernel's read-back.

Needs root and a cgroup v1 host (skipped otherwise). The container's cgroup is made as
runc makes it (a dir in every hierarchy, the adjustment's values written) and removed
afterwards; the v2 equivalents run in the guest (tests/vm/guest/test_watch_v2.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from nri_plugin.commands.status import render
from nri_plugin.config.values import WatchConfig
from nri_plugin.enforce.cgroupdetect import detect_cgroup_facts
from nri_plugin.ops.metrics import Metrics
from nri_plugin.ops.statussocket import StatusServer, read_status
from nri_plugin.plugin.container_metrics import ContainerCollector
from nri_plugin.simulated.runtime import make_container, make_pod
from tests.support.plugin_helpers import guaranteed, make_node, plugin_session

pytestmark = pytest.mark.root
CGROUP = Path("/sys/fs/cgroup")


@pytest.fixture
def cgroups_path() -> Iterator[str]:
    """A container cgroups path of this test's own (cgroupfs form), removed afterwards."""
    if os.geteuid() != 0:
        pytest.skip("needs root to create cgroups")
    if not (CGROUP / "cpu" / "cpu.cfs_quota_us").exists():
        pytest.skip("needs a cgroup v1 host; the v2 tests run in tests/vm")
    top = f"nri-sla-watch-{uuid.uuid4().hex[:10]}"
    yield f"/{top}/ctr"
    for hierarchy in detect_cgroup_facts().controllers().values():
        for d in (Path(hierarchy.path) / top / "ctr", Path(hierarchy.path) / top):
            with contextlib.suppress(OSError):
                d.rmdir()


def real_node(**watch):
    node = make_node(1, CGROUP, watch=WatchConfig(**watch))
    node.facts = detect_cgroup_facts()  # the host's hierarchies, as `nri-sla run` sees them
    return node


def runc_create(node, plan, cgroups_path: str) -> dict[str, Path]:
    """What runc create does on v1: the container's dir in every hierarchy (cpuset with
    its parent's CPUs and memory nodes), then the adjustment's values."""
    paths = node.container_paths(cgroups_path)
    for controller, d in paths.dirs.items():
        os.makedirs(d, exist_ok=True)
        if controller == "cpuset":
            for name in ("cpuset.cpus", "cpuset.mems"):
                for level in (Path(d).parent, Path(d)):
                    (level / name).write_text((level.parent / name).read_text())
    assert node.write_plan(plan, cgroups_path, scope="runtime") == []
    return {c: Path(d) for c, d in paths.dirs.items()}


def first_disk() -> str:
    for entry in sorted(Path("/sys/block").iterdir()):
        if not entry.name.startswith(("loop", "ram", "zram", "dm-", "md")):
            return (entry / "dev").read_text().strip()
    pytest.skip("needs a real block device for blkio throttles")


async def started(session, plugin, node, cgroups_path: str, sla: str):
    pod = make_pod("infer-0", namespace="infer", annotations={"sla.nri.io/pod": sla})
    ctr = make_container(pod, "server", resources=guaranteed(1))
    ctr.linux.cgroups_path = cgroups_path
    await session.create_container(pod, ctr)
    dirs = runc_create(node, plugin.registry.get(ctr.id).current_plan, cgroups_path)
    await session.start_container(pod, ctr)
    return dirs


def test_a_cpu_bound_container_at_its_quota_shows_throttling(tmp_path, cgroups_path):
    metrics = Metrics()
    node = real_node(interval=30)
    run_dir = Path(tempfile.mkdtemp(prefix="nri-sla-", dir="/tmp"))
    socket_path = str(run_dir / "status.sock")

    async def scenario():
        async with plugin_session(node, tmp_path, metrics=metrics) as (_, session, plugin):
            metrics.registry.register(ContainerCollector(lambda: plugin.watch.last, 100))
            dirs = await started(
                session, plugin, node, cgroups_path, "cpu: {limit: 0.05, period: 100ms}"
            )
            busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
            try:
                for controller in ("cpu", "cpuacct"):
                    (dirs[controller] / "cgroup.procs").write_text(str(busy.pid))
                plugin.drift_pass()
                # 15 periods of 100 ms, each ending throttled: 5 ms of quota is used up
                # even when a loaded machine gives the loop a fraction of a CPU.
                await asyncio.sleep(1.5)
                plugin.drift_pass()
                with StatusServer(socket_path, lambda: plugin.status(10.0)):
                    doc = await asyncio.to_thread(read_status, socket_path)
            finally:
                busy.kill()
                busy.wait()
            return doc

    try:
        doc = asyncio.run(asyncio.wait_for(scenario(), 60))
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    who = {"namespace": "infer", "pod": "infer-0", "container": "server"}
    ratio = metrics.value("nri_sla_container_cpu_throttled_ratio", **who)
    assert ratio is not None and ratio > 0.5, ratio
    assert metrics.value("nri_sla_container_cpu_periods_total", **who) >= 5
    assert metrics.value("nri_sla_container_cpu_throttled_seconds_total", **who) > 0.5
    assert metrics.value("nri_sla_container_cpu_limit_cores", **who) == pytest.approx(0.05)
    (row,) = doc["containers"]
    assert row["throttled_ratio"] > 0.5 and row["cpu"]["throttled"] >= 5
    assert row["drifted"] == 0 and row["state"] == "watched"
    line = next(x for x in render(doc).splitlines() if x.startswith("infer/infer-0"))
    assert "hard cpu=0.05" in line and "2/2" in line
    assert f"{row['throttled_ratio']:.1%}" in line


def test_values_changed_behind_nri_slas_back_are_repaired(tmp_path, cgroups_path):
    metrics = Metrics()
    node = real_node(interval=30)
    disk = first_disk()
    sla = f"cpu: {{limit: 0.5}}\nio: {{max: [{{device: '{disk}', read-bps: 10Mi}}]}}"

    async def scenario():
        async with plugin_session(node, tmp_path, metrics=metrics) as (_, session, plugin):
            dirs = await started(session, plugin, node, cgroups_path, sla)
            rule = dirs["blkio"] / "blkio.throttle.read_bps_device"
            quota = dirs["cpu"] / "cpu.cfs_quota_us"
            assert rule.read_text().split() == [disk, str(10 << 20)]  # nri-sla's write
            assert plugin.drift_pass() == []
            rule.write_text(f"{disk} 0")  # the rule dropped (a v1 daemon-reload does this)
            quota.write_text("-1")  # and the runtime-applied quota lifted
            start = time.monotonic()
            (update,) = plugin.drift_pass()
            found_in = time.monotonic() - start
            repaired_rule = rule.read_text().split()
            # the runtime applies the re-asserted values, as runc update does
            node.write_plan(
                plugin.registry.get(update.container_id).current_plan, cgroups_path, scope="runtime"
            )
            assert plugin.drift_pass() == []
            return update, found_in, repaired_rule, quota.read_text().strip()

    update, found_in, repaired_rule, quota_now = asyncio.run(asyncio.wait_for(scenario(), 60))
    assert repaired_rule == [disk, str(10 << 20)]  # rewritten and read back from the kernel
    assert update.linux.resources.cpu.quota.value == 50_000 and quota_now == "50000"
    assert found_in < 1.0
    for kind in ("cpu", "io"):
        assert metrics.value("nri_sla_drift_detected_total", kind=kind) == 1
        assert metrics.value("nri_sla_drift_repairs_total", kind=kind, outcome="repaired") == 1
