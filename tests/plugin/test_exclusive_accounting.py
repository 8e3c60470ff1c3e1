"""Exclusive CPUs as Kubernetes counts them, over the runtime simulator: a grant holds the
CPUs requested (logical CPUs, never whole cores rounded up), a resize while nri-sla was
away rules from the first Synchronize, a create or stop moves only the cpusets that must
move, and the gauge and the status document follow every resize at once."""

from __future__ import annotations

import asyncio

from nri_plugin.nri.pb import nri_pb2 as pb
from nri_plugin.ops.metrics import Metrics
from nri_plugin.simulated.runtime import make_container, make_pod
from nri_plugin.topology.cpulist import parse_cpulist
from tests.support.plugin_helpers import (
    guaranteed,
    make_node,
    plugin_session,
    pool_breaches,
    restore_updates,
)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 120))


def exclusive(n: int) -> dict[str, str]:
    return {"sla.nri.io/pod": f"cpu: {{exclusive: {n}}}"}


def cpuset(sim, ctr) -> frozenset[int]:
    return parse_cpulist(sim.state.containers[ctr.id].linux.resources.cpu.cpus)


async def create(
    session, name: str, annotations: dict[str, str], cpus: int, namespace: str = "default"
):
    pod = make_pod(name, namespace=namespace, annotations=annotations)
    ctr = make_container(pod, "c", resources=guaranteed(cpus))
    await session.create_container(pod, ctr)
    return pod, ctr


def status_of(plugin, ctr) -> dict:
    """The container's row of the status document, as `nri-sla status --json` has it."""
    doc = plugin.watch.look().to_json(True)
    (row,) = [c for c in doc["containers"] if c["id"] == ctr.id]
    return row


def gauge(metrics: Metrics) -> float:
    return metrics.value("nri_sla_exclusive_cpus_in_use") or 0.0


def test_one_cpu_pods_hold_one_cpu_each_and_a_big_pod_still_gets_its_own(tmp_path):
    """28 pods requesting 1 CPU with `exclusive: 1` on the 64-CPU SMT2 snapshot hold 28
    CPUs, not 56 whole-core CPUs; a 16-CPU pod created afterwards gets 16 of its own."""

    async def scenario():
        async with plugin_session(make_node(2), tmp_path) as (sim, session, plugin):
            ones = [
                await create(session, f"one{i}", exclusive(1), 1, namespace=f"t{i}")
                for i in range(28)
            ]
            _, big = await create(session, "big", exclusive(16), 16, namespace="big")
            return (
                [cpuset(sim, c) for _, c in ones],
                cpuset(sim, big),
                plugin.node.usage()[1],
                pool_breaches(sim, plugin.node),
            )

    ones, big, held, breaches = run(scenario())
    assert not breaches, breaches
    assert all(len(cpus) == 1 for cpus in ones)
    assert len(big) == 16 and held == 28 + 16


def test_a_resize_while_away_rules_from_the_first_synchronize(tmp_path):
    """A pod resized from 32 to 1 CPU while the plugin was away: the restarted plugin's
    first Synchronize leaves it 1 exclusive CPU and gives the neighbour the other 31 back
    (in the restore's UpdateContainers); the gauge and the status say 1 at once."""

    async def scenario():
        async with plugin_session(make_node(2), tmp_path) as (sim, session, _plugin):
            big_pod, big = await create(session, "big", exclusive(32), 32, namespace="t")
            plain_pod = make_pod("plain", namespace="x")
            plain = make_container(plain_pod, "c")
            await session.create_container(plain_pod, plain)
            narrowed = cpuset(sim, plain)
            stored = list(sim.state.containers.values())
        for ctr in stored:
            ctr.state = pb.CONTAINER_RUNNING
        # the kubelet's resize, applied by the runtime while nri-sla is away
        (resized,) = [c for c in stored if c.id == big.id]
        resized.linux.resources.cpu.shares.value = 1024
        resized.linux.resources.cpu.quota.value = 100_000
        metrics = Metrics()
        async with plugin_session(
            make_node(2), tmp_path, metrics=metrics, pods=[big_pod, plain_pod], containers=stored
        ) as (sim, session, plugin):
            updates = restore_updates(session)
            return (
                narrowed,
                {u.container_id for u in updates},
                cpuset(sim, big),
                cpuset(sim, plain),
                gauge(metrics),
                status_of(plugin, big),
                pool_breaches(sim, plugin.node),
            )

    narrowed, updated, big, plain, held, row, breaches = run(scenario())
    assert not breaches, breaches
    assert len(narrowed) == 32
    assert len(big) == 1 and plain == parse_cpulist("0-63") - big
    assert len(updated) == 2  # both, in the first Synchronize's restore
    assert held == 1
    assert parse_cpulist(row["exclusive_cpus"]) == big and "excl=1" in row["sla"]


def test_a_resize_moves_the_gauge_and_the_status_at_once(tmp_path):
    async def scenario():
        metrics = Metrics()
        async with plugin_session(make_node(2), tmp_path, metrics=metrics) as (
            sim,
            session,
            plugin,
        ):
            pod, big = await create(session, "big", exclusive(8), 8, namespace="t")
            before = gauge(metrics), status_of(plugin, big)["exclusive_cpus"]
            await session.update_container(pod, big, guaranteed(3))
            return before, gauge(metrics), status_of(plugin, big), cpuset(sim, big)

    (held_before, excl_before), held, row, cpus = run(scenario())
    assert held_before == 8 and len(parse_cpulist(excl_before)) == 8
    assert held == 3 and len(cpus) == 3
    assert parse_cpulist(row["exclusive_cpus"]) == cpus and "excl=3" in row["sla"]


NEIGHBOURS = 100


def test_create_and_stop_move_only_the_cpusets_that_must_move(tmp_path):
    """With 100 neighbours on the shared pool: the first exclusive create moves them off
    its CPUs (they held them); its stop moves nobody (the CPUs wait, out of every
    cpuset); the next create takes them again and moves nobody; the drift pass gives
    them back to the neighbours, and only then does a create move them again."""

    async def scenario():
        async with plugin_session(make_node(2), tmp_path) as (sim, session, plugin):
            for i in range(NEIGHBOURS):
                pod = make_pod(f"n{i}", namespace="x")
                await session.create_container(pod, make_container(pod, "c"))
            counts = []
            for cycle in range(3):
                if cycle == 2:
                    widened = plugin.drift_pass()
                    session.apply_updates(widened)
                    counts.append(len(widened))
                pod = make_pod(f"e{cycle}", namespace="t", annotations=exclusive(4))
                ctr = make_container(pod, "c", resources=guaranteed(4))
                created = await session.create_container(pod, ctr)
                counts.append(len(created.update))
                assert not pool_breaches(sim, plugin.node)
                stopped = await session.stop_container(pod, ctr)
                await session.remove_container(pod, ctr)
                counts.append(len(stopped.update))
                assert not pool_breaches(sim, plugin.node)
            return counts

    assert run(scenario()) == [NEIGHBOURS, 0, 0, 0, NEIGHBOURS, NEIGHBOURS, 0]


def test_a_resize_while_away_clamps_the_restored_plan_as_an_update_would(tmp_path):
    """`cpu.limit: 2` on a 4-CPU pod resized to 1 CPU while the plugin was away: the
    restored plan in force (what the drift watch reads back and repairs) is the runtime's
    1 CPU, not the record's 2, as an UpdateContainer would have made it."""

    async def scenario():
        async with plugin_session(make_node(2), tmp_path) as (sim, session, _plugin):
            pod, ctr = await create(
                session, "lim", {"sla.nri.io/pod": "cpu: {limit: 2}"}, 4, namespace="t"
            )
            stored = list(sim.state.containers.values())
        for kept in stored:
            kept.state = pb.CONTAINER_RUNNING
            kept.linux.resources.cpu.shares.value = 1024
            kept.linux.resources.cpu.quota.value = 100_000
        async with plugin_session(make_node(2), tmp_path, pods=[pod], containers=stored) as (
            _sim,
            _session,
            plugin,
        ):
            entry = plugin.registry.get(ctr.id)
            return entry.decided_plan.cpu_quota, entry.current_plan.cpu_quota

    decided, current = run(scenario())
    assert (decided, current) == (200_000, 100_000)
