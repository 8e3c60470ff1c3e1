"""The RT budget nri-sla raises in a container's ancestors (cgroup v1) comes back down when
the container goes, and after a plugin restart, over a real unix socket to the runtime
simulator on a fake v1 tree. The kernel's own arithmetic on real cgroups is in
tests/enforce/test_real_cgroups.py; containerd's in tests/e2e/test_sla_containerd.py."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest

from nri_plugin.enforce.rt_ledger import LEDGER_FILE, RtLedger
from nri_plugin.nri.pb import nri_pb2 as pb
from nri_plugin.simulated.runtime import PluginCallError, make_container, make_pod
from tests.support.cgroups import CgroupTree
from tests.support.plugin_helpers import (
    make_pod_cgroups,
    permissive_node,
    plugin_session,
    remove_pod_cgroups,
    runc_create,
)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


def _rt(path: Path) -> int:
    return int((path / "cpu.rt_runtime_us").read_text())


def _node(v1_tree: CgroupTree, ledger: Path | None):
    # The whole kernel share for SLA containers: only the kernel's arithmetic refuses here.
    node = permissive_node(1, v1_tree, rt_budget=1.0)
    node.rt_ledger = RtLedger(ledger) if ledger is not None else None
    return node


def _rt_pod(name: str, runtime_ms: int, qos: str = "burstable"):
    pod = make_pod(
        name,
        qos=qos,
        annotations={"sla.nri.io/pod": f"cpu: {{rt-runtime: {runtime_ms}ms, rt-period: 1s}}"},
    )
    return pod, make_container(pod, "c")


async def _create_and_run(sim, session, v1_tree: CgroupTree, pod, ctr) -> dict[str, Path]:
    await session.run_pod_sandbox(pod)
    make_pod_cgroups(v1_tree, ctr.linux.cgroups_path)
    await session.create_container(pod, ctr)
    dirs = runc_create(v1_tree, sim.state.containers[ctr.id])
    await session.start_container(pod, ctr)
    return dirs


def _ancestors(v1_tree: CgroupTree) -> dict[str, int]:
    cpu = v1_tree.root / "cpu"
    return {
        str(p.relative_to(cpu)): _rt(p)
        for p in sorted(cpu.rglob("*"))
        if p.is_dir() and (p / "cpu.rt_runtime_us").exists()
    }


def test_removed_rt_container_leaves_the_ancestors_as_they_were(tmp_path, v1_tree):
    async def scenario():
        node = _node(v1_tree, tmp_path / "state" / LEDGER_FILE)
        async with plugin_session(node, tmp_path) as (sim, session, _plugin):
            pod, ctr = _rt_pod("rt", 50)
            await session.run_pod_sandbox(pod)
            make_pod_cgroups(v1_tree, ctr.linux.cgroups_path)
            before = _ancestors(v1_tree)
            await session.create_container(pod, ctr)
            dirs = runc_create(v1_tree, sim.state.containers[ctr.id])
            await session.start_container(pod, ctr)
            raised = _ancestors(v1_tree)
            await session.stop_container(pod, ctr)
            shutil.rmtree(dirs["cpu"])  # runc delete
            await session.remove_container(pod, ctr)
            return before, raised, _ancestors(v1_tree)

    before, raised, after = run(scenario())
    assert raised["kubepods"] == raised["kubepods/burstable"] == 50_000
    assert after == before and after["kubepods"] == 0


@pytest.mark.parametrize("ledger", [True, False], ids=["ledger", "no-ledger"])
def test_restart_with_no_rt_container_gives_the_budget_back(tmp_path, v1_tree, ledger):
    """The reported case: raises left by RT pods that went away while the plugin was down
    count against the root, and a later RT pod in another branch is refused although none
    runs. Without the ledger (what nri-sla did before) that refusal is what happens."""
    file = tmp_path / "state" / LEDGER_FILE if ledger else None

    async def scenario():
        async with plugin_session(_node(v1_tree, file), tmp_path) as (sim, session, _p):
            pod, ctr = _rt_pod("first", 500, qos="guaranteed")
            dirs = await _create_and_run(sim, session, v1_tree, pod, ctr)
        shutil.rmtree(dirs["cpu"])  # the pod ended while the plugin was down
        remove_pod_cgroups(v1_tree, ctr.linux.cgroups_path)
        left = _ancestors(v1_tree)
        async with plugin_session(_node(v1_tree, file), tmp_path) as (sim, session, _p):
            synced = _ancestors(v1_tree)  # the first Synchronize has run
            pod, ctr = _rt_pod("second", 600)
            try:
                await _create_and_run(sim, session, v1_tree, pod, ctr)
            except PluginCallError as exc:
                return left, synced, exc.message
            return left, synced, _ancestors(v1_tree)

    left, synced, outcome = run(scenario())
    assert left["kubepods"] == left["kubepods/guaranteed"] == 500_000
    if not ledger:
        assert "real-time budget exhausted" in outcome
        return
    assert synced["kubepods"] == synced["kubepods/guaranteed"] == 0
    assert outcome["kubepods"] == outcome["kubepods/burstable"] == 600_000
    assert outcome["kubepods/guaranteed"] == 0


def test_restart_with_one_rt_container_live_keeps_exactly_its_budget(tmp_path, v1_tree):
    file = tmp_path / "state" / LEDGER_FILE

    async def scenario():
        async with plugin_session(_node(v1_tree, file), tmp_path) as (sim, session, _p):
            kept_pod, kept = _rt_pod("kept", 200, qos="guaranteed")
            await _create_and_run(sim, session, v1_tree, kept_pod, kept)
            gone_pod, gone = _rt_pod("gone", 300)
            gone_dirs = await _create_and_run(sim, session, v1_tree, gone_pod, gone)
            live = sim.state.containers[kept.id]
        live.state = pb.CONTAINER_RUNNING
        shutil.rmtree(gone_dirs["cpu"])
        remove_pod_cgroups(v1_tree, gone.linux.cgroups_path)
        before = _ancestors(v1_tree)
        async with plugin_session(
            _node(v1_tree, file), tmp_path, pods=[kept_pod], containers=[live]
        ) as (_sim, _session, plugin):
            return before, _ancestors(v1_tree), plugin.node.rt_budget.owners()

    before, after, owners = run(scenario())
    assert before["kubepods"] == 500_000
    assert after["kubepods"] == after["kubepods/guaranteed"] == 200_000
    assert after["kubepods/burstable"] == 0
    assert len(owners) == 1


def test_created_not_started_rt_container_keeps_its_raise(tmp_path, v1_tree):
    """Granted at CreateContainer, its cgroup made only at start: another container's
    removal (a give-back) meanwhile must leave the raise its start needs."""

    async def scenario():
        node = _node(v1_tree, None)
        node.rt_ledger = RtLedger()
        async with plugin_session(node, tmp_path) as (sim, session, _p):
            other_pod, other = _rt_pod("other", 10)
            other_dirs = await _create_and_run(sim, session, v1_tree, other_pod, other)
            pod, ctr = _rt_pod("waiting", 40)
            await session.run_pod_sandbox(pod)
            make_pod_cgroups(v1_tree, ctr.linux.cgroups_path)
            await session.create_container(pod, ctr)
            await session.stop_container(other_pod, other)
            shutil.rmtree(other_dirs["cpu"])
            await session.remove_container(other_pod, other)
            return _ancestors(v1_tree), ctr

    after, ctr = run(scenario())
    pod_dir = str(Path(ctr.linux.cgroups_path.lstrip("/")).parent)
    assert after[pod_dir] == 40_000 and after["kubepods"] == 40_000


def test_restart_keeps_the_raise_of_a_restored_rt_container_not_started_yet(tmp_path, v1_tree):
    """A restart between an RT container's CreateContainer and its start: its record gives
    the RT budget its grant and where it will live, so the first Synchronize gives back
    the raise of a container that went away meanwhile, and keeps what the start needs."""
    file = tmp_path / "state" / LEDGER_FILE

    async def scenario():
        async with plugin_session(_node(v1_tree, file), tmp_path) as (sim, session, _p):
            gone_pod, gone = _rt_pod("gone", 10)
            gone_dirs = await _create_and_run(sim, session, v1_tree, gone_pod, gone)
            pod, ctr = _rt_pod("waiting", 40)
            await session.run_pod_sandbox(pod)
            make_pod_cgroups(v1_tree, ctr.linux.cgroups_path)
            await session.create_container(pod, ctr)
            waiting = sim.state.containers[ctr.id]  # created, with its record
        shutil.rmtree(gone_dirs["cpu"])
        remove_pod_cgroups(v1_tree, gone.linux.cgroups_path)
        async with plugin_session(
            _node(v1_tree, file), tmp_path, pods=[pod], containers=[waiting]
        ) as (_sim, _session, plugin):
            return _ancestors(v1_tree), ctr, plugin.node.rt_budget.cgroup_dirs()

    after, ctr, dirs = run(scenario())
    pod_dir = str(Path(ctr.linux.cgroups_path.lstrip("/")).parent)
    assert after[pod_dir] == 40_000 and after["kubepods"] == 40_000
    assert dirs == {
        (v1_tree.root / "cpu").resolve() / ctr.linux.cgroups_path.lstrip("/"): (40_000, 1_000_000)
    }


def test_a_cgroup_removed_after_the_event_is_given_back_at_the_next_drift_pass(tmp_path, v1_tree):
    """RemoveContainer may come before runc's cgroup is gone (or while the kernel still
    counts it): nothing is lowered under a live child, and the next drift pass gives the
    raise back."""

    async def scenario():
        node = _node(v1_tree, None)
        node.rt_ledger = RtLedger()
        async with plugin_session(node, tmp_path) as (sim, session, plugin):
            pod, ctr = _rt_pod("late", 70)
            dirs = await _create_and_run(sim, session, v1_tree, pod, ctr)
            await session.stop_container(pod, ctr)
            await session.remove_container(pod, ctr)
            still = _ancestors(v1_tree)
            shutil.rmtree(dirs["cpu"])
            plugin.drift_pass()
            return still, _ancestors(v1_tree)

    still, after = run(scenario())
    assert still["kubepods"] == 70_000  # its cgroup still held 70 ms: kept
    assert after["kubepods"] == after["kubepods/burstable"] == 0


def test_soft_rt_the_kernel_refuses_holds_no_budget(tmp_path, v1_tree):
    """Soft mode, and the kernel cannot make room (a service outside Kubernetes holds most of
    its RT time): the container runs without RT and with a warning, so the node's RT books
    must not keep the budget the planner set aside for it, or other pods are refused RT
    time nobody uses."""
    system = v1_tree.root / "cpu" / "system.slice"
    system.mkdir()
    (system / "cpu.rt_period_us").write_text("1000000")
    (system / "cpu.rt_runtime_us").write_text("900000")

    async def scenario():
        node = _node(v1_tree, None)
        async with plugin_session(node, tmp_path) as (_sim, session, _plugin):
            pod = make_pod(
                "soft-rt",
                annotations={
                    "sla.nri.io/pod": "cpu: {rt-runtime: 200ms, rt-period: 1s}",
                    "sla.nri.io/enforcement": "soft",
                },
            )
            ctr = make_container(pod, "c")
            await session.run_pod_sandbox(pod)
            make_pod_cgroups(v1_tree, ctr.linux.cgroups_path)
            resp = await session.create_container(pod, ctr)
            return ctr.id, resp, node.rt_budget.owners(), node.rt_budget.share_of(ctr.id)

    cid, resp, owners, share = run(scenario())
    assert "cpu.rt-runtime" in resp.adjust.annotations["sla.nri.io/warnings"]
    assert not resp.adjust.linux.resources.cpu.HasField("realtime_runtime")
    assert cid not in owners and share == 0
