"""The drift watch over the runtime simulator and fake cgroup v1 trees: a value changed
behind nri-sla's back is found within one interval, repaired in hard mode (a direct write
rewritten, a runtime-applied value re-asserted through UpdateContainers), reported only
in soft mode; failed repairs back off; Synchronize after a reconnect repairs too."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

import pytest

from nri_plugin.config.values import WatchConfig
from nri_plugin.enforce.mapping import io_weight_to_bfq
from nri_plugin.nri.pb import nri_pb2 as pb
from nri_plugin.nri.service import run_service
from nri_plugin.ops.metrics import Metrics
from nri_plugin.plugin.service import build_service
from nri_plugin.simulated.runtime import RuntimeSimulator, make_container, make_pod
from tests.support.cgroups import CgroupTree
from tests.support.plugin_helpers import (
    guaranteed,
    make_node,
    plugin_session,
    restore_updates,
)

HARD = "cpu: {limit: 2, period: 100ms}\nmemory: {max: 1Gi}\nio: {weight: 500}"
BFQ_WEIGHT = str(io_weight_to_bfq(500))


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


def counted(metrics: Metrics, name: str, **labels: str) -> float:
    return metrics.value(f"nri_sla_{name}", **labels) or 0.0


def runc_update(dirs: dict[str, Path], update: pb.ContainerUpdate) -> None:
    """What `runc update` writes on v1 for the fields nri-sla's updates carry."""
    res = update.linux.resources
    files = {
        "cpu.cfs_period_us": res.cpu.period.value if res.cpu.HasField("period") else None,
        "cpu.cfs_quota_us": res.cpu.quota.value if res.cpu.HasField("quota") else None,
        "memory.limit_in_bytes": (res.memory.limit.value if res.memory.HasField("limit") else None),
    }
    for name, value in files.items():
        if value is not None:
            (dirs[name.split(".")[0]] / name).write_text(str(value))
    if res.cpu.cpus:
        (dirs["cpuset"] / "cpuset.cpus").write_text(res.cpu.cpus)


async def started(
    session,
    plugin,
    node,
    tree: CgroupTree,
    name: str,
    sla: str,
    mode: str = "hard",
    namespace: str = "web",
):
    """A pod with one started SLA container whose cgroup holds what runc and nri-sla
    wrote; returns (pod, container, its cgroup dirs)."""
    pod = make_pod(
        name,
        namespace=namespace,
        annotations={f"sla.nri.io/container.{name}": sla, "sla.nri.io/enforcement": mode},
    )
    ctr = make_container(pod, name, resources=guaranteed(4))
    await session.create_container(pod, ctr)
    dirs = tree.add_cgroup(ctr.linux.cgroups_path)
    # runc create: the adjustment's values land in the new cgroup
    assert (
        node.write_plan(
            plugin.registry.get(ctr.id).current_plan, ctr.linux.cgroups_path, scope="runtime"
        )
        == []
    )
    await session.start_container(pod, ctr)  # nri-sla's direct writes
    return pod, ctr, dirs


async def until(condition, timeout: float = 10.0) -> float:
    """Seconds until condition() held (generous: the suite runs on a loaded 2-core box)."""
    start = time.monotonic()
    while not condition():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"not within {timeout}s")
        await asyncio.sleep(0.02)
    return time.monotonic() - start


@pytest.mark.slow
def test_hard_drift_is_repaired_within_one_interval(tmp_path, v1_tree, caplog):
    caplog.set_level(logging.INFO, logger="nri_sla.watch")
    interval = 0.5
    metrics = Metrics()
    node = make_node(1, v1_tree, watch=WatchConfig(interval=interval))
    socket_path = str(tmp_path / "nri.sock")

    async def scenario():
        stop = asyncio.Event()
        plugin, options = build_service(
            node, metrics, socket=socket_path, handle_signals=False, stop_event=stop
        )
        service = asyncio.create_task(run_service(plugin, options))
        async with RuntimeSimulator(socket_path) as sim:
            session = await sim.accept()
            _, ctr, dirs = await started(session, plugin, node, v1_tree, "api", HARD)
            await asyncio.sleep(3 * interval)  # passes over a container that holds
            assert not session.unsolicited
            assert counted(metrics, "drift_detected_total", kind="cpu") == 0
            # Behind nri-sla's back: another agent halves the quota (the runtime set it)
            # and resets the blkio weight (nri-sla wrote it directly).
            (dirs["cpu"] / "cpu.cfs_quota_us").write_text("100000")
            (dirs["blkio"] / "blkio.bfq.weight").write_text("100")
            took = await until(lambda: session.unsolicited)
            assert took < interval + 2.0
            (request,) = session.unsolicited
            (update,) = request.update
            assert update.container_id == ctr.id
            assert update.linux.resources.cpu.quota.value == 200_000
            assert update.linux.resources.cpu.period.value == 100_000
            assert (dirs["blkio"] / "blkio.bfq.weight").read_text() == BFQ_WEIGHT
            assert counted(metrics, "drift_detected_total", kind="cpu") == 1
            assert counted(metrics, "drift_detected_total", kind="io") == 1
            assert counted(metrics, "drift_repairs_total", kind="io", outcome="repaired") == 1
            runc_update(dirs, update)  # the runtime applies the re-asserted values
            await until(
                lambda: counted(metrics, "drift_repairs_total", kind="cpu", outcome="repaired") == 1
            )
            await asyncio.sleep(3 * interval)
            assert len(session.unsolicited) == 1  # nothing more to repair
            assert (dirs["cpu"] / "cpu.cfs_quota_us").read_text() == "200000"
            who = {"namespace": "web", "pod": "api", "container": "api"}
            assert counted(metrics, "container_drifted_settings", **who) == 0
            assert counted(metrics, "container_cpu_limit_cores", **who) == 2
            assert counted(metrics, "request_seconds_count", event="DriftWatch") >= 6
            stop.set()
            await asyncio.wait_for(service, 10)

    run(scenario())
    messages = [r.getMessage() for r in caplog.records]
    assert messages.count("drift") == 2  # once per drifted value
    assert "drift repaired" in messages and "drift repair requested" in messages
    assert counted(metrics, "drift_repairs_total", kind="cpu", outcome="failed") == 0


def test_soft_drift_is_reported_once_and_left_alone(tmp_path, v1_tree, caplog):
    caplog.set_level(logging.INFO, logger="nri_sla.watch")
    metrics = Metrics()
    node = make_node(1, v1_tree, watch=WatchConfig(interval=30))

    async def scenario():
        async with plugin_session(node, tmp_path, metrics=metrics) as (_, session, plugin):
            _, _, dirs = await started(
                session,
                plugin,
                node,
                v1_tree,
                "batch",
                "cpu: {limit: 2}\nmemory: {max: 1Gi}",
                "soft",
            )
            assert plugin.drift_pass() == []
            (dirs["memory"] / "memory.limit_in_bytes").write_text(str(2 << 30))
            updates = [plugin.drift_pass() for _ in range(4)]
            report = plugin.watch.last.containers[0]
            return updates, dirs, report

    updates, dirs, report = run(scenario())
    assert updates == [[], [], [], []]
    assert (dirs["memory"] / "memory.limit_in_bytes").read_text() == str(2 << 30)
    assert counted(metrics, "drift_detected_total", kind="memory") == 1
    assert counted(metrics, "drift_repairs_total", kind="memory", outcome="repaired") == 0
    drift = [r for r in caplog.records if r.getMessage() == "drift"]
    assert len(drift) == 1 and drift[0].fields["action"] == "reported (soft mode)"
    assert drift[0].fields["found"] == str(2 << 30) and drift[0].fields["expected"] == str(1 << 30)
    (setting,) = [s for s in report.settings if s.drifted]
    assert (setting.file, setting.found, setting.via) == (
        "memory.limit_in_bytes",
        str(2 << 30),
        "runtime",
    )
    assert report.drifted == 1 and report.repair == ""


def test_a_drift_changing_again_is_logged_again(tmp_path, v1_tree, caplog):
    caplog.set_level(logging.INFO, logger="nri_sla.watch")
    metrics = Metrics()
    node = make_node(1, v1_tree, watch=WatchConfig(interval=30))

    async def scenario():
        async with plugin_session(node, tmp_path, metrics=metrics) as (_, session, plugin):
            _, _, dirs = await started(
                session, plugin, node, v1_tree, "batch", "cpu: {limit: 2}", "soft"
            )
            quota = dirs["cpu"] / "cpu.cfs_quota_us"
            for value in ("100000", "100000", "150000", "200000", "100000"):
                quota.write_text(value)  # 200000 is the SLA's: the drift is gone
                plugin.drift_pass()

    run(scenario())
    messages = [r.getMessage() for r in caplog.records]
    assert messages.count("drift") == 3 and messages.count("drift gone") == 1
    assert counted(metrics, "drift_detected_total", kind="cpu") == 3


def test_a_repair_that_does_not_hold_backs_off(tmp_path, v1_tree, caplog):
    """The runtime never restores the value: each failed repair doubles the wait (in
    passes), up to repair-backoff-max, instead of an update every pass."""
    caplog.set_level(logging.INFO, logger="nri_sla.watch")
    metrics = Metrics()
    node = make_node(1, v1_tree, watch=WatchConfig(interval=1, repair_backoff_max=8))

    async def scenario():
        async with plugin_session(node, tmp_path, metrics=metrics) as (_, session, plugin):
            _, _, dirs = await started(session, plugin, node, v1_tree, "api", HARD)
            now = [0.0]
            plugin.watch.clock = lambda: now[0]
            (dirs["cpu"] / "cpu.cfs_quota_us").write_text("100000")
            sent = []
            for tick in range(24):  # one pass per interval; the runtime ignores updates
                now[0] = float(tick)
                if plugin.drift_pass():
                    sent.append(tick)
            return sent, plugin.watch.last.containers[0]

    sent, report = run(scenario())
    # tried at 0; failed at 1 (wait 2), tried at 3; failed at 4 (wait 4), tried at 8;
    # failed at 9 (wait 8: the cap), tried at 17; failed at 18 (wait 8), tried at 26.
    assert sent == [0, 3, 8, 17]
    assert counted(metrics, "drift_repairs_total", kind="cpu", outcome="failed") == 4
    assert report.repair.startswith(
        "failed: the runtime's update did not restore cpu/cpu.cfs_quota_us; next try in 8s"
    )
    assert [r.getMessage() for r in caplog.records].count("drift") == 1


def test_synchronize_after_a_reconnect_repairs_what_drifted_meanwhile(tmp_path, v1_tree):
    metrics = Metrics()
    node = make_node(1, v1_tree, watch=WatchConfig(interval=3600))  # only Synchronize
    socket_path = str(tmp_path / "nri.sock")

    async def scenario():
        stop = asyncio.Event()
        plugin, options = build_service(
            node,
            metrics,
            socket=socket_path,
            handle_signals=False,
            stop_event=stop,
            backoff_initial=0.05,
            backoff_max=0.1,
        )
        service = asyncio.create_task(run_service(plugin, options))
        async with RuntimeSimulator(socket_path) as sim:
            session = await sim.accept()
            _, ctr, dirs = await started(session, plugin, node, v1_tree, "api", HARD)
            state = sim.state
        # containerd is down; meanwhile a daemon-reload rewrites both kinds of values
        (dirs["cpu"] / "cpu.cfs_quota_us").write_text("-1")
        (dirs["blkio"] / "blkio.bfq.weight").write_text("100")
        async with RuntimeSimulator(
            socket_path, pods=state.pods.values(), containers=state.containers.values()
        ) as sim:
            session = await sim.accept()
            await plugin.restorer.restored()
            updates = restore_updates(session)
            weight = (dirs["blkio"] / "blkio.bfq.weight").read_text()
        stop.set()
        await asyncio.wait_for(service, 10)
        return ctr, updates, weight

    ctr, updates, weight = run(scenario())
    (update,) = updates
    assert update.container_id == ctr.id and update.linux.resources.cpu.quota.value == 200_000
    assert weight == BFQ_WEIGHT
    assert counted(metrics, "drift_detected_total", kind="cpu") == 1


def test_a_cpuset_nri_sla_just_changed_is_not_drift(tmp_path, v1_tree):
    """Exclusive CPUs taken on a NUMA node narrow its aligned containers' cpusets (sent in
    the CreateContainer answer): until the runtime applied that, the old cpuset is not
    drift; if it never does, the next pass re-asserts the new one."""
    metrics = Metrics()
    node = make_node(1, v1_tree, watch=WatchConfig(interval=30))

    async def scenario():
        async with plugin_session(node, tmp_path, metrics=metrics) as (_, session, plugin):
            _, aligned, dirs = await started(
                session, plugin, node, v1_tree, "aligned", "numa: {nodes: '0'}"
            )
            wide = (dirs["cpuset"] / "cpuset.cpus").read_text()
            await started(
                session, plugin, node, v1_tree, "pinned", "numa: {nodes: '0'}\ncpu: {exclusive: 2}"
            )
            narrow = node.cpusets.cpuset_of(aligned.id)
            first = plugin.drift_pass()  # the runtime has not applied the narrower cpuset
            states = {r.container: r.state for r in plugin.watch.last.containers}
            second = plugin.drift_pass()  # still not: now it is drift
            return wide, narrow, first, states, second, aligned

    wide, narrow, first, states, second, aligned = run(scenario())
    assert narrow and narrow != wide
    assert first == [] and states["aligned"] == "settling"
    assert counted(metrics, "drift_detected_total", kind="cpuset") == 1
    (update,) = second
    assert update.container_id == aligned.id and update.linux.resources.cpu.cpus == narrow


def test_containers_that_are_not_started_or_gone_are_not_drift(tmp_path, v1_tree):
    metrics = Metrics()
    node = make_node(1, v1_tree, watch=WatchConfig(interval=30))

    async def scenario():
        async with plugin_session(node, tmp_path, metrics=metrics) as (_, session, plugin):
            pod = make_pod("later", annotations={"sla.nri.io/pod": HARD})
            ctr = make_container(pod, "later", resources=guaranteed(4))
            await session.create_container(pod, ctr)
            _, _, dirs = await started(session, plugin, node, v1_tree, "gone", HARD)
            for d in dirs.values():  # the container exited and its cgroup was removed
                for f in d.iterdir():
                    f.unlink()
                d.rmdir()
            updates = plugin.drift_pass()
            return updates, {r.container: r.state for r in plugin.watch.last.containers}

    updates, states = run(scenario())
    assert updates == [] and counted(metrics, "drift_detected_total", kind="cpu") == 0
    assert states == {"later": "not started", "gone": "cgroup gone (the container exited?)"}
