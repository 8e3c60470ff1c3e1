"""A property of the node's CPU pool over random sequences of pods, as the runtime
simulator drives the plugin: SLA and non-SLA containers, exclusive (hard and soft) and
NUMA-aligned requests, resizes, removals and plugin restarts. After every step, in the
cpusets the runtime holds: no exclusive CPU in two containers' cpusets, no container
below its CPU request, and the pool model equal to them (plugin_helpers.pool_breaches).

The sequences keep the scheduler's own rule (the CPU requests of live containers sum to
at most the node's 64 CPUs), as the kubelet admits nothing beyond it."""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from nri_plugin.nri.pb import nri_pb2 as pb
from nri_plugin.simulated.runtime import PluginCallError, make_container, make_pod
from tests.support.plugin_helpers import guaranteed, make_node, plugin_session, pool_breaches

CAPACITY = 64  # the DGX-like snapshot's CPUs
# aligned and exclusive pods, and node 0, are drawn more often: they meet there
KINDS = ("plain", "shared", "aligned", "aligned", "exclusive-hard", "exclusive-soft")

create = st.tuples(st.just("create"), st.sampled_from(KINDS), st.integers(1, 16),
                   st.sampled_from([None, "0", "0", "1"]))
resize = st.tuples(st.just("resize"), st.integers(0, 15), st.integers(1, 16))
remove = st.tuples(st.just("remove"), st.integers(0, 15))
restart = st.tuples(st.just("restart"))
steps = st.lists(st.one_of(create, create, create, resize, remove, restart), min_size=4,
                 max_size=16)


def annotations(kind: str, cpus: int, nodes: str | None) -> dict[str, str]:
    """The pod's SLA: none, one that places nothing, NUMA-aligned (hard), or exclusive
    CPUs (their whole CPUs: an even count, whole cores on the snapshot's 2-thread
    cores) on any node or the given one."""
    numa = f"\nnuma: {{nodes: '{nodes}'}}" if nodes is not None else ""
    if kind == "plain":
        return {}
    if kind == "shared":
        return {"sla.nri.io/pod": "memory: {max: 1Gi}"}
    if kind == "aligned":
        return {"sla.nri.io/pod": f"numa: {{nodes: '{nodes or 0}'}}"}
    mode = kind.removeprefix("exclusive-")
    return {"sla.nri.io/pod": f"cpu: {{exclusive: {cpus}}}{numa}",
            "sla.nri.io/enforcement": mode}


async def play(sequence, tmp: Path) -> list[str]:
    """Run the steps; the first breach found (with the steps so far), or []."""
    live: list[tuple[pb.PodSandbox, pb.Container, int]] = []  # pod, container, request
    stored_pods: list[pb.PodSandbox] = []
    stored: list[pb.Container] = []
    n = 0
    async with contextlib.AsyncExitStack() as stack:
        sim, session, plugin = await stack.enter_async_context(
            plugin_session(make_node(2), tmp))
        for i, step in enumerate(sequence):
            used = sum(r for _, _, r in live)
            if step[0] == "create":
                _, kind, cpus, nodes = step
                cpus = cpus * 2 if kind.startswith("exclusive") else cpus
                if used + cpus > CAPACITY:
                    continue  # the scheduler would not place it here
                n += 1
                pod = make_pod(f"p{n}", namespace=f"ns{n % 3}",
                               annotations=annotations(kind, cpus, nodes))
                ctr = make_container(pod, "c", resources=guaranteed(cpus))
                with contextlib.suppress(PluginCallError):  # refused: never created
                    await session.create_container(pod, ctr)
                    live.append((pod, ctr, cpus))
            elif step[0] == "resize" and live:
                pod, ctr, old = live[step[1] % len(live)]
                cpus = step[2] * 2 if old % 2 == 0 else step[2]
                if used - old + cpus > CAPACITY:
                    continue  # the kubelet would not admit the resize
                with contextlib.suppress(PluginCallError):  # refused: stays as it was
                    await session.update_container(pod, ctr, guaranteed(cpus))
                    live[live.index((pod, ctr, old))] = (pod, ctr, cpus)
            elif step[0] == "remove" and live:
                pod, ctr, old = live.pop(step[1] % len(live))
                await session.stop_container(pod, ctr)
                await session.remove_container(pod, ctr)
            elif step[0] == "restart":
                stored_pods = list(sim.state.pods.values()) or [p for p, _, _ in live]
                stored = list(sim.state.containers.values())
                for ctr in stored:
                    ctr.state = pb.CONTAINER_RUNNING
                await stack.aclose()
                sim, session, plugin = await stack.enter_async_context(plugin_session(
                    make_node(2), tmp, pods=stored_pods, containers=stored))
            breaches = pool_breaches(sim, plugin.node)
            if breaches:
                return [f"after step {i} of {sequence[:i + 1]}", *breaches]
    return []


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps)
# A resize down gives exclusive CPUs back and one up again runs them on the shared pool
# too: a restart must not take back, from the record, what the plain container shares.
@example([("create", "exclusive-hard", 2, None), ("resize", 0, 1), ("create", "plain", 1, None),
          ("resize", 0, 2), ("restart",)])
def test_the_cpu_pool_holds_over_random_pods(sequence):
    with tempfile.TemporaryDirectory() as tmp:
        found = asyncio.run(asyncio.wait_for(play(sequence, Path(tmp)), 60))
    assert not found, "\n".join(found)
