"""What hostile `applied` records cost: rejecting them, and Synchronize over many.

A pod can put any text into `sla.nri.io/applied`; decode_record must refuse it in bounded
time and memory before anything grows with the input (nri_plugin.plan.record). Figures:
the time to refuse one record of each hostile shape, to decode a genuine one, and
core.restore.restore (what Synchronize runs) over 1,000 containers, all genuine or all
forged at the 16 KiB limit, with the peak memory tracemalloc sees.

    .venv/bin/python bench/bench_records.py [--n 2000]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import tracemalloc
from pathlib import Path

from nri_plugin.config.values import NodeConfig
from nri_plugin.core.nodestate import NodeState
from nri_plugin.core.restore import restore as restore_node
from nri_plugin.core.restored import LiveContainer
from nri_plugin.plan.allocator import Allocator
from nri_plugin.plan.model import ContainerPlan
from nri_plugin.plan.record import (
    MAX_RECORD_BYTES,
    RecordError,
    decode_record,
    encode_record,
    record_text,
    sign_record,
)
from nri_plugin.plan.rt_budget import RtBudget
from nri_plugin.topology.snapshot import load_snapshot

DGX = Path(__file__).resolve().parents[1] / "examples" / "dgx-like.yaml"
KEY = bytes(range(32))
DEPTH = (MAX_RECORD_BYTES - 100) // 2  # the deepest nesting that fits the size limit


def node() -> NodeState:
    snapshot = load_snapshot(DGX)
    return NodeState(
        NodeConfig(),
        2,
        allocator=Allocator(snapshot.topology, snapshot.inventory),
        rt_budget=RtBudget(0.5),
        record_key=KEY,
    )


def hostile() -> dict[str, str]:
    nested = '{"v":2,"x":' + "[" * DEPTH + "]" * DEPTH + "}"
    return {
        "16 MiB record (size check)": '{"v":2,"x":"' + "9" * (16 << 20) + '"}',
        "16 KiB forged, MAC-shaped tail (HMAC)": sign_record(
            '{"v":2,"x":"' + "9" * (MAX_RECORD_BYTES - 100) + '"}', "c", bytes(32)
        ),
        f"{DEPTH}-deep nesting, forged (MAC check)": nested,
        f"{DEPTH}-deep nesting, with the key (depth scan)": sign_record(nested, "c", KEY),
        "a huge CPU range, with the key": sign_record(
            record_text(
                {
                    "v": 2,
                    "path": "nri",
                    "enforcement": "hard",
                    "cgroup_version": 2,
                    "cpus": "0-999999999",
                }
            ),
            "c",
            KEY,
        ),
    }


def timed(fn, n: int) -> tuple[float, float]:
    samples = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    samples.sort()
    return statistics.median(samples), samples[int(len(samples) * 0.99)]


def refuse(text: str) -> None:
    try:
        decode_record(text, "c", KEY)
    except RecordError:
        return
    raise AssertionError("a hostile record decoded")


def restore(containers: list[LiveContainer]) -> tuple[float, float, int]:
    """Seconds (best of 3, untraced) and peak MiB (a traced run) of one restore."""
    times = []
    for _ in range(3):
        start = time.perf_counter()
        taken = len(restore_node(node(), containers).plans)
        times.append(time.perf_counter() - start)
    state = node()
    tracemalloc.start()
    restore_node(state, containers)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return min(times), peak / 2**20, taken


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000, help="samples per single-record case")
    args = parser.parse_args()
    for name, text in hostile().items():
        p50, p99 = timed(lambda t=text: refuse(t), args.n)
        print(f"refuse {name:<46} p50 {p50 * 1e6:8.1f} us  p99 {p99 * 1e6:8.1f} us")
    genuine = encode_record(
        ContainerPlan(
            "hard",
            2,
            cpu_quota=250_000,
            cpu_period=100_000,
            memory_max=10 << 30,
            cpus="0-3",
            mems="0",
        ),
        "nri",
        "c",
        KEY,
    )
    p50, p99 = timed(lambda: decode_record(genuine, "c", KEY), args.n)
    print(
        f"decode a genuine record ({len(genuine)} bytes){'':<19} p50 {p50 * 1e6:8.1f} us"
        f"  p99 {p99 * 1e6:8.1f} us"
    )

    plan = ContainerPlan("hard", 2, cpu_quota=50_000, cpu_period=100_000, memory_max=1 << 30)
    genuine_set = [
        LiveContainer(f"c{i}", "default", encode_record(plan, "nri", f"c{i}", KEY), i)
        for i in range(1000)
    ]
    # The dearest forgery: at the size limit with a MAC-shaped tail, so the HMAC is computed.
    forged = sign_record(json.dumps({"v": 2, "x": "9" * (MAX_RECORD_BYTES - 100)}), "c", bytes(32))
    forged_set = [LiveContainer(f"c{i}", "default", forged, i) for i in range(1000)]
    for name, containers in (
        ("1,000 genuine records", genuine_set),
        ("1,000 forged 16 KiB records", forged_set),
    ):
        elapsed, peak, taken = restore(containers)
        print(f"restore {name:<30} {elapsed * 1e3:7.1f} ms  peak {peak:5.2f} MiB  taken {taken}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
