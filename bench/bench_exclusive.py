#!/usr/bin/env python3
"""What an exclusive-CPU create and stop cost with 10, 100 and 1,000 neighbours: the
containers each answer updates, and the plugin's time in the handler (wall and CPU).

The plugin (`SlaPlugin` over the DGX-like snapshot, cgroup v2 planning: nothing written on
this host) is served over a real unix socket to the runtime simulator. For each neighbour
count, that many containers without an SLA are created (on the shared pool), then
--cycles create-and-stop cycles of a pod with `cpu: {exclusive: 4}` and a 4-CPU request.
The first create moves the neighbours off its CPUs (they held them); a stop moves nobody
(the CPUs wait out of every cpuset until the drift pass); the next create takes them
again. Printed per neighbour count: the first create's updates, then the median updates,
wall and CPU time of the later creates and of the stops, and what the widening drift
pass that follows costs (updates, wall time). With --before the same tree's figures are
printed beside those of a tree on PYTHONPATH, run in a child process.

    .venv/bin/python bench/bench_exclusive.py [--neighbours 10,100,1000] [--cycles 21]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from nri_plugin.config.values import NodeConfig
from nri_plugin.core.nodestate import NodeState
from nri_plugin.nri.stub import Stub
from nri_plugin.plan.allocator import Allocator
from nri_plugin.plan.rt_budget import RtBudget
from nri_plugin.plugin.handlers import SlaPlugin
from nri_plugin.simulated.runtime import (
    RuntimeSimulator,
    make_container,
    make_pod,
    make_resources,
)
from nri_plugin.topology.snapshot import load_snapshot

REPO = Path(__file__).resolve().parents[1]
SLA = {"sla.nri.io/pod": "cpu: {exclusive: 4}"}
REQUEST = make_resources(
    cpu_shares=4096, cpu_quota=400_000, cpu_period=100_000, memory_limit=1 << 30
)


class Timed:
    """The plugin's handlers, each call's wall and CPU time kept by event."""

    def __init__(self, plugin: SlaPlugin) -> None:
        self.times: dict[str, list[tuple[float, float]]] = {}
        for name in ("create_container", "stop_container"):
            real = getattr(plugin, name)

            def timed(*args, _real=real, _name=name):
                wall, cpu = time.perf_counter(), time.process_time()
                try:
                    return _real(*args)
                finally:
                    self.times.setdefault(_name, []).append(
                        (time.perf_counter() - wall, time.process_time() - cpu)
                    )

            setattr(plugin, name, timed)


def node() -> NodeState:
    snapshot = load_snapshot(REPO / "examples" / "dgx-like.yaml")
    config = NodeConfig()
    return NodeState(
        config,
        2,
        allocator=Allocator(snapshot.topology, snapshot.inventory),
        rt_budget=RtBudget(0.5),
    )


async def one(neighbours: int, cycles: int, tmp: Path) -> dict:
    socket_path = str(tmp / f"nri-{neighbours}.sock")
    async with RuntimeSimulator(socket_path) as sim:
        plugin = SlaPlugin(node())
        timed = Timed(plugin)  # before the stub takes the handlers
        stub = Stub(plugin, name="nri-sla", idx="50", socket_path=socket_path)
        serving = asyncio.create_task(stub.run())
        session = await sim.accept()
        plugin.on_registered(stub)
        await plugin.restorer.restored()
        try:
            # one cycle before the neighbours: the placement code's first use (imports,
            # caches) is not any count's first create
            pod = make_pod("warm", namespace="t", annotations=SLA)
            ctr = make_container(pod, "c", resources=REQUEST)
            await session.create_container(pod, ctr)
            await session.stop_container(pod, ctr)
            await session.remove_container(pod, ctr)
            for i in range(neighbours):
                pod = make_pod(f"n{i}", namespace="x")
                await session.create_container(pod, make_container(pod, "c"))
            timed.times.clear()
            created, stopped = [], []
            for cycle in range(cycles):
                pod = make_pod(f"e{cycle}", namespace="t", annotations=SLA)
                ctr = make_container(pod, "c", resources=REQUEST)
                created.append(len((await session.create_container(pod, ctr)).update))
                stopped.append(len((await session.stop_container(pod, ctr)).update))
                await session.remove_container(pod, ctr)
            started = time.perf_counter()
            widened = plugin.drift_pass() if hasattr(plugin, "drift_pass") else []
            widen_ms = (time.perf_counter() - started) * 1e3
        finally:
            stub.stop()
            serving.cancel()
            with contextlib.suppress(BaseException):  # ends as it was stopped
                await serving

    def us(event: str, index: int, skip_first: bool) -> float:
        values = timed.times[event][1 if skip_first else 0 :]
        return statistics.median(v[index] for v in values) * 1e6

    return {
        "neighbours": neighbours,
        "first_create_updates": created[0],
        "create_updates": statistics.median(created[1:]),
        "stop_updates": statistics.median(stopped),
        "create_wall_us": us("create_container", 0, True),
        "create_cpu_us": us("create_container", 1, True),
        "first_create_wall_us": timed.times["create_container"][0][0] * 1e6,
        "stop_wall_us": us("stop_container", 0, False),
        "stop_cpu_us": us("stop_container", 1, False),
        "widen_updates": len(widened),
        "widen_ms": widen_ms,
    }


def show(rows: list[dict], label: str) -> None:
    print(
        f"{label}: neighbours | first create: updates, wall | later creates: updates, "
        "wall/CPU | stops: updates, wall/CPU | drift pass: updates, wall"
    )
    for r in rows:
        print(
            f"  {r['neighbours']:>5} | {r['first_create_updates']:>5}, "
            f"{r['first_create_wall_us']:8.0f} us | {r['create_updates']:>5g}, "
            f"{r['create_wall_us']:6.0f}/{r['create_cpu_us']:.0f} us | "
            f"{r['stop_updates']:>5g}, {r['stop_wall_us']:6.0f}/{r['stop_cpu_us']:.0f} us | "
            f"{r['widen_updates']:>5}, {r['widen_ms']:.1f} ms"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--neighbours", default="10,100,1000")
    parser.add_argument("--cycles", type=int, default=21)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument(
        "--before", default=None, help="a tree whose code to measure too (PYTHONPATH), e.g. main's"
    )
    args = parser.parse_args()
    counts = [int(n) for n in args.neighbours.split(",")]
    with tempfile.TemporaryDirectory(prefix="nri-bench-") as tmp:
        rows = [asyncio.run(one(n, args.cycles, Path(tmp))) for n in counts]
    if args.json:
        print(json.dumps(rows))
        return 0
    print(f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}; {args.cycles} cycles")
    if args.before:
        import subprocess
        import sys

        env = {**os.environ, "PYTHONPATH": args.before}
        out = subprocess.run(
            [
                sys.executable,
                __file__,
                "--neighbours",
                args.neighbours,
                "--cycles",
                str(args.cycles),
                "--json",
            ],
            env=env,
            cwd="/",
            capture_output=True,
            text=True,
            check=True,
        )
        show(json.loads(out.stdout), f"before ({args.before})")
    show(rows, "this tree")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
