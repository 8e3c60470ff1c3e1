#!/usr/bin/env python3
"""NRI transport benchmark: simulator (runtime side, this process) <-> plugin (a child
process running nri_plugin.nri.Stub) over a real unix socket.

Prints CreateContainer round-trip latency (p50/p99 over --requests calls with
golden-sized messages and a trivial handler), Synchronize time for 1,000 and 10,000
containers, and the plugin's RSS.

    .venv/bin/python bench/bench_transport.py [--requests 10000] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time

from nri_plugin.simulated.runtime import RuntimeSimulator, make_container, make_pod

PLUGIN = r"""
import asyncio, sys
from nri_plugin.nri.pb import nri_pb2 as pb
from nri_plugin.nri.stub import CreateResult, Stub

class Trivial:
    def __init__(self):
        self.known = {}
        adj = pb.ContainerAdjustment()
        adj.annotations["sla.nri.io/applied-by"] = "bench"
        adj.linux.resources.cpu.quota.value = 50000
        adj.linux.resources.cpu.period.value = 100000
        adj.linux.resources.memory.limit.value = 268435456
        self.adj = adj

    def synchronize(self, pods, containers):
        self.known = {c.id: c for c in containers}

    def create_container(self, pod, ctr):
        return CreateResult(self.adj)

    def remove_container(self, pod, ctr):
        self.known.pop(ctr.id, None)

asyncio.run(Stub(Trivial(), name="bench", idx="50", socket_path=sys.argv[1]).run())
"""


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process, from /proc (10 ms resolution)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def percentile(sorted_values: list[float], q: float) -> float:
    idx = min(len(sorted_values) - 1, round(q * (len(sorted_values) - 1)))
    return sorted_values[idx]


def state(n: int) -> tuple[list, list]:
    pods = [
        make_pod(f"pod-{i}", annotations={"sla.nri.io/pod": "cpu: {limit: 1}"})
        for i in range(max(1, n // 4))
    ]
    return pods, [make_container(pods[i % len(pods)], f"c{i}") for i in range(n)]


async def main(args: argparse.Namespace) -> dict[str, float]:
    tmp = tempfile.mkdtemp(prefix="nri-bench-")
    path = os.path.join(tmp, "nri.sock")
    sim = await RuntimeSimulator(path).start()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", PLUGIN, path, env=env)
    try:
        s = await sim.accept(timeout=30)
        out: dict[str, float] = {"rss_idle_mib": rss_kib(proc.pid) / 1024}
        pod = make_pod(
            "bench",
            annotations={"sla.nri.io/container.work": "cpu: {limit: 0.5}\nmemory: {max: 256Mi}\n"},
        )
        ctr = make_container(pod, "work")
        out["create_request_bytes"] = len(
            __import__("nri_plugin.nri.pb.nri_pb2", fromlist=["x"])
            .CreateContainerRequest(pod=pod, container=ctr)
            .SerializeToString()
        )
        for _ in range(500):  # warm-up
            await s.create_container(pod, ctr)
        lat = []
        clock = time.perf_counter
        cpu_plugin, cpu_sim = cpu_seconds(proc.pid), time.process_time()
        for _ in range(args.requests):
            t0 = clock()
            await s.create_container(pod, ctr)
            lat.append(clock() - t0)
        out["create_cpu_plugin_us"] = (cpu_seconds(proc.pid) - cpu_plugin) / args.requests * 1e6
        out["create_cpu_runtime_us"] = (time.process_time() - cpu_sim) / args.requests * 1e6
        out["loadavg_1m"] = os.getloadavg()[0]
        lat.sort()
        out["create_p50_us"] = percentile(lat, 0.50) * 1e6
        out["create_p99_us"] = percentile(lat, 0.99) * 1e6
        out["create_mean_us"] = statistics.fmean(lat) * 1e6
        out["create_requests"] = args.requests
        for n in (1000, 10000):
            pods, containers = state(n)
            t0 = clock()
            await s.synchronize(pods, containers)
            out[f"sync_{n}_ms"] = (clock() - t0) * 1e3
            out[f"rss_after_sync_{n}_mib"] = rss_kib(proc.pid) / 1024
        return out
    finally:
        proc.terminate()
        await proc.wait()
        await sim.close()
        os.rmdir(tmp)


def run() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=10000)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    out = asyncio.run(main(args))
    if args.json:
        print(json.dumps(out, sort_keys=True))
        return 0
    print(
        f"CreateContainer round trip ({int(out['create_requests'])} calls, "
        f"{int(out['create_request_bytes'])}-byte request): "
        f"p50 {out['create_p50_us']:.0f} us, p99 {out['create_p99_us']:.0f} us, "
        f"mean {out['create_mean_us']:.0f} us  (target p50 < 300 us, p99 < 1000 us)"
    )
    print(
        f"  CPU per call: plugin {out['create_cpu_plugin_us']:.0f} us, simulated runtime "
        f"{out['create_cpu_runtime_us']:.0f} us; load average {out['loadavg_1m']:.2f} "
        f"on {os.cpu_count()} CPUs"
    )
    for n in (1000, 10000):
        print(
            f"Synchronize {n:>6} containers: {out[f'sync_{n}_ms']:.1f} ms; "
            f"plugin RSS after: {out[f'rss_after_sync_{n}_mib']:.1f} MiB"
        )
    print(f"plugin RSS idle: {out['rss_idle_mib']:.1f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(run())
