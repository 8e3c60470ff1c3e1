"""Exclusive CPUs through a real `nri-sla run` process over its socket, against the runtime
simulator: a resize while the process is stopped rules from its next first Synchronize
(the neighbour's cpuset is back, the gauge and `nri-sla status` say the new count), and
an exclusive create or stop moves only the cpusets that must move."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

from nri_plugin.nri.pb import nri_pb2 as pb
from nri_plugin.simulated.runtime import RuntimeSimulator, make_container, make_pod
from nri_plugin.topology.cpulist import parse_cpulist
from tests.support.plugin_helpers import guaranteed
from tests.support.plugin_process import PluginProcess, free_port, until

CONFIG = """\
state-dir: {dir}/state
nri: {{socket: {dir}/nri.sock, reconnect-max-seconds: 0.5}}
metrics: {{address: "127.0.0.1:{port}"}}
status: {{socket: {dir}/status.sock}}
watch: {{interval-seconds: 0}}
log: {{format: json}}
"""


def exclusive(n: int) -> dict[str, str]:
    return {"sla.nri.io/pod": f"cpu: {{exclusive: {n}}}"}


def status(tmp: Path) -> dict:
    """`nri-sla status --json` as an operator runs it."""
    cli = Path(sys.executable).parent / "nri-sla"
    out = subprocess.run(
        [str(cli), "status", "--json", "--socket", str(tmp / "status.sock")],
        capture_output=True,
        text=True,
        timeout=20,
        check=True,
    )
    return json.loads(out.stdout)


def row(doc: dict, ctr: pb.Container) -> dict:
    (found,) = [c for c in doc["containers"] if c["id"] == ctr.id]
    return found


def cpuset(sim, ctr) -> frozenset[int]:
    return parse_cpulist(sim.state.containers[ctr.id].linux.resources.cpu.cpus)


def setup(tmp_path: Path) -> tuple[Path, int]:
    port = free_port()
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG.format(dir=tmp_path, port=port))
    return config, port


def test_a_resize_while_the_process_is_stopped_rules_from_its_first_synchronize(tmp_path):
    config, port = setup(tmp_path)
    log = tmp_path / "plugin.log"

    async def scenario():
        procs = [PluginProcess(config, log, port)]
        sim = await RuntimeSimulator(str(tmp_path / "nri.sock")).start()
        try:
            session = await sim.accept(timeout=20)
            big_pod = make_pod("big", namespace="t", annotations=exclusive(32))
            big = make_container(big_pod, "c", resources=guaranteed(32))
            plain_pod = make_pod("plain", namespace="x")
            plain = make_container(plain_pod, "c")
            for pod, ctr in ((big_pod, big), (plain_pod, plain)):
                await session.run_pod_sandbox(pod)
                await session.create_container(pod, ctr)
                await session.start_container(pod, ctr)
            narrowed = cpuset(sim, plain)
            procs[0].stop()
            # `crictl update` while nri-sla is away: the runtime applies the new request
            resources = sim.state.containers[big.id].linux.resources.cpu
            resources.shares.value, resources.quota.value = 1024, 100_000
            plugin = PluginProcess(config, log, port)
            procs.append(plugin)
            await sim.accept(timeout=20)
            await until(lambda: len(cpuset(sim, plain)) > 32, what="the neighbour widened")
            await until(
                lambda: plugin.metric("nri_sla_exclusive_cpus_in_use") == 1, what="the gauge"
            )
            doc = status(tmp_path)
            return narrowed, cpuset(sim, big), cpuset(sim, plain), row(doc, big)
        finally:
            await sim.close()
            for p in procs:
                p.stop()

    narrowed, big, plain, shown = asyncio.run(asyncio.wait_for(scenario(), 90))
    assert len(narrowed) == 32
    assert len(big) == 1 and plain == parse_cpulist("0-63") - big
    assert parse_cpulist(shown["exclusive_cpus"]) == big and "excl=1" in shown["sla"]


NEIGHBOURS = 10


def test_create_and_stop_through_the_process_move_only_what_must_move(tmp_path):
    """10 neighbours: the first exclusive create moves them (they held its CPUs), its stop
    and the next create-and-stop move nobody; a resize answers with its own cpuset alone,
    and the gauge and `nri-sla status` follow it at once."""
    config, port = setup(tmp_path)

    async def scenario():
        plugin = PluginProcess(config, tmp_path / "plugin.log", port)
        sim = await RuntimeSimulator(str(tmp_path / "nri.sock")).start()
        try:
            session = await sim.accept(timeout=20)
            for i in range(NEIGHBOURS):
                pod = make_pod(f"n{i}", namespace="x")
                await session.create_container(pod, make_container(pod, "c"))
            counts = []
            for cycle in range(2):
                pod = make_pod(f"e{cycle}", namespace="t", annotations=exclusive(4))
                ctr = make_container(pod, "c", resources=guaranteed(4))
                counts.append(len((await session.create_container(pod, ctr)).update))
                counts.append(len((await session.stop_container(pod, ctr)).update))
                await session.remove_container(pod, ctr)
            pod = make_pod("r", namespace="t", annotations=exclusive(8))
            ctr = make_container(pod, "c", resources=guaranteed(8))
            await session.create_container(pod, ctr)
            resized = await session.update_container(pod, ctr, guaranteed(3))
            gauge = plugin.metric("nri_sla_exclusive_cpus_in_use")
            return counts, resized.update, gauge, row(status(tmp_path), ctr), cpuset(sim, ctr)
        finally:
            await sim.close()
            plugin.stop()

    counts, resized, gauge, shown, cpus = asyncio.run(asyncio.wait_for(scenario(), 90))
    assert counts == [NEIGHBOURS, 0, 0, 0]
    assert [u.container_id for u in resized] == [shown["id"]]  # its own, no neighbour's
    assert gauge == 3 and len(cpus) == 3
    assert parse_cpulist(shown["exclusive_cpus"]) == cpus and "excl=3" in shown["sla"]
