#!/usr/bin/env python3
"""Benchmark the SLA parser: prints median / p99 microseconds per call.

    .venv/bin/python bench/bench_sla.py [--rounds N]

Cases (a typical pod with a pod document and a container document):
* warm: sla_for_container on annotations seen before (every NRI event after the first);
* doc-cached: the merged result is new but both documents are cached (new container name);
* cold: every cache cleared before each call (first sight of a pod);
* invalid: a document with an error, warm (the error path must be cheap too).
Target (docs/sla.md): warm < 50 us median.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nri_plugin.sla import SlaError, sla_for_container
from nri_plugin.sla.parse import _document, _resolve, clear_caches

POD_DOC = """\
cpu: {limit: 2.5, period: 100ms}
numa: {nodes: auto, memory-policy: bind}
memory: {high: 8Gi, max: 10Gi}
io:
  weight: 500
  max:
    - {device: /dev/nvme0n1, read-bps: 500Mi, write-bps: 200Mi}
gpu: {count: 2, topology: nvlink}
"""
CTR_DOC = "cpu: {limit: 4, exclusive: 4}\nmemory: {max: 12Gi}\n"
ANNOTATIONS = {
    "sla.nri.io/pod": POD_DOC,
    "sla.nri.io/container.trainer": CTR_DOC,
    "sla.nri.io/enforcement": "hard",
    "kubernetes.io/config.seen": "2026-01-01T00:00:00Z",
    "kubernetes.io/config.source": "api",
    "prometheus.io/scrape": "true",
}


def measure(fn, rounds: int, setup=None) -> list[float]:
    samples = []
    for i in range(rounds):
        if setup:
            setup(i)
        start = time.perf_counter_ns()
        fn(i)
        samples.append((time.perf_counter_ns() - start) / 1000)
    return samples


def report(name: str, samples: list[float]) -> None:
    samples.sort()
    p99 = samples[min(len(samples) - 1, int(len(samples) * 0.99))]
    print(
        f"{name:<12} median {statistics.median(samples):8.1f} us   p99 {p99:8.1f} us   "
        f"({len(samples)} calls)"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20000)
    rounds = parser.parse_args().rounds
    sla_for_container(ANNOTATIONS, "trainer")  # warm up

    report("warm", measure(lambda i: sla_for_container(ANNOTATIONS, "trainer"), rounds))

    def new_result(i: int) -> None:
        _resolve.clear()

    report(
        "doc-cached",
        measure(lambda i: sla_for_container(ANNOTATIONS, "trainer"), rounds // 10, new_result),
    )
    report(
        "cold",
        measure(
            lambda i: sla_for_container(ANNOTATIONS, "trainer"),
            rounds // 10,
            lambda i: clear_caches(),
        ),
    )
    bad = dict(ANNOTATIONS, **{"sla.nri.io/container.trainer": "memory: {max: 12GB}"})

    def invalid(i: int) -> None:
        with contextlib.suppress(SlaError):
            sla_for_container(bad, "trainer")

    report("invalid", measure(invalid, rounds // 2))
    print(f"cache: documents {len(_document)}, resolved {len(_resolve)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
