"""Planning cost per container: annotations -> SLA (parse + validate) -> plan -> adjustment.

The annotation strings repeat across a deployment's pods, so the parser's cache is warm
after the first; this measures the steady state the plugin sees on CreateContainer.
Target: median under 100 microseconds for a typical SLA.

    .venv/bin/python bench/bench_plan.py [--n 20000]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from nri_plugin.config.values import NodeConfig
from nri_plugin.core.decision import decide
from nri_plugin.core.nodestate import NodeState
from nri_plugin.core.request import ContainerRequest
from nri_plugin.plan.allocator import Allocator
from nri_plugin.plan.rt_budget import RtBudget
from nri_plugin.plugin.adjustment import annotated, build_adjustment
from nri_plugin.topology.snapshot import load_snapshot

TYPICAL = {
    "sla.nri.io/pod": "cpu: {limit: 2.5, period: 100ms}\n"
    "memory: {high: 8Gi, max: 10Gi}\n"
    "io: {weight: 500}\n",
    "sla.nri.io/container.work": "cpu: {limit: 4}\n",
    "sla.nri.io/enforcement": "hard",
}
ALIGNED = {"sla.nri.io/pod": "cpu: {limit: 4}\nnuma: {nodes: '1', memory-policy: bind}\n"}


def measure(node: NodeState, annotations: dict[str, str], n: int) -> list[float]:
    samples = []
    for i in range(n):
        start = time.perf_counter()
        decision = decide(
            node,
            ContainerRequest(
                annotations, "work", namespace="ml", owner=f"c{i}", nri_version="v0.12.0"
            ),
        )
        annotated(
            node.annotations_for(decision.plan, "nri", f"c{i}"),
            settings=build_adjustment(decision.plan),
        )
        samples.append(time.perf_counter() - start)
        node.release(f"c{i}")
    return samples


def report(name: str, samples: list[float]) -> None:
    samples.sort()
    p50 = statistics.median(samples) * 1e6
    p99 = samples[int(len(samples) * 0.99)] * 1e6
    print(f"{name:<34} n={len(samples):>6}  p50 {p50:7.1f} us  p99 {p99:7.1f} us")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=20_000)
    args = parser.parse_args()
    snapshot = load_snapshot(Path(__file__).resolve().parents[1] / "examples/dgx-like.yaml")
    for version in (2, 1):
        node = NodeState(
            NodeConfig(),
            version,
            rt_budget=RtBudget(0.5),
            allocator=Allocator(snapshot.topology, snapshot.inventory),
        )
        # v1 has no memory.high: soft mode plans the soft limit and a warning instead
        annotations = TYPICAL if version == 2 else {**TYPICAL, "sla.nri.io/enforcement": "soft"}
        measure(node, annotations, 200)  # warm the caches
        report(f"typical SLA, cgroup v{version}", measure(node, annotations, args.n))
    report("NUMA-pinned SLA (allocator), v2", measure(node, ALIGNED, args.n // 4))


if __name__ == "__main__":
    main()
