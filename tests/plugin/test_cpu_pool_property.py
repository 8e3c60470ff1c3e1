"""A property of the node's CPU pool over random sequences of pods, as the runtime
simulator drives the plugin: SLA and non-SLA containers, exclusive (hard and soft, any
count: not whole cores) and NUMA-aligned requests, resizes, removals and plugin restarts,
with resizes while the plugin is away. After every step, in the cpusets the runtime
holds: no exclusive CPU in two containers' cpusets, no container below its CPU request,
and the pool model equal to them (plugin_helpers.pool_breaches); and no container holding
more exclusive CPUs than its current request.

The sequences keep the scheduler's own rule (the CPU requests of live containers sum to
at most the node's 64 CPUs), as the kubelet admits nothing beyond it."""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from nri_plugin.nri.pb import nri_pb2 as pb
from nri_plugin.simulated.runtime import PluginCallError, make_container, make_pod
from tests.support.plugin_helpers import guaranteed, make_node, plugin_session, pool_breaches

CAPACITY = 64  # the DGX-like snapshot's CPUs
# aligned and exclusive pods, and node 0, are drawn more often: they meet there
KINDS = ("plain", "shared", "aligned", "aligned", "exclusive-hard", "exclusive-soft")

create = st.tuples(
    st.just("create"),
    st.sampled_from(KINDS),
    st.integers(1, 16),
    st.sampled_from([None, "0", "0", "1"]),
)
resize = st.tuples(st.just("resize"), st.integers(0, 15), st.integers(1, 16))
remove = st.tuples(st.just("remove"), st.integers(0, 15))
# the kubelet's resizes while the plugin is away (index, new request), then the restart
restart = st.tuples(
    st.just("restart"), st.lists(st.tuples(st.integers(0, 15), st.integers(1, 16)), max_size=3)
)
steps = st.lists(
    st.one_of(create, create, create, resize, remove, restart), min_size=4, max_size=16
)


def annotations(kind: str, cpus: int, nodes: str | None) -> dict[str, str]:
    """The pod's SLA: none, one that places nothing, NUMA-aligned (hard), or exclusive
    CPUs (the whole CPUs of its request, odd counts too: not whole cores on the
    snapshot's 2-thread cores) on any node or the given one."""
    numa = f"\nnuma: {{nodes: '{nodes}'}}" if nodes is not None else ""
    if kind == "plain":
        return {}
    if kind == "shared":
        return {"sla.nri.io/pod": "memory: {max: 1Gi}"}
    if kind == "aligned":
        return {"sla.nri.io/pod": f"numa: {{nodes: '{nodes or 0}'}}"}
    mode = kind.removeprefix("exclusive-")
    return {"sla.nri.io/pod": f"cpu: {{exclusive: {cpus}}}{numa}", "sla.nri.io/enforcement": mode}


async def play(sequence, tmp: Path) -> list[str]:
    """Run the steps; the first breach found (with the steps so far), or []."""
    live: list[tuple[pb.PodSandbox, pb.Container, int, str]] = []  # ..., request, kind
    stored_pods: list[pb.PodSandbox] = []
    stored: list[pb.Container] = []
    n = 0
    async with contextlib.AsyncExitStack() as stack:
        sim, session, plugin = await stack.enter_async_context(plugin_session(make_node(2), tmp))
        for i, step in enumerate(sequence):
            used = sum(r for _, _, r, _ in live)
            if step[0] == "create":
                _, kind, cpus, nodes = step
                if used + cpus > CAPACITY:
                    continue  # the scheduler would not place it here
                n += 1
                pod = make_pod(
                    f"p{n}", namespace=f"ns{n % 3}", annotations=annotations(kind, cpus, nodes)
                )
                ctr = make_container(pod, "c", resources=guaranteed(cpus))
                with contextlib.suppress(PluginCallError):  # refused: never created
                    await session.create_container(pod, ctr)
                    live.append((pod, ctr, cpus, kind))
            elif step[0] == "resize" and live:
                pod, ctr, old, kind = live[step[1] % len(live)]
                cpus = step[2]
                if used - old + cpus > CAPACITY:
                    continue  # the kubelet would not admit the resize
                with contextlib.suppress(PluginCallError):  # refused: stays as it was
                    await session.update_container(pod, ctr, guaranteed(cpus))
                    live[live.index((pod, ctr, old, kind))] = (pod, ctr, cpus, kind)
            elif step[0] == "remove" and live:
                pod, ctr, old, _ = live.pop(step[1] % len(live))
                await session.stop_container(pod, ctr)
                await session.remove_container(pod, ctr)
            elif step[0] == "restart":
                # every live container's pod, as the runtime reports them (the steps create
                # containers without RunPodSandbox: the simulator knows only the pods a
                # restart handed it)
                stored_pods = list({**sim.state.pods, **{p.id: p for p, _, _, _ in live}}.values())
                stored = list(sim.state.containers.values())
                for ctr in stored:
                    ctr.state = pb.CONTAINER_RUNNING
                await stack.aclose()
                for index, cpus in step[1]:
                    if live:
                        live = away_resize(live, index % len(live), cpus, stored)
                sim, session, plugin = await stack.enter_async_context(
                    plugin_session(make_node(2), tmp, pods=stored_pods, containers=stored)
                )
            breaches = pool_breaches(sim, plugin.node) + over_request(sim, plugin.node)
            if breaches:
                return [f"after step {i} of {sequence[: i + 1]}", *breaches]
    return []


def away_resize(live, index: int, cpus: int, stored: list[pb.Container]):
    """The kubelet resized live[index] to `cpus` while the plugin was away (the runtime
    applied it to its stored container), within the node's capacity; a resize up of an
    aligned container is left out: the node's total admits it, its NUMA node may not
    hold it, and nri-sla, away, could not refuse it."""
    pod, ctr, old, kind = live[index]
    used = sum(r for _, _, r, _ in live)
    if used - old + cpus > CAPACITY or (kind == "aligned" and cpus > old):
        return live
    for kept in stored:
        if kept.id == ctr.id:
            resources = kept.linux.resources.cpu
            resources.shares.value, resources.quota.value = cpus * 1024, cpus * 100_000
    return [*live[:index], (pod, ctr, cpus, kind), *live[index + 1 :]]


def over_request(sim, node) -> list[str]:
    """Containers holding more exclusive CPUs than their current CPU request (the
    runtime's, as it holds it now): none may, whatever the restarts and resizes."""
    from nri_plugin.plugin.handlers import granted_resources

    held: dict[str, int] = {}
    for owner in node.allocator.exclusive_cpus_in_use().values():
        held[owner] = held.get(owner, 0) + 1
    found = []
    for ctr in sim.state.containers.values():
        millis = granted_resources(ctr.linux.resources).cpu_request_millis or 0
        if held.get(ctr.id, 0) > millis // 1000:
            found.append(
                f"{ctr.name} ({ctr.id[:8]}): {held[ctr.id]} exclusive CPUs for "
                f"a request of {millis}m"
            )
    return found


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps)
# A resize down gives exclusive CPUs back and one up again runs them on the shared pool
# too: a restart must not take back, from the record, what the plain container shares.
@example(
    [
        ("create", "exclusive-hard", 2, None),
        ("resize", 0, 1),
        ("create", "plain", 1, None),
        ("resize", 0, 2),
        ("restart", []),
    ]
)
# A pod resized from 16 to 1 CPU while the plugin is away keeps no more than 1, and an
# odd count is never rounded up to whole cores.
@example(
    [
        ("create", "exclusive-hard", 16, None),
        ("create", "plain", 1, None),
        ("create", "exclusive-soft", 3, "1"),
        ("restart", [(0, 1), (2, 1)]),
        ("create", "exclusive-hard", 15, None),
    ]
)
# CPUs given back by a stop wait for the drift pass: a resize that gives the neighbour
# every CPU again must send it, though a container without a cpuset would need none.
@example(
    [
        ("create", "plain", 1, None),
        ("create", "exclusive-hard", 1, None),
        ("remove", 1),
        ("resize", 0, 1),
    ]
)
# A pod created after one restart and resized down before the next (its pod reported).
@pytest.mark.slow
@example(
    [
        ("create", "plain", 1, None),
        ("restart", []),
        ("create", "exclusive-hard", 14, None),
        ("restart", [(1, 12)]),
    ]
)
def test_the_cpu_pool_holds_over_random_pods(sequence):
    with tempfile.TemporaryDirectory() as tmp:
        found = asyncio.run(asyncio.wait_for(play(sequence, Path(tmp)), 60))
    assert not found, "\n".join(found)
