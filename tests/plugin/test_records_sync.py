"""Records across restarts and reconnects, over a real unix socket to the runtime simulator:
a pod's own `applied` grants nothing and breaks nothing, and after any disconnect the
plugin holds exactly what the runtime's live containers hold."""

from __future__ import annotations

import asyncio
import json
import logging
import time

from nri_plugin.nri.pb import nri_pb2 as pb
from nri_plugin.nri.service import run_service
from nri_plugin.ops.metrics import Metrics
from nri_plugin.plan.record import decode_record, record_text, sign_record
from nri_plugin.plugin.service import build_service
from nri_plugin.simulated.runtime import (
    RuntimeSimulator,
    SimulatorOptions,
    make_container,
    make_pod,
)
from nri_plugin.topology.cpulist import parse_cpulist
from tests.support.plugin_helpers import (
    RECORD_KEY,
    gpu_grant,
    make_node,
    permissive_node,
    plugin_session,
    restore_updates,
)

APPLIED, WARNINGS = "sla.nri.io/applied", "sla.nri.io/warnings"
ALL_GPUS = [f"GPU-d0000000-0000-0000-0000-00000000000{i}" for i in range(8)]


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


def counted(metrics: Metrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(f"nri_sla_{name}", labels) or 0.0


async def created(
    session,
    name: str,
    sla: str | None,
    *,
    namespace: str = "default",
    annotations: dict[str, str] | None = None,
    created_at: int = 0,
    gpus: tuple[int, ...] = (),
):
    """A pod + one container (granted GPUs `gpus` by a device plugin) created through the
    plugin; (pod, container, response)."""
    pod = make_pod(name, namespace=namespace, annotations={"sla.nri.io/pod": sla} if sla else None)
    await session.run_pod_sandbox(pod)
    ctr = make_container(pod, "c", annotations=annotations, cdi_devices=gpu_grant(*gpus))
    ctr.created_at = created_at
    return pod, ctr, await session.create_container(pod, ctr)


def forged_container(name: str, applied, namespace: str = "default"):
    """A running container without SLA whose spec carries an `applied` the pod set itself
    (a runtime handler whose pod_annotations pass sla.nri.io/* into containers);
    `applied(container id)` gives the text."""
    pod = make_pod(name, namespace=namespace)
    ctr = make_container(pod, "c", state=pb.CONTAINER_RUNNING)
    ctr.annotations[APPLIED] = applied(ctr.id)
    return pod, ctr


def holdings(plugin) -> tuple:
    allocator = plugin.node.allocator
    return (
        allocator.gpus_in_use(),
        allocator.exclusive_cpus_in_use(),
        plugin.node.rt_budget.owners(),
        sorted(e.id for e in plugin.registry if e.decided_plan),
        sorted(e.id for e in plugin.registry if e.writes_owed),
    )


def test_forged_records_grant_nothing_and_break_nothing(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="nri_sla.plugin")
    everything = {
        "v": 2,
        "path": "nri",
        "enforcement": "hard",
        "cgroup_version": 2,
        "placement_record": {"gpus": ALL_GPUS, "exclusive": "0-63"},
    }

    async def scenario():
        async with plugin_session(permissive_node(2), tmp_path) as (sim, session, _p):
            holder_pod, holder, _ = await created(session, "holder", "gpu: {count: 2}", gpus=(0, 1))
            state = sim.state
        genuine = state.containers[holder.id].annotations[APPLIED]
        hostile = {
            "no MAC": lambda _id: json.dumps(everything),
            "nested": lambda _id: '{"v":2,"x":' + "[" * 8000 + "]" * 8000 + "}",
            "huge": lambda _id: (
                '{"v":2,"placement_record":{"exclusive":"0-' + "9" * (1 << 20) + '"}}'
            ),
            "copied from the holder": lambda _id: genuine,
            # As if the key had leaked: authentic, but a negative RT period.
            "negative period": lambda cid: sign_record(
                record_text({**everything, "rt_runtime": 5000, "rt_period": -1}), cid, RECORD_KEY
            ),
        }
        pods, containers = [holder_pod], [state.containers[holder.id]]
        for i, text in enumerate(hostile.values()):
            pod, ctr = forged_container(f"forger-{i}", text)
            pods.append(pod)
            containers.append(ctr)
        metrics = Metrics()
        started = time.perf_counter()
        async with plugin_session(
            permissive_node(2), tmp_path, pods=pods, containers=containers, metrics=metrics
        ) as (_sim, session, plugin):
            synced = time.perf_counter() - started
            kept = holdings(plugin)
            six = await created(session, "six", "gpu: {count: 6}", gpus=(2, 3, 4, 5, 6, 7))
            held = plugin.node.allocator.gpus_in_use()
        return holder.id, kept, six, held, metrics, synced

    holder_id, kept, six, held, metrics, synced = run(scenario())
    gpus, exclusive, _rt, plans, _unstarted = kept
    assert plans == [holder_id] and exclusive == {}
    assert sorted(gpus) == [0, 1] and all(h == (holder_id,) for h in gpus.values())
    # the forgers hold none of the other six: each is six's alone
    assert {i: h for i, h in held.items() if i >= 2} == dict.fromkeys(range(2, 8), (six[1].id,))
    assert counted(metrics, "gpus_shared") == 0
    assert counted(metrics, "records_rejected_total", problem="unauthenticated") == 3
    assert counted(metrics, "records_rejected_total", problem="invalid") == 2
    assert synced < 5  # registration + Synchronize with a 1 MiB and an 8000-deep record
    ignored = [r for r in caplog.records if r.getMessage() == "record ignored"]
    assert len(ignored) == 5
    assert {r.fields["problem"] for r in ignored} == {"unauthenticated", "invalid"}
    assert any("not written by nri-sla for this container" in r.fields["error"] for r in ignored)
    assert any("rt_period: must be a whole number" in r.fields["error"] for r in ignored)


def test_synchronize_after_a_disconnect_releases_what_went_away(tmp_path):
    """Hold GPUs, exclusive CPUs and RT budget, lose containerd, let containers die while
    it is away, reconnect: the service stays up and registers again, and Synchronize (in
    several chunks) leaves the plugin holding exactly what the live containers hold; an
    aligned neighbour gets back the CPUs the dead one held exclusively. Another reconnect
    with the same containers changes nothing: nothing is doubled."""
    socket_path = str(tmp_path / "nri.sock")
    metrics = Metrics()

    async def scenario():
        stop = asyncio.Event()
        plugin, options = build_service(
            permissive_node(1),
            metrics,
            socket=socket_path,
            handle_signals=False,
            stop_event=stop,
            backoff_initial=0.05,
            backoff_max=0.1,
        )
        service = asyncio.create_task(run_service(plugin, options))
        async with RuntimeSimulator(socket_path, SimulatorOptions()) as sim:
            session = await sim.accept()
            ids, cpusets = {}, {}
            for name, sla in (
                ("neighbour", "numa: {nodes: '0'}"),
                ("gone-cpus", "numa: {nodes: '0'}\ncpu: {exclusive: 4}"),
                ("gone-gpus", "gpu: {count: 4, align: false}"),
                ("gone-rt", "cpu: {rt-runtime: 10ms}"),
                ("stays", "gpu: {count: 2, align: false}\ncpu: {exclusive: 2}\nnuma: {nodes: '1'}"),
                ("unstarted", "numa: {nodes: '1'}"),
            ):
                grant = {"gone-gpus": (0, 1, 2, 3), "stays": (4, 5)}.get(name, ())
                pod, ctr, resp = await created(session, name, sla, gpus=grant)
                if name != "unstarted":
                    await session.start_container(pod, ctr)
                ids[name], cpusets[name] = ctr.id, resp.adjust.linux.resources.cpu.cpus
            before = holdings(plugin)
            narrowed = sim.state.containers[ids["neighbour"]].linux.resources.cpu.cpus
            state = sim.state
        # containerd is down; three containers die with it (their shims report the exits)
        state.containers[ids["gone-cpus"]].state = pb.CONTAINER_STOPPED
        del state.containers[ids["gone-gpus"]], state.containers[ids["gone-rt"]]
        after = []
        for _ in range(2):  # a second reconnect over the same containers
            async with RuntimeSimulator(
                socket_path,
                SimulatorOptions(sync_chunk_bytes=4096),
                pods=state.pods.values(),
                containers=state.containers.values(),
            ) as sim:
                session = await sim.accept()
                await plugin.restorer.restored()
                after.append(
                    (
                        holdings(plugin),
                        restore_updates(session),
                        counted(metrics, "registered"),
                        counted(metrics, "gpus_in_use"),
                        counted(metrics, "exclusive_cpus_in_use"),
                    )
                )
                if len(after) == 2:  # the kubelet gives the dead containers' GPUs again
                    _pod, _c, six = await created(
                        session, "six", "gpu: {count: 6, align: false}", gpus=(0, 1, 2, 3, 6, 7)
                    )
                    six = (six, holdings(plugin)[0], counted(metrics, "gpus_shared"))
        stop.set()
        await asyncio.wait_for(service, 5)
        return ids, cpusets, narrowed, before, after, six

    ids, cpusets, narrowed, before, after, six = run(scenario())
    gpus, exclusive, rt, plans, unstarted = before
    assert sum(len(h) for h in gpus.values()) == 6 and len(exclusive) == 6
    assert rt == (ids["gone-rt"],) and len(plans) == 6 and unstarted == [ids["unstarted"]]
    assert len(parse_cpulist(narrowed)) == len(parse_cpulist(cpusets["neighbour"])) - 4

    (first, updates, registered, gpus_metric, cpus_metric), (second, replayed, *_) = after
    gpus, exclusive, rt, plans, unstarted = first
    assert {owner for held in gpus.values() for owner in held} == {ids["stays"]}
    assert len(gpus) == 2 and set(exclusive.values()) == {ids["stays"]} and len(exclusive) == 2
    assert rt == ()
    assert plans == sorted([ids["neighbour"], ids["stays"], ids["unstarted"]])
    assert unstarted == [ids["unstarted"]]  # its StartContainer still owes the writes
    assert (registered, gpus_metric, cpus_metric) == (1, 2, 2)
    # The neighbour had been narrowed around gone-cpus' 4 CPUs: it gets them back.
    assert [(u.container_id, u.linux.resources.cpu.cpus) for u in updates] == [
        (ids["neighbour"], cpusets["neighbour"])
    ]
    assert second == first and replayed == []  # replayed: nothing taken twice or moved
    assert counted(metrics, "reconnects_total") == 2
    six, gpus, shared = six
    assert not six.adjust.CDI_devices and len(gpus) == 8 and shared == 0  # no one held twice


def test_pod_set_outputs_are_removed_or_overwritten(tmp_path):
    """A pod's own `applied`/`warnings` never stays on a container nri-sla answered for:
    with no SLA both are removed (NRI's "-key"), with an SLA `applied` is overwritten by
    the plugin's record and a stale `warnings` removed."""
    forged = {APPLIED: '{"v":2,"placement_record":{"gpus":["0"]}}', WARNINGS: "none, trust me"}

    async def scenario():
        async with plugin_session(permissive_node(2), tmp_path) as (sim, session, plugin):
            _p, plain, plain_resp = await created(session, "plain", None, annotations=forged)
            _p, sla, sla_resp = await created(session, "sla", "cpu: {limit: 1}", annotations=forged)
            _p, clean, clean_resp = await created(session, "clean", None)
            stored = {
                name: dict(sim.state.containers[c.id].annotations)
                for name, c in (("plain", plain), ("sla", sla), ("clean", clean))
            }
            record = stored["sla"].get(APPLIED)
            decoded = decode_record(record, sla.id, plugin.node.record_key)
        return plain_resp, sla_resp, clean_resp, stored, decoded

    plain_resp, sla_resp, clean_resp, stored, decoded = run(scenario())
    assert dict(plain_resp.adjust.annotations) == {"-" + APPLIED: "", "-" + WARNINGS: ""}
    assert APPLIED not in stored["plain"] and WARNINGS not in stored["plain"]
    annotations = dict(sla_resp.adjust.annotations)
    assert annotations.pop("-" + WARNINGS) == "" and set(annotations) == {APPLIED}
    assert WARNINGS not in stored["sla"]
    assert decoded[1].cpu_quota == 100_000
    assert not clean_resp.HasField("adjust")  # nothing to remove: no adjustment at all


def test_conflicting_records_the_earlier_container_wins(tmp_path, caplog):
    """Two authentic records claiming the same exclusive CPUs (made by two plugin
    instances that did not know of each other): the earlier-created container keeps them,
    whatever order the runtime lists them in; the other's claim is ignored with a warning
    naming both. GPUs are never a conflict: both were granted GPU 0 by the kubelet, so
    both hold it, and the sharing is reported instead."""
    caplog.set_level(logging.WARNING, logger="nri_sla.plugin")

    async def one(name: str):
        async with plugin_session(permissive_node(2), tmp_path) as (sim, session, _p):
            pod, ctr, _ = await created(session, name, "cpu: {exclusive: 4}", gpus=(0,))
            return pod, sim.state.containers[ctr.id]

    async def scenario(first_created: str, order: tuple[str, str]):
        made = {name: await one(name) for name in order}
        made["a"][1].created_at, made["b"][1].created_at = (
            (1, 2) if first_created == "a" else (2, 1)
        )
        metrics = Metrics()
        async with plugin_session(
            permissive_node(2),
            tmp_path,
            metrics=metrics,
            pods=[made[n][0] for n in order],
            containers=[made[n][1] for n in order],
        ) as (_s, _ss, plugin):
            return (
                {n: made[n][1].id for n in order},
                holdings(plugin),
                counted(metrics, "records_rejected_total", problem="conflict"),
                counted(metrics, "gpus_shared"),
            )

    for first_created, order in (("a", ("a", "b")), ("a", ("b", "a")), ("b", ("a", "b"))):
        caplog.clear()
        ids, (gpus, cpus, _rt, plans, _u), conflicts, shared = run(scenario(first_created, order))
        winner, loser = ids[first_created], ids["b" if first_created == "a" else "a"]
        assert plans == [winner] and len(cpus) == 4
        assert all(held == winner for held in cpus.values())
        assert conflicts == 1
        (warning,) = [r for r in caplog.records if r.getMessage() == "record ignored"]
        assert warning.fields["container"] == loser
        assert warning.fields["problem"] == "conflict" and winner in warning.fields["error"]
        assert gpus == {0: tuple(sorted(ids.values()))} and shared == 1
        (pair,) = [r for r in caplog.records if r.getMessage() == "GPU shared by two containers"]
        assert {pair.fields["container"], pair.fields["other"]} == set(ids.values())


def test_restore_holds_records_the_node_policy_no_longer_allows(tmp_path):
    """Records made while a namespace was allowed realtime and GPUs, once the node config
    no longer allows them (or the pod is unknown): still held (the containers use them
    until they end; nothing is handed out twice), each reported as out of policy."""

    async def scenario():
        async with plugin_session(permissive_node(1), tmp_path) as (sim, session, _p):
            rt_pod, rt, _ = await created(
                session, "rt", "cpu: {rt-runtime: 10ms}", namespace="team-a"
            )
            gpu_pod, gpu, _ = await created(
                session, "gpu", "gpu: {count: 1}", namespace="team-a", gpus=(3,)
            )
            _o, orphan, _ = await created(session, "orphan", "cpu: {exclusive: 2}")
            containers = [sim.state.containers[c.id] for c in (rt, gpu, orphan)]
        metrics = Metrics()
        node = make_node(1, realtime=(), gpus=("ml-*",))
        async with plugin_session(
            node, tmp_path, metrics=metrics, pods=[rt_pod, gpu_pod], containers=containers
        ) as (_s, _ss, plugin):
            return holdings(plugin), metrics

    (gpus, exclusive, rt, plans, _u), metrics = run(scenario())
    assert len(gpus) == 1 and len(exclusive) == 2 and len(rt) == 1 and len(plans) == 3
    assert counted(metrics, "records_out_of_policy_total") == 3
    assert counted(metrics, "records_rejected_total", problem="invalid") == 0


def test_a_record_from_before_issue_18_keeps_its_gpus_and_sharing_is_reported(tmp_path, caplog):
    """Upgrade: a running container whose record lists GPUs nri-sla chose and injected
    (gpu_cdi, flags of the old format) keeps them until it ends; a new container the
    kubelet granted one of them can open it too: logged once per pair, counted, and the
    count drops back when the old container stops."""
    caplog.set_level(logging.WARNING, logger="nri_sla.plugin")
    old_pod = make_pod("old", namespace="ml", annotations={"sla.nri.io/pod": "gpu: {count: 2}"})
    old = make_container(old_pod, "c", state=pb.CONTAINER_RUNNING)
    body = {
        "v": 2,
        "path": "nri",
        "enforcement": "hard",
        "cgroup_version": 2,
        "gpu_cdi": [f"nvidia.com/gpu={ALL_GPUS[0]}", f"nvidia.com/gpu={ALL_GPUS[1]}"],
        "placement_record": {"gpus": ALL_GPUS[:2], "shared": True},
    }
    old.annotations[APPLIED] = sign_record(record_text(body), old.id, RECORD_KEY)
    metrics = Metrics()

    async def scenario():
        async with plugin_session(
            permissive_node(2), tmp_path, pods=[old_pod], containers=[old], metrics=metrics
        ) as (_s, session, plugin):
            restored = plugin.node.allocator.gpus_in_use()
            _p, new, resp = await created(session, "new", "gpu: {count: 1}", gpus=(1,))
            shared = (plugin.node.allocator.gpus_in_use(), counted(metrics, "gpus_shared"))
            await session.stop_container(old_pod, old)
            after = (plugin.node.allocator.gpus_in_use(), counted(metrics, "gpus_shared"))
        return restored, new, resp, shared, after

    restored, new, resp, shared, after = run(scenario())
    assert restored == {0: (old.id,), 1: (old.id,)}
    assert not resp.adjust.CDI_devices  # nri-sla adds nothing to the new one
    assert shared == ({0: (old.id,), 1: tuple(sorted((old.id, new.id)))}, 1)
    (pair,) = [r for r in caplog.records if r.getMessage() == "GPU shared by two containers"]
    assert {pair.fields["container"], pair.fields["other"]} == {old.id, new.id}
    assert "ml/old c" in pair.fields["pods"] and "default/new c" in pair.fields["pods"]
    assert after == ({1: (new.id,)}, 0)
