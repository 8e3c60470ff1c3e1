"""Container lifecycles leave nothing behind in the plugin: after a warm-up, 600 more
create/start/stop/remove lifecycles (GPUs, exclusive CPUs, RT budget and plain limits in
turn, over a real unix socket) grow the traced Python heap by less than 220 bytes per
lifecycle (bounded caches filling up; the smaller of two such rounds, see below) and
leave no owner. bench/bench_lifecycles.py runs 10,000 against a real `nri-sla run` and
samples its RSS."""

from __future__ import annotations

import asyncio
import gc
import logging
import tracemalloc

import pytest

from nri_plugin.simulated.runtime import make_container, make_pod
from tests.support.plugin_helpers import (
    gpu_grant,
    make_pod_cgroups,
    permissive_node,
    plugin_session,
    remove_pod_cgroups,
)

SLAS = (
    "gpu: {count: 1, align: false}",
    "cpu: {exclusive: 2}",
    "cpu: {rt-runtime: 1ms}",
    "cpu: {limit: 1}\nmemory: {max: 1Gi}",
    None,
)
WARM_UP, MEASURED = 200, 600
# Bytes the heap may grow over the measured lifecycles: bounded caches (fnmatch's, the
# decision log's) still fill by a few KiB; a leak of even one protobuf container per
# lifecycle (about 2.5 KiB) would pass 1.5 MiB.
BOUND = 128 << 10


@pytest.mark.slow
def test_lifecycles_do_not_grow_the_heap(tmp_path, v1_tree, caplog):
    # Every decision is a log line; pytest keeps the records it captures, which is not
    # the plugin's memory: only errors are logged here.
    caplog.set_level(logging.ERROR, logger="nri_sla")

    async def scenario():
        node = permissive_node(1, v1_tree)
        async with plugin_session(node, tmp_path) as (_sim, session, plugin):

            async def lifecycles(start: int, count: int) -> None:
                for i in range(start, start + count):
                    sla = SLAS[i % len(SLAS)]
                    pod = make_pod(f"p{i}", annotations={"sla.nri.io/pod": sla} if sla else None)
                    grant = gpu_grant(i % 8) if sla and "gpu" in sla else ()
                    ctr = make_container(pod, "c", cdi_devices=grant)
                    rt = sla is not None and "rt-runtime" in sla
                    if rt:  # the RT room needs the pod's cgroups (as the kubelet makes them)
                        make_pod_cgroups(v1_tree, ctr.linux.cgroups_path)
                    await session.container_life_cycle(pod, ctr)
                    if rt:
                        remove_pod_cgroups(v1_tree, ctr.linux.cgroups_path)

            # Traced from the start: a table the warm-up grew (the interpreter's interned
            # strings, which pathlib feeds) may be rebuilt later, and only a block traced
            # when it was made counts as freed then.
            # That table is the interpreter's, shared with every test before this one: it
            # doubles (a new block of a few MiB, the old one untraced) whenever its free
            # slots run out, which the earlier tests decide. Two measured rounds, the
            # smaller growth kept: a doubling leaves room for far more than one round's
            # strings, so it lands in one round at most, while a leak grows both.
            tracemalloc.start()
            await lifecycles(0, WARM_UP)
            rounds = []
            for start in (WARM_UP, WARM_UP + MEASURED):
                gc.collect()
                before = tracemalloc.get_traced_memory()[0]
                await lifecycles(start, MEASURED)
                gc.collect()
                grown = tracemalloc.get_traced_memory()[0] - before
                rounds.append((grown, tracemalloc.take_snapshot().statistics("lineno")[:5]))
            tracemalloc.stop()
            grown, top = min(rounds, key=lambda r: r[0])
            return grown, top, plugin

    grown, top, plugin = asyncio.run(asyncio.wait_for(scenario(), 120))
    assert grown < BOUND, "\n".join(str(s) for s in top)
    node = plugin.node
    assert len(plugin.registry) == 0 and node.usage() == (0, 0)
    assert node.rt_budget.owners() == () and not len(node.cpu_pool)
    assert not plugin.registry._by_pod  # no pod left behind
