"""CPUs: no tenant squeezes, outlasts or shares another's CPUs. Each case over
the runtime simulator, asserting both tenants' cpusets as the runtime holds them (the
stored specs every adjustment and update reached) and the pool rule (pool_breaches)."""

from __future__ import annotations

import asyncio

import pytest

from nri_plugin.nri.pb import nri_pb2 as pb
from nri_plugin.simulated.runtime import (
    PluginCallError,
    make_container,
    make_pod,
    make_resources,
)
from nri_plugin.topology.cpulist import parse_cpulist
from tests.support.plugin_helpers import (
    ALIGNED,
    DGX_NODE0,
    guaranteed,
    make_node,
    plugin_session,
    pool_breaches,
    restore_updates,
)

NODE0 = parse_cpulist(DGX_NODE0)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


def exclusive(n: int, mode: str = "hard", nodes: str | None = None) -> dict[str, str]:
    numa = f"\nnuma: {{nodes: '{nodes}'}}" if nodes is not None else ""
    return {"sla.nri.io/pod": f"cpu: {{exclusive: {n}}}{numa}", "sla.nri.io/enforcement": mode}


def cpuset(sim, ctr) -> frozenset[int]:
    """The container's cpuset as the runtime holds it."""
    return parse_cpulist(sim.state.containers[ctr.id].linux.resources.cpu.cpus)


async def create(
    session, name: str, annotations: dict[str, str], cpus: int, namespace: str = "default", **kw
):
    pod = make_pod(name, namespace=namespace, annotations=annotations)
    ctr = make_container(pod, "c", resources=guaranteed(cpus), **kw)
    await session.create_container(pod, ctr)
    return pod, ctr


def test_an_exclusive_request_never_squeezes_an_aligned_neighbour(tmp_path):
    """The 8-CPU pod aligned to node 0 keeps node 0: a 30-CPU exclusive request goes to
    node 1 (node 0 would leave it 2 CPUs), a second one is refused (hard) naming only its
    own request and the node policy, or clamped to what node 0 can spare (soft)."""

    async def scenario():
        async with plugin_session(make_node(2), tmp_path) as (sim, session, plugin):
            _, aligned = await create(session, "aligned", ALIGNED, 8, namespace="a")
            _, first = await create(session, "first", exclusive(30), 30, namespace="b")
            with pytest.raises(PluginCallError) as refused:
                await create(session, "second", exclusive(30), 30, namespace="b")
            _, soft = await create(session, "soft", exclusive(30, "soft"), 30, namespace="b")
            held = plugin.node.allocator.placement_of(soft.id).exclusive_cpus
            return (
                cpuset(sim, aligned),
                cpuset(sim, first),
                cpuset(sim, soft),
                held,
                refused.value,
                pool_breaches(sim, plugin.node),
            )

    aligned, first, soft, held, refused, breaches = run(scenario())
    assert not breaches, breaches
    assert len(first) == 30 and not first & NODE0
    # node 0 spares 24 (the neighbour needs 8 of its 32), node 1 its last core
    assert len(held & NODE0) == 24 and len(held - NODE0) == 2
    assert aligned == NODE0 - held and len(aligned) == 8
    assert soft == held | aligned  # clamped below its request: the shared CPUs too
    assert refused.message == (
        "sla.nri.io/pod: cpu.exclusive: requested 30 exclusive CPUs on this node; taking them "
        "would leave running containers fewer CPUs than their CPU requests (node policy: "
        "exclusive CPUs never shrink another container's cpuset below its request)"
    )
    assert "aligned" not in refused.message and "namespace" not in refused.message


def test_exclusive_32_on_the_aligned_node_leaves_no_overlap(tmp_path):
    """`exclusive: 32` on the aligned pod's own node: refused in hard mode (the
    neighbour keeps its 32 CPUs); in soft mode clamped, and the neighbour's cpuset is
    narrowed to what is left, never left on the exclusive CPUs."""

    async def scenario():
        async with plugin_session(make_node(2), tmp_path) as (sim, session, plugin):
            _, aligned = await create(session, "aligned", ALIGNED, 8, namespace="a")
            with pytest.raises(PluginCallError):
                await create(session, "hard", exclusive(32, nodes="0"), 32, namespace="b")
            kept = cpuset(sim, aligned)
            _, soft = await create(session, "soft", exclusive(32, "soft", "0"), 32, namespace="b")
            return kept, cpuset(sim, aligned), cpuset(sim, soft), pool_breaches(sim, plugin.node)

    kept, aligned, soft, breaches = run(scenario())
    assert not breaches, breaches
    assert kept == NODE0
    # node 0 spares 24 of its 32 (the neighbour needs 8), soft mode completes from node 1
    assert len(soft & NODE0) == 24 and len(soft) == 32
    assert not aligned & soft and aligned == NODE0 - soft and len(aligned) == 8


@pytest.mark.parametrize("mode", ["hard", "soft"])
def test_a_resize_answers_with_the_current_cpuset(tmp_path, mode):
    """An aligned container narrowed by a neighbour's exclusive CPUs is resized: the
    answer carries its current cpuset, not the plan's creation-time one."""
    sla = {**ALIGNED, "sla.nri.io/enforcement": mode}

    async def scenario():
        async with plugin_session(make_node(2), tmp_path) as (sim, session, plugin):
            pod, aligned = await create(session, "aligned", sla, 8, namespace="a")
            _, excl = await create(session, "excl", exclusive(8, nodes="0"), 8, namespace="b")
            resp = await session.update_container(pod, aligned, guaranteed(4))
            return (resp, cpuset(sim, aligned), cpuset(sim, excl), pool_breaches(sim, plugin.node))

    resp, aligned, excl, breaches = run(scenario())
    assert not breaches, breaches
    (own,) = [u for u in resp.update if u.container_id == resp.update[0].container_id]
    assert parse_cpulist(own.linux.resources.cpu.cpus) == NODE0 - excl == aligned
    assert len(excl) == 8


@pytest.mark.parametrize("mode", ["hard", "soft"])
def test_exclusive_cpus_follow_a_resize_down(tmp_path, mode, caplog):
    """Two pods hold 30 exclusive CPUs each and resize to 1 CPU: each keeps one CPU (the
    request's count, never its whole core), the rest is given back (soft mode warns), the
    resize's answer moves no neighbour, a later `exclusive: 8` is placed on given-back CPUs
    and the neighbour widens with the next drift pass."""
    import logging

    caplog.set_level(logging.INFO, logger="nri_sla.plugin")

    async def scenario():
        async with plugin_session(make_node(2), tmp_path) as (sim, session, plugin):
            pods = [
                await create(session, f"big{i}", exclusive(30, mode), 30, namespace=f"t{i}")
                for i in range(2)
            ]
            plain_pod = make_pod("plain", namespace="other")
            plain = make_container(plain_pod, "c")
            await session.create_container(plain_pod, plain)
            narrow = cpuset(sim, plain)
            answers = [await session.update_container(pod, ctr, guaranteed(1)) for pod, ctr in pods]
            sizes = [len(cpuset(sim, ctr)) for _, ctr in pods]
            _, later = await create(session, "later", exclusive(8), 8, namespace="t3")
            still = cpuset(sim, plain)
            session.apply_updates(plugin.drift_pass())
            return (
                sizes,
                [len(a.update) for a in answers],
                narrow,
                still,
                cpuset(sim, plain),
                cpuset(sim, later),
                plugin.node.usage()[1],
                pool_breaches(sim, plugin.node),
            )

    sizes, answered, narrow, still, plain, later, held, breaches = run(scenario())
    assert not breaches, breaches
    assert sizes == [1, 1]  # one logical CPU each, as Kubernetes counts the request
    assert answered == [1, 1]  # the resized container's own update, no neighbour's
    assert len(later) == 8 and held == 10
    assert len(narrow) == 64 - 60  # what the two left
    # the given-back CPUs reach the neighbour with the drift pass, off the resize's answer;
    # the later exclusive request took given-back CPUs, never the neighbour's
    assert still == narrow and len(plain) == 64 - 10
    given = [
        r for r in caplog.records if r.getMessage() == "exclusive CPUs given back after a resize"
    ]
    assert len(given) == 2
    assert {r.levelno for r in given} == {logging.WARNING if mode == "soft" else logging.INFO}


def test_containers_without_an_sla_leave_exclusive_cpus(tmp_path):
    """A container without an SLA runs on the shared pool: moved off CPUs that become
    exclusive (in the same answer), created on the pool, and widened again by the drift
    pass after the exclusive holder stops. A cpuset the kubelet pinned is left alone, and
    an exclusive request that needs its CPUs is refused."""

    async def scenario():
        async with plugin_session(make_node(2), tmp_path) as (sim, session, plugin):
            before_pod = make_pod("before", namespace="x")
            before = make_container(before_pod, "c")
            first = await session.create_container(before_pod, before)
            pinned_pod = make_pod("pinned", namespace="x")
            pinned = make_container(
                pinned_pod,
                "c",
                resources=make_resources(
                    cpu_shares=2048, cpu_quota=200_000, cpu_period=100_000, cpus="16,48"
                ),
            )
            await session.create_container(pinned_pod, pinned)
            excl_pod, excl = await create(session, "excl", exclusive(8), 8, namespace="y")
            moved = cpuset(sim, before)
            after_pod = make_pod("after", namespace="x")
            after = make_container(after_pod, "c")
            await session.create_container(after_pod, after)
            created = cpuset(sim, after)
            breaches = pool_breaches(sim, plugin.node)
            with pytest.raises(PluginCallError) as refused:
                await create(session, "node1", exclusive(32, nodes="1"), 32, namespace="y")
            stopped = await session.stop_container(excl_pod, excl)
            session.apply_updates(plugin.drift_pass())
            return (
                first,
                moved,
                created,
                cpuset(sim, excl),
                cpuset(sim, before),
                cpuset(sim, pinned),
                breaches,
                refused.value,
                stopped.update,
            )

    first, moved, created, excl, widened, pinned, breaches, refused, stopped = run(scenario())
    assert not breaches, breaches
    assert not first.adjust.linux.resources.cpu.cpus  # the pool was the whole node
    assert len(excl) == 8 and moved == created == parse_cpulist("0-63") - excl
    assert list(stopped) == []  # the stop's answer moves nobody: the drift pass widens
    assert widened == parse_cpulist("0-63")
    assert pinned == parse_cpulist("16,48")
    assert "taking them would leave running containers fewer CPUs" in refused.message


def test_a_restart_keeps_what_a_resize_gave_back(tmp_path):
    """After a resize down, the record still names the creation-time exclusive CPUs; a
    restarted plugin takes only those the container's cpuset still holds."""

    async def scenario():
        async with plugin_session(make_node(2), tmp_path) as (sim, session, plugin):
            pod, big = await create(session, "big", exclusive(16), 16, namespace="t")
            await session.update_container(pod, big, guaranteed(2))
            await session.start_container(pod, big)
            pods, ctrs = list(sim.state.pods.values()), list(sim.state.containers.values())
            for ctr in ctrs:
                ctr.state = pb.CONTAINER_RUNNING
            pods = pods or [pod]
        async with plugin_session(make_node(2), tmp_path, pods=pods, containers=ctrs) as (
            sim,
            session,
            plugin,
        ):
            return (
                cpuset(sim, big),
                plugin.node.allocator.exclusive_cpus_in_use(),
                pool_breaches(sim, plugin.node),
            )

    kept, held, breaches = run(scenario())
    assert not breaches, breaches
    assert len(kept) == 2 and set(held) == kept


@pytest.mark.parametrize("neighbour", [True, False])
def test_a_restart_after_a_resize_down_and_up_keeps_the_given_back_cpus_shared(tmp_path, neighbour):
    """A resize down gives 2 of 4 exclusive CPUs back, one up again runs the container on
    its 2 and the shared pool (the record still names all 4). A restarted plugin takes
    back only the 2: the given-back ones are in the plain neighbour's cpuset, so they are
    shared, and nobody's cpuset moves. Without a neighbour nothing tells them apart: the
    record's 4 (what the SLA grants and the container's cpuset holds) are taken again."""

    async def scenario():
        async with plugin_session(make_node(2), tmp_path) as (sim, session, plugin):
            pod, excl = await create(session, "excl", exclusive(4), 4, namespace="t")
            await session.update_container(pod, excl, guaranteed(2))
            kept = frozenset(plugin.node.allocator.exclusive_cpus_in_use())
            if neighbour:
                await create(session, "plain", {}, 1, namespace="x")
            await session.update_container(pod, excl, guaranteed(4))
            before = {c.id: cpuset_of(c) for c in sim.state.containers.values()}
            stored = list(sim.state.containers.values())
            pods = list(sim.state.pods.values())
        for ctr in stored:
            ctr.state = pb.CONTAINER_RUNNING
        async with plugin_session(make_node(2), tmp_path, pods=pods, containers=stored) as (
            sim,
            session,
            plugin,
        ):
            after = {c.id: cpuset_of(c) for c in sim.state.containers.values()}
            return (
                kept,
                before,
                after,
                restore_updates(session),
                frozenset(plugin.node.allocator.exclusive_cpus_in_use()),
                plugin.node.allocator.placement_of(excl.id).exclusive_cpus,
                pool_breaches(sim, plugin.node),
                excl.id,
            )

    kept, before, after, at_sync, held, excl_held, breaches, excl_id = run(scenario())
    assert not breaches, breaches
    assert len(kept) == 2 and before[excl_id] == parse_cpulist("0-63")
    if neighbour:
        assert held == excl_held == kept  # the 2 it kept, not the record's 4
        assert at_sync == [] and after == before
    else:
        assert len(held) == 4 and held == excl_held > kept
        assert after[excl_id] == held  # its request is 4: its 4 exclusive CPUs alone


def test_a_resize_up_the_cpuset_cannot_hold_is_refused_in_hard_mode(tmp_path):
    """The aligned pod's node keeps 8 CPUs outside a neighbour's exclusive 24: a resize
    to 12 CPUs is refused (the runtime keeps it as it was), naming only its own request,
    its cpuset and the node policy; a resize to 8 is answered with that cpuset."""

    async def scenario():
        async with plugin_session(make_node(2), tmp_path) as (sim, session, _plugin):
            pod, aligned = await create(session, "aligned", ALIGNED, 4, namespace="a")
            _, excl = await create(session, "excl", exclusive(24, nodes="0"), 24, namespace="b")
            with pytest.raises(PluginCallError) as refused:
                await session.update_container(pod, aligned, guaranteed(12))
            fits = await session.update_container(pod, aligned, guaranteed(8))
            return refused.value, fits, cpuset(sim, aligned), cpuset(sim, excl)

    refused, fits, aligned, excl = run(scenario())
    assert refused.message == (
        "sla.nri.io/pod: cpu: the CPU request the runtime granted (12000m) needs 12 whole "
        "CPUs; this container's cpuset can hold 8 (node policy: a cpuset is drawn from its "
        "NUMA nodes' CPUs outside every exclusive set)"
    )
    assert len(aligned) == 8 and aligned == NODE0 - excl
    assert parse_cpulist(fits.update[0].linux.resources.cpu.cpus) == aligned


def test_cpus_freed_by_a_remove_reach_the_neighbours_with_the_next_watch_pass(tmp_path):
    """RemoveContainer answers nothing: a container removed without a StopContainer (it
    never started) frees its exclusive CPUs, and the next drift-watch pass sends the
    neighbour its wider cpuset."""

    async def scenario():
        async with plugin_session(make_node(2), tmp_path) as (sim, session, plugin):
            plain_pod = make_pod("plain", namespace="x")
            plain = make_container(plain_pod, "c")
            await session.create_container(plain_pod, plain)
            pod, excl = await create(session, "excl", exclusive(8), 8, namespace="y")
            narrowed = cpuset(sim, plain)
            await session.remove_container(pod, excl)
            updates = plugin.drift_pass()
            session.apply_updates(updates)
            return narrowed, updates, cpuset(sim, plain), plugin.drift_pass()

    narrowed, updates, widened, again = run(scenario())
    assert len(narrowed) == 56
    assert [u.linux.resources.cpu.cpus for u in updates] == ["0-63"]
    assert widened == parse_cpulist("0-63") and again == []


def test_a_restart_leaves_pinned_cpusets_alone_and_keeps_the_pool(tmp_path):
    """Synchronize: a container without an SLA whose cpuset holds another's exclusive CPUs
    was pinned by someone else while nri-sla was away (nri-sla never puts one there): left
    alone, never updated. One on the shared pool nri-sla gave it gets no update while the
    pool is unchanged, and widens with the drift pass after the exclusive holder stops."""
    from nri_plugin.topology.cpulist import format_cpulist

    async def scenario():
        async with plugin_session(make_node(2), tmp_path) as (sim, session, _plugin):
            excl_pod, excl = await create(session, "excl", exclusive(8), 8, namespace="y")
            plain_pod = make_pod("plain", namespace="x")
            plain = make_container(plain_pod, "c")
            await session.create_container(plain_pod, plain)
            stored = {c.id: c for c in sim.state.containers.values()}
        pinned_pod = make_pod("pinned", namespace="x")
        held = format_cpulist(cpuset_of(stored[excl.id]))
        pinned = make_container(
            pinned_pod,
            "c",
            state=pb.CONTAINER_RUNNING,
            resources=make_resources(cpu_shares=1024, cpus=held),
        )
        for ctr in stored.values():
            ctr.state = pb.CONTAINER_RUNNING
        async with plugin_session(
            make_node(2),
            tmp_path,
            pods=[excl_pod, plain_pod, pinned_pod],
            containers=[*stored.values(), pinned],
        ) as (sim, session, plugin):
            at_sync = restore_updates(session)
            breaches = pool_breaches(sim, plugin.node)
            stopped = await session.stop_container(excl_pod, excl)
            widened = plugin.drift_pass()
            session.apply_updates(widened)
            return (
                at_sync,
                breaches,
                list(stopped.update),
                [u.container_id for u in widened],
                cpuset(sim, plain),
                cpuset(sim, pinned),
                held,
            )

    at_sync, breaches, stopped, updated, plain, pinned, held = run(scenario())
    assert at_sync == [] and breaches == ["c: runs on exclusive CPUs " + held]
    assert plain == parse_cpulist("0-63") and pinned == parse_cpulist(held)
    assert stopped == [] and len(updated) == 1  # the drift pass: the plain container only


def cpuset_of(ctr) -> frozenset[int]:
    return parse_cpulist(ctr.linux.resources.cpu.cpus)


def test_reserved_cpus_stay_in_the_shared_pool(tmp_path):
    """`reserved-cpus` are never exclusive, not kept from containers: with CPUs held
    exclusively, a container without an SLA runs on every other CPU, reserved ones
    included; with none held it gets no cpuset at all."""

    async def scenario():
        node = make_node(2, reserved_cpus=(0, 32))
        async with plugin_session(node, tmp_path) as (sim, session, plugin):
            first_pod = make_pod("first", namespace="x")
            first = await session.create_container(first_pod, make_container(first_pod, "c"))
            _, excl = await create(session, "excl", exclusive(8), 8, namespace="y")
            plain_pod = make_pod("plain", namespace="x")
            plain = make_container(plain_pod, "c")
            await session.create_container(plain_pod, plain)
            return (
                first.adjust.linux.resources.cpu.cpus,
                cpuset(sim, excl),
                cpuset(sim, plain),
                pool_breaches(sim, plugin.node),
            )

    first, excl, plain, breaches = run(scenario())
    assert not breaches, breaches
    assert first == "" and not excl & {0, 32}
    assert plain == parse_cpulist("0-63") - excl and {0, 32} <= plain
