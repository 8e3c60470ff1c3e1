"""Synchronize answered first, the restore right after it: the answer carries no updates,
the restore's come as one plugin-initiated UpdateContainers, nothing sees the plugin
between the answer and the restore, and a restore that fails ends nothing."""

from __future__ import annotations

import asyncio
import logging

from nri_plugin.nri.pb import nri_pb2 as pb
from nri_plugin.plugin import SlaPlugin, restore
from nri_plugin.plugin.service import periodic_work
from nri_plugin.simulated.runtime import make_container, make_pod
from nri_plugin.topology.cpulist import format_cpulist, parse_cpulist
from tests.support import plugin_helpers as helpers

NODE0 = parse_cpulist(helpers.DGX_NODE0)
FAILED = (
    "restore after Synchronize failed (internal); the plugin goes on with the state "
    "as far as it got until the next Synchronize"
)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


def exclusive(n: int, nodes: str | None = None) -> dict[str, str]:
    numa = f"\nnuma: {{nodes: '{nodes}'}}" if nodes is not None else ""
    return {"sla.nri.io/pod": f"cpu: {{exclusive: {n}}}{numa}", "sla.nri.io/enforcement": "hard"}


async def create(
    session, name: str, annotations: dict[str, str], cpus: int, namespace: str = "default"
):
    pod = make_pod(name, namespace=namespace, annotations=annotations)
    ctr = make_container(pod, "c", resources=helpers.guaranteed(cpus))
    await session.create_container(pod, ctr)
    return pod, ctr


def running(sim) -> tuple[list[pb.PodSandbox], list[pb.Container]]:
    """The runtime's state as a restarted runtime reports it: every container running."""
    containers = list(sim.state.containers.values())
    for ctr in containers:
        ctr.state = pb.CONTAINER_RUNNING
    return list(sim.state.pods.values()), containers


def test_the_answer_carries_no_updates_the_restore_sends_them_in_one_update_containers(tmp_path):
    """An aligned container narrowed around a neighbour's exclusive CPUs; the neighbour
    stops while nri-sla is away. The Synchronize answer is empty; the aligned container's
    wider cpuset comes right after it, in one UpdateContainers, and the runtime holds it."""

    async def scenario():
        node = helpers.make_node(2)
        async with helpers.plugin_session(node, tmp_path) as (sim, session, _plugin):
            _, aligned = await create(session, "aligned", helpers.ALIGNED, 8, namespace="a")
            _, excl = await create(session, "excl", exclusive(8, "0"), 8, namespace="b")
            narrowed = parse_cpulist(sim.state.containers[aligned.id].linux.resources.cpu.cpus)
            pods, containers = running(sim)
        sim.state.containers[excl.id].state = pb.CONTAINER_STOPPED
        async with helpers.plugin_session(
            helpers.make_node(2), tmp_path, pods=pods, containers=containers
        ) as (sim, session, plugin):
            stored = sim.state.containers[aligned.id].linux.resources.cpu.cpus
            return (
                narrowed,
                list(session.sync_updates),
                list(session.unsolicited),
                stored,
                helpers.pool_breaches(sim, plugin.node),
                aligned.id,
            )

    narrowed, answer, unsolicited, stored, breaches, aligned_id = run(scenario())
    assert len(narrowed) == len(NODE0) - 8  # narrowed around the exclusive 8
    assert answer == []
    (request,) = unsolicited
    assert [(u.container_id, u.linux.resources.cpu.cpus) for u in request.update] == [
        (aligned_id, format_cpulist(NODE0))
    ]
    assert parse_cpulist(stored) == NODE0 and not breaches, breaches


def test_a_create_sent_right_behind_the_synchronize_sees_the_restored_state(tmp_path):
    """A CreateContainer on the wire right behind a Synchronize (the strictest case of
    one sent as soon as the answer came): the exclusive CPUs a restored record holds are
    not handed out again, and the runtime's cpusets keep the pool's rule."""

    async def scenario():
        node = helpers.make_node(2)
        async with helpers.plugin_session(node, tmp_path) as (sim, session, _plugin):
            _, held = await create(session, "held", exclusive(30), 30, namespace="b")
            pods, containers = running(sim)
        async with helpers.plugin_session(helpers.make_node(2), tmp_path) as (sim, session, plugin):
            # The runtime's state, synchronized again on this connection (a plugin that
            # held nothing), and a create sent before the answer is read.
            for pod in pods:
                sim.state.pods[pod.id] = pod
            for ctr in containers:
                sim.state.containers[ctr.id] = ctr
            pod = make_pod("next", namespace="b", annotations=exclusive(30))
            new = make_container(pod, "c", resources=helpers.guaranteed(30))
            synced, _ = await asyncio.gather(
                session.synchronize(pods, containers), session.create_container(pod, new)
            )
            placement = plugin.node.allocator.placement_of
            return (
                synced,
                placement(held.id).exclusive_cpus,
                placement(new.id).exclusive_cpus,
                helpers.pool_breaches(sim, plugin.node),
            )

    synced, restored, given, breaches = run(scenario())
    assert synced == []  # the answer: no updates
    assert len(restored) == 30 and len(given) == 30 and not restored & given
    assert not breaches, breaches


def test_every_entry_finishes_a_pending_restore_first():
    """Outside a service nothing runs the restore on its own: the next entry (here a
    CreateContainer) runs it before it decides, so it sees the restored holder."""
    node = helpers.make_node(2)
    maker = SlaPlugin(node)
    pod = make_pod("held", namespace="b", annotations=exclusive(30))
    held = make_container(pod, "c", resources=helpers.guaranteed(30))
    answer = maker.create_container(pod, held)
    held.annotations.update(answer.adjustment.annotations)  # the runtime keeps the record
    held.state = pb.CONTAINER_RUNNING

    plugin = SlaPlugin(helpers.make_node(2))
    plugin.synchronize([pod], [held])
    assert plugin.registry.get(held.id) is None  # answered, not restored yet
    other_pod = make_pod("next", namespace="b", annotations=exclusive(30))
    other = make_container(other_pod, "c", resources=helpers.guaranteed(30))
    plugin.create_container(other_pod, other)
    placement = plugin.node.allocator.placement_of
    assert plugin.registry.get(held.id) is not None
    restored, given = placement(held.id).exclusive_cpus, placement(other.id).exclusive_cpus
    assert len(restored) == 30 and len(given) == 30 and not restored & given
    assert plugin.restorer.restore() == []  # nothing left pending


def test_a_second_synchronize_replaces_a_pending_restore(caplog):
    plugin = SlaPlugin(helpers.make_node(2))
    first, second = make_pod("first"), make_pod("second")
    a = make_container(first, "c", state=pb.CONTAINER_RUNNING)
    b = make_container(second, "c", state=pb.CONTAINER_RUNNING)
    with caplog.at_level(logging.INFO, logger="nri_sla.plugin"):
        plugin.synchronize([first], [a])
        plugin.synchronize([second], [b])  # a reconnect before the first was restored
        plugin.restorer.restore()
    assert [e.id for e in plugin.registry] == [b.id]
    assert len([m for m in caplog.messages if m.startswith("synchronized:")]) == 1


def test_a_restore_that_fails_is_logged_once_and_the_connection_stays_up(
    tmp_path, caplog, monkeypatch
):
    node = helpers.make_node(2)

    def failing(node, live):
        raise OSError("the state directory went away")

    async def scenario():
        monkeypatch.setattr(restore, "restore_node", failing)
        async with helpers.plugin_session(node, tmp_path) as (sim, session, plugin):
            failed = [r for r in caplog.records if r.getMessage() == FAILED]
            _, ctr = await create(session, "after", exclusive(2), 2, namespace="b")
            await plugin.restorer.restored()  # nothing pending: the failed one is not run again
            monkeypatch.undo()
            pods, containers = running(sim)
            await session.synchronize(pods, containers)
            await plugin.restorer.restored()
            return failed, ctr.id, plugin.registry.get(ctr.id), session.drop_reason

    with caplog.at_level(logging.INFO, logger="nri_sla"):
        failed, ctr_id, entry, dropped = run(scenario())
    (record,) = failed
    assert record.levelno == logging.ERROR and "OSError" in (record.exc_text or "")
    assert [r.getMessage() for r in caplog.records].count(FAILED) == 1
    assert entry is not None and entry.id == ctr_id  # served, then restored again
    assert dropped == ""


def test_a_cpuset_an_answer_changed_while_the_restores_update_was_on_its_way_goes_again():
    """The restore widens an aligned container (its exclusive neighbour went away); a
    CreateContainer answered before the runtime applied that update narrows it again.
    containerd applies the UpdateContainers after that answer (one lock, the create's
    first), so the narrower cpuset is sent again once the first is acknowledged."""
    maker = SlaPlugin(helpers.make_node(2))
    records = []
    for name, asked, cpus in (("aligned", helpers.ALIGNED, 8), ("excl", exclusive(8, "0"), 8)):
        pod = make_pod(name, namespace=name, annotations=asked)
        ctr = make_container(pod, "c", resources=helpers.guaranteed(cpus))
        answer = maker.create_container(pod, ctr)
        ctr.annotations.update(answer.adjustment.annotations)
        ctr.linux.resources.cpu.cpus = answer.adjustment.linux.resources.cpu.cpus
        ctr.state = pb.CONTAINER_RUNNING
        for update in answer.updates:  # the aligned one narrowed around the exclusive 8
            records[0][1].linux.resources.cpu.cpus = update.linux.resources.cpu.cpus
        records.append((pod, ctr))
    (aligned_pod, aligned), _gone = records
    assert len(parse_cpulist(aligned.linux.resources.cpu.cpus)) == len(NODE0) - 8

    plugin = SlaPlugin(helpers.make_node(2))
    plugin.synchronize([aligned_pod], [aligned])
    sent = plugin.restorer.restore()
    assert [(u.container_id, u.linux.resources.cpu.cpus) for u in sent] == [
        (aligned.id, format_cpulist(NODE0))
    ]
    pod = make_pod("next", namespace="excl", annotations=exclusive(8, "0"))
    answer = plugin.create_container(pod, make_container(pod, "c", resources=helpers.guaranteed(8)))
    (narrowing,) = answer.updates
    again = plugin.restorer.overtaken(sent)
    assert [(u.container_id, u.linux.resources.cpu.cpus) for u in again] == [
        (aligned.id, narrowing.linux.resources.cpu.cpus)
    ]
    assert plugin.restorer.overtaken(again) == []  # as it is now: nothing more to send


def test_the_drift_pass_re_sends_what_an_answer_overtook_too():
    """A drift pass's updates are made between steps, with CreateContainers answered in
    between, so they can be overtaken as the restore's can: its periodic job re-sends
    them the same way."""
    plugin = SlaPlugin(helpers.make_node(2))
    (drift,) = [job for job in periodic_work(plugin.node, plugin) if job.name == "drift watch"]
    assert drift.again == plugin.restorer.overtaken
