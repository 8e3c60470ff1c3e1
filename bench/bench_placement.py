"""Placement decision time on a big node: 16 GPUs, 8 NUMA nodes, 1,000 live containers
(GPUs are each container's grant, verified against its SLA and aligned to).

Usage: .venv/bin/python bench/bench_placement.py [--rounds N] [--topology nvswitch|quads]
Prints, per request kind, the median / p99 time of one allocate() (or restore())
decision, followed by its release(). Target: median under 1 ms.
"""

from __future__ import annotations

import argparse
import statistics
import time

from nri_plugin.plan.allocator import Allocator
from nri_plugin.plan.placement_values import PlacementError, PlacementRequest
from nri_plugin.topology.cpus import NumaNode, Topology
from nri_plugin.topology.gpus import Gpu, GpuInventory

NODES, CORES, THREADS, GPUS = 8, 16, 2, 16
RELEASES: list[float] = []


def big_node(nvlink: str) -> tuple[Topology, GpuInventory]:
    total_cores = NODES * CORES
    cores = tuple(
        frozenset(c + t * total_cores for t in range(THREADS)) for c in range(total_cores)
    )
    nodes = tuple(
        NumaNode(
            n,
            frozenset().union(*cores[n * CORES : (n + 1) * CORES]),
            {m: 10 if m == n else 21 + 10 * abs(m - n) // 4 for m in range(NODES)},
        )
        for n in range(NODES)
    )
    online = frozenset(range(total_cores * THREADS))
    gpus = []
    for i in range(GPUS):
        if nvlink == "nvswitch":
            peers = frozenset(range(GPUS)) - {i}
        else:  # fully connected quads, and each GPU linked to its twin in the next quad
            quad = range(i - i % 4, i - i % 4 + 4)
            peers = frozenset(quad) - {i} | {(i + 4) % GPUS}
        gpus.append(
            Gpu(
                index=i,
                uuid=f"GPU-bench-{i:04d}",
                pci_bus_id=f"0000:{i + 16:02x}:00.0",
                numa_node=i // 2,
                minor=i,
                nvlink_peers=peers,
            )
        )
    return Topology(online, nodes, cores, frozenset({0, total_cores})), GpuInventory(
        tuple(gpus), "snapshot"
    )


def granted(inventory: GpuInventory, owner: str, *indexes: int, **kw) -> PlacementRequest:
    """`owner`'s request with GPUs `indexes` granted by the device plugin."""
    return PlacementRequest(
        owner, wants_gpu=True, granted_gpus=tuple(inventory.gpus[i] for i in indexes), **kw
    )


def populate(alloc: Allocator, live: int) -> dict[str, int]:
    """Fill the node with `live` containers of mixed kinds, as a busy GPU node looks."""
    kinds = {"granted-gpu": 0, "shared-gpu": 0, "exclusive-cpu": 0, "aligned": 0, "plain": 0}
    inv = alloc.inventory
    for i in range(live):
        owner = f"pod{i}/c"
        if i < 6:
            req, kind = granted(inv, owner, i, exclusive_cpus=2), "granted-gpu"
        elif i < 306:  # GPUs 8 and 9 (NUMA 4), granted to many (time-sliced)
            req, kind = granted(inv, owner, 8 + i % 2, align=False), "shared-gpu"
        elif i < 336:
            req, kind = PlacementRequest(owner, exclusive_cpus=2), "exclusive-cpu"
        elif i < 766:
            req, kind = PlacementRequest(owner, numa_nodes=(i % NODES,)), "aligned"
        else:
            req, kind = PlacementRequest(owner), "plain"
        # soft: an aligned container on a node whose CPUs are all exclusive still counts
        alloc.allocate(req, hard=False)
        kinds[kind] += 1
    return kinds


def measure(alloc: Allocator, name: str, make, rounds: int) -> tuple[str, list[float], int]:
    times, failures = [], 0
    for n in range(rounds):
        owner = f"bench-{n}"
        start = time.perf_counter()
        try:
            make(alloc, owner)
        except PlacementError:
            failures += 1
        times.append(time.perf_counter() - start)
        start = time.perf_counter()
        alloc.release(owner)
        RELEASES.append(time.perf_counter() - start)
    return name, times, failures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2000)
    parser.add_argument("--live", type=int, default=1000)
    parser.add_argument("--topology", choices=("nvswitch", "quads"), default="quads")
    args = parser.parse_args()

    topology, inventory = big_node(args.topology)
    alloc = Allocator(topology, inventory)
    kinds = populate(alloc, args.live)
    # a record of a placement that is free again, as after a plugin restart
    record = alloc.allocate(granted(inventory, "gone", 12, 13, exclusive_cpus=4)).to_record()
    alloc.release("gone")
    free = GPUS - len(alloc.gpus_in_use())  # GPUs no container was granted
    print(
        f"node: {len(topology.online)} CPUs, {NODES} NUMA nodes, {GPUS} GPUs "
        f"(NVLink {args.topology}); live containers: {len(alloc.owners())} "
        f"({', '.join(f'{k} {v}' for k, v in kinds.items())}); free GPUs {free}"
    )

    def req(*gpus: int, **kw):
        return lambda a, owner: a.allocate(granted(inventory, owner, *gpus, **kw))

    cases = [
        ("1 GPU granted", req(14, gpu_count=1)),
        ("2 GPUs nvlink", req(12, 13, gpu_count=2, topology="nvlink")),
        (
            "4 GPUs nvlink (soft, not met)",
            lambda a, o: a.allocate(
                granted(inventory, o, 0, 5, 10, 15, gpu_count=4, topology="nvlink"), hard=False
            ),
        ),
        ("2 GPUs numa + 8 excl CPUs", req(14, 15, gpu_count=2, topology="numa", exclusive_cpus=8)),
        ("shared GPU", req(8, align=False)),
        ("8 excl CPUs, no GPU", req(exclusive_cpus=8)),
        ("numa.nodes 3", req(numa_nodes=(3,))),
        ("grant lacks 12 GPUs (hard)", req(12, 13, gpu_count=12, topology="nvlink")),
        ("restore from record", lambda a, o: a.restore(o, record)),
    ]
    print(f"{'request':34} {'median':>9} {'p99':>9} {'mean':>9}  refused")
    worst = 0.0
    for name, make in cases:
        _, times, failures = measure(alloc, name, make, args.rounds)
        times.sort()
        med = statistics.median(times) * 1e6
        p99 = times[int(len(times) * 0.99) - 1] * 1e6
        worst = max(worst, med)
        print(
            f"{name:34} {med:7.0f}us {p99:7.0f}us {statistics.fmean(times) * 1e6:7.0f}us"
            f"  {failures}/{args.rounds}"
        )
    print(f"{'release()':34} {statistics.median(RELEASES) * 1e6:7.0f}us")
    print(f"worst median: {worst:.0f}us (target < 1000us): {'OK' if worst < 1000 else 'MISSED'}")
    return 0 if worst < 1000 else 1


if __name__ == "__main__":
    raise SystemExit(main())
