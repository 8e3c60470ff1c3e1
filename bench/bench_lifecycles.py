#!/usr/bin/env python3
"""Load in the simulator: container lifecycles and a large Synchronize against a real
`nri-sla run` process (its own process, so its RSS is its own).

1. --lifecycles (10,000) RunPodSandbox ... RemovePodSandbox lifecycles, the SLAs cycling
   through a GPU, exclusive CPUs, CPU/memory limits and none; the plugin's RSS sampled
   every 1,000 and the growth after the first 1,000 printed (no growth expected: every
   owner is released at StopContainer/RemoveContainer and every cache is bounded).
2. --sync (10,000) containers created through the plugin (each with its record), plus
   10% created while no plugin was registered, then one Synchronize of all of them:
   timed from the runtime's side, its answer, and then to the answer of a CreateContainer
   sent right after it (the plugin restores after answering: every record, the
   unenforced ones reported the first time; the create waits for that), and the RSS
   after; --syncs rounds of it.

The plugin plans for cgroup v2 over examples/dgx-like.yaml, so nothing is written to
this host's cgroups.

    .venv/bin/python bench/bench_lifecycles.py [--lifecycles 10000] [--sync 10000] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from nri_plugin.nri.pb import nri_pb2 as pb
from nri_plugin.simulated.runtime import (
    RuntimeSimulator,
    SimulatorOptions,
    make_container,
    make_pod,
)

REPO = Path(__file__).resolve().parents[1]
SLAS = (
    "gpu: {count: 1, align: false}",
    "cpu: {exclusive: 2}",
    "cpu: {limit: 1}\nmemory: {max: 1Gi}",
    None,
)
SYNC_SLA = "cpu: {limit: 1}\nmemory: {max: 1Gi}"
CONFIG = """\
state-dir: {state}
permissions: {{gpus: ["*"], exclusive-cpus: ["*"], exceed-runtime-limits: ["*"]}}
pod-caps: {{exclusive-cpus: "100%"}}
nri: {{socket: {socket}}}
gpu: {{rescan-interval: 0}}
metrics: {{address: ""}}
log: {{level: error}}
"""


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


async def main(args: argparse.Namespace) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="nri-bench-"))
    socket_path = tmp / "nri.sock"
    config = tmp / "config.yaml"
    config.write_text(CONFIG.format(state=tmp / "state", socket=socket_path))
    # A long request timeout: the Synchronize is measured, not cut off at containerd's 2 s
    # (which bounds all its parts together; the output says whether it would fit).
    sim = await RuntimeSimulator(str(socket_path), SimulatorOptions(request_timeout=120)).start()
    cli = Path(sys.executable).parent / "nri-sla"
    proc = subprocess.Popen(
        [
            str(cli),
            "run",
            "--config",
            str(config),
            "--cgroup",
            "v2",
            "--inventory",
            str(REPO / "examples" / "dgx-like.yaml"),
        ],
        stdin=subprocess.DEVNULL,
    )
    out: dict = {"machine": f"{os.cpu_count()} CPUs", "loadavg_start": os.getloadavg()[0]}
    try:
        session = await sim.accept(timeout=60)
        out["rss_idle_mib"] = rss_mib(proc.pid)
        samples = []
        started = time.perf_counter()
        for i in range(args.lifecycles):
            sla = SLAS[i % len(SLAS)]
            pod = make_pod(f"lc-{i}", annotations={"sla.nri.io/pod": sla} if sla else None)
            # a GPU SLA verifies the device plugin's grant: one GPU, as the kubelet gives
            grant = (f"nvidia.com/gpu={i % 8}",) if sla and "gpu" in sla else ()
            await session.container_life_cycle(pod, make_container(pod, "c", cdi_devices=grant))
            if (i + 1) % 1000 == 0:
                samples.append((i + 1, rss_mib(proc.pid)))
        out["lifecycles"] = args.lifecycles
        out["lifecycle_ms"] = (time.perf_counter() - started) / max(1, args.lifecycles) * 1e3
        out["rss_samples_mib"] = samples
        if len(samples) >= 2:
            out["rss_growth_after_first_1000_mib"] = samples[-1][1] - samples[0][1]

        pods, containers = [], []
        for i in range(args.sync):
            pod = make_pod(f"sync-{i}", annotations={"sla.nri.io/pod": SYNC_SLA})
            ctr = make_container(pod, "c", state=pb.CONTAINER_RUNNING)
            ctr.created_at = i
            await session.run_pod_sandbox(pod)
            if i % 10 == 9:  # created while no plugin was registered: no record
                sim.state.containers[ctr.id] = ctr
            else:
                await session.create_container(pod, ctr)
            pods.append(pod)
        containers = list(sim.state.containers.values())
        out["sync_containers"] = len(containers)
        out["rss_before_sync_mib"] = rss_mib(proc.pid)
        syncs = []
        for n in range(args.syncs):  # the first reports the unenforced, later ones nothing
            probe = make_pod(f"after-sync-{n}")
            t0 = time.perf_counter()
            await session.synchronize(pods, containers)
            answered = time.perf_counter()
            await session.create_container(probe, make_container(probe, "c"))
            syncs.append(
                ((answered - t0) * 1e3, (time.perf_counter() - t0) * 1e3, rss_mib(proc.pid))
            )
        out["syncs_ms_ready_ms_rss_mib"] = syncs
        out["loadavg_end"] = os.getloadavg()[0]
        return out
    finally:
        proc.terminate()
        proc.wait(10)
        await sim.close()
        shutil.rmtree(tmp, ignore_errors=True)


def run() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lifecycles", type=int, default=10000)
    parser.add_argument("--sync", type=int, default=10000)
    parser.add_argument("--syncs", type=int, default=3, help="Synchronize rounds")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    out = asyncio.run(main(args))
    if args.json:
        print(json.dumps(out, sort_keys=True))
        return 0
    print(
        f"{out['lifecycles']} container lifecycles through `nri-sla run` "
        f"({out['lifecycle_ms']:.2f} ms each; RSS idle {out['rss_idle_mib']:.1f} MiB):"
    )
    for n, rss in out["rss_samples_mib"]:
        print(f"  after {n:6d}: RSS {rss:.1f} MiB")
    growth = out.get("rss_growth_after_first_1000_mib")
    if growth is not None:
        print(f"  growth after the first 1,000: {growth:+.1f} MiB")
    print(
        f"Synchronize of {out['sync_containers']} containers (90% with records, 10% "
        f"created unenforced; containerd's default plugin_request_timeout is 2000 ms "
        f"for all its parts); RSS before {out['rss_before_sync_mib']:.1f} MiB:"
    )
    for n, (ms, ready, rss) in enumerate(out["syncs_ms_ready_ms_rss_mib"], 1):
        print(
            f"  round {n}: answered in {ms:.0f} ms, a CreateContainer sent then answered "
            f"{ready:.0f} ms after the Synchronize; RSS after {rss:.1f} MiB"
        )
    print(
        f"({out['machine']}, load average {out['loadavg_start']:.1f} -> {out['loadavg_end']:.1f})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(run())
