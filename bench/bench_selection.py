"""GPU selection time: choose_gpus() on 8- and 16-GPU boxes, random free states; and
(--compare) nri-sla's choices against NVIDIA's best-effort allocator.

Usage: .venv/bin/python bench/bench_selection.py [--rounds N] [--seed S] [--compare]
Prints, per box and request size, the median / p99 time of one choice (topologies any,
numa and nvlink mixed), which search ran, and the one-off cost of a box's subset table.
Targets: median under 1 ms for requests up to 4 GPUs; the most expensive request (half
the GPUs of a 16-GPU box, all free: C(16, 8) sets) under 100 ms.
--compare: over every free-GPU state, request size and pinned GPU (none, or each free
one: the kubelet's must_include) on DGX-1V, DGX-1P, NVSwitch, PCIe-pairs and 4x RTX 8000
boxes, the cases where GetPreferredAllocation's set or the model of NVIDIA's allocator
(tests/support/besteffort.py) is better: NVLinks, then NUMA span, then PCIe locality.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from nri_plugin.kubelet.selection import preferred_gpus
from nri_plugin.plan.gpu_graph import GpuGraph
from nri_plugin.plan.gpu_selection import choose_gpus
from nri_plugin.simulated.hardware import (
    FakeGpu,
    FakeNvml,
    build_pci_tree,
    build_sysfs,
    dgx1p_gpus,
    dgx1v_gpus,
    nvswitch_gpus,
    pcie_pairs_gpus,
    rtx8000_gpus,
)
from nri_plugin.topology.gpus import GpuInventory
from nri_plugin.topology.inventory import load_inventory
from nri_plugin.value import replace

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the model lives in tests/
from tests.support.besteffort import (
    METRICS,
    Tally,
    best_effort,
    every_case,
    metrics,
    pair_scores,
)

COMPARED = {
    "DGX-1V": dgx1v_gpus,
    "DGX-1P": dgx1p_gpus,
    "NVSwitch": nvswitch_gpus,
    "PCIe pairs": pcie_pairs_gpus,
    "4x RTX 8000": rtx8000_gpus,
}

SIZES = (1, 2, 4, 8)
TOPOLOGIES = ("any", "numa", "nvlink")


def read_box(make: Callable[[], list[FakeGpu]]) -> GpuInventory:
    with tempfile.TemporaryDirectory() as tmp:
        sysfs = build_pci_tree(build_sysfs(Path(tmp), nodes=2), make())
        return load_inventory("nvml", sysfs_root=sysfs, nvml=FakeNvml(make()))


def doubled(inv: GpuInventory, switched: bool = False) -> GpuInventory:
    """Two copies of an 8-GPU box in one 16-GPU node, the copy on NUMA nodes +2 and
    across sockets from the first (as two boards of a 4-socket host). `switched`: the
    boards' NVSwitches joined, every pair linked (as a DGX-2)."""
    n = len(inv.gpus)
    gpus = []
    for copy in range(2):
        for g in inv.gpus:
            others = tuple((p + n * (1 - copy), "system") for p in range(n))
            links = tuple((p + n * copy, k) for p, k in g.nvlink_links)
            if switched:
                links += tuple((p + n * (1 - copy), g.nvlink_links[0][1]) for p in range(n))
            gpus.append(
                replace(
                    g,
                    index=g.index + n * copy,
                    nvlink_peers=frozenset(),
                    nvlink_links=links,
                    numa_node=None if g.numa_node is None else g.numa_node + 2 * copy,
                    pcie_levels=tuple((p + n * copy, lv) for p, lv in g.pcie_levels) + others,
                )
            )
    return GpuInventory(tuple(gpus), "snapshot")


def measure(
    inv: GpuInventory, size: int, rounds: int, rng: random.Random
) -> tuple[list[float], set[str], int]:
    gpus = [g.index for g in inv.gpus]
    times, searches, refused = [], set(), 0
    for n in range(rounds):
        free = frozenset(rng.sample(gpus, rng.randint(size, len(gpus))))
        topology = TOPOLOGIES[n % len(TOPOLOGIES)]
        start = time.perf_counter()
        choice = choose_gpus(inv, free, size, topology=topology)
        times.append(time.perf_counter() - start)
        if choice is None:
            refused += 1
        else:
            searches.add(choice.search)
    return sorted(times), searches, refused


def compare_all() -> int:
    """Every (free state, size, pinned GPU) case of every compared box; 1 when nri-sla's
    set is worse in any."""
    print(
        f"{'box':12} {'pinned':>6} {'cases':>6} {'nri-sla better':>14} "
        f"{'NVIDIA better':>13}  per metric (nri-sla / NVIDIA better)"
    )
    worse = 0
    for name, make in COMPARED.items():
        inv = read_box(make)
        scores = pair_scores(FakeNvml(make()))
        by_index = {g.index: g for g in inv.gpus}
        for pinned in (False, True):
            tally = Tally()
            for free, size in every_case(inv):
                for pin in sorted(free) if pinned else [None]:
                    must = [] if pin is None else [pin]
                    ours = [
                        g.index
                        for g in preferred_gpus(
                            inv,
                            [by_index[i] for i in sorted(free)],
                            [by_index[i] for i in must],
                            size,
                        )
                    ]
                    theirs = best_effort(scores, sorted(free), must, size)
                    tally.add(
                        f"{name} free {sorted(free)} size {size} pinned {must}",
                        metrics(inv, ours),
                        metrics(inv, theirs),
                    )
            per_metric = ", ".join(f"{m} {a}/{b}" for m, (a, b) in tally.by_metric.items())
            print(
                f"{name:12} {'yes' if pinned else 'no':>6} {tally.cases:6} "
                f"{tally.ours_better:14} {tally.theirs_better:13}  {per_metric}"
            )
            for line in tally.worse[:5]:
                print(f"  worse: {line}")
            worse += tally.theirs_better
    print(f"metrics in order: {', '.join(METRICS)}; cases where nri-sla is worse: {worse}")
    return 1 if worse else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=600)
    parser.add_argument("--seed", type=int, default=18)
    parser.add_argument(
        "--compare",
        action="store_true",
        help="compare with NVIDIA's best-effort allocator instead of timing",
    )
    args = parser.parse_args()
    if args.compare:
        return compare_all()
    rng = random.Random(args.seed)
    boxes = {
        "dgx1v": read_box(dgx1v_gpus),
        "nvswitch": read_box(nvswitch_gpus),
        "pcie-pairs": read_box(pcie_pairs_gpus),
    }
    boxes |= {f"2x {name}": doubled(inv) for name, inv in list(boxes.items())}
    boxes["16 nvswitch"] = doubled(boxes["nvswitch"], switched=True)
    print(f"{'box':16} {'GPUs':>4} {'size':>4} {'median':>9} {'p99':>9}  search       refused")
    worst_small, worst_all_free = 0.0, 0.0
    for name, inv in boxes.items():
        start = time.perf_counter()
        GpuGraph.of(inv).table  # noqa: B018 - the one-off build is what is timed
        table = time.perf_counter() - start
        choose_gpus(inv, range(len(inv.gpus)), 1)  # the cached graph, as a live node has
        for size in SIZES:
            times, searches, refused = measure(inv, size, args.rounds, rng)
            med = statistics.median(times) * 1e6
            p99 = times[int(len(times) * 0.99) - 1] * 1e6
            if size <= 4:
                worst_small = max(worst_small, med)
            print(
                f"{name:16} {len(inv.gpus):4} {size:4} {med:7.0f}us {p99:7.0f}us  "
                f"{','.join(sorted(searches)) or '-':12} {refused}/{args.rounds}"
            )
        print(f"{name:16} subset table (built once): {table * 1e3:.1f} ms")
        half = len(inv.gpus) // 2
        for topology in TOPOLOGIES:  # the most sets: half the GPUs out of all free
            times = []
            for _ in range(20):
                start = time.perf_counter()
                choose_gpus(inv, range(len(inv.gpus)), half, topology=topology)
                times.append(time.perf_counter() - start)
            worst_all_free = max(worst_all_free, statistics.median(times))
            print(
                f"{name:16} all free, {half} {topology}: median "
                f"{statistics.median(times) * 1e6:.0f}us"
            )
    ok = worst_small < 1000 and worst_all_free < 0.1
    print(
        f"worst median (size <= 4): {worst_small:.0f}us (target < 1000us); worst all-free "
        f"request: {worst_all_free * 1e3:.1f} ms (target < 100 ms): "
        f"{'OK' if ok else 'MISSED'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
