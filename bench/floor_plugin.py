#!/usr/bin/env python3
"""The floor of this stack: the Go bench plugin's work (bench/go/goplugin), in Python, on
nri-sla's own NRI transport, and none of nri-sla's decision.

`bench_vs_go.py --floor` runs it as a third plugin beside the Go plugin and `nri-sla run`.
It does what the Go plugin does per request and no more: the SLA text parsed once per
distinct annotation (nri-sla's hardened YAML reader and quantities), the containers the
runtime reported kept in a dict, and for a create the CPU quota/period and memory limit
plus a signed `sla.nri.io/applied` record (nri-sla's record text and MAC). No node
topology, CPU pool, GPU, registry, drift watch, restore, metrics or logging. Where the Go
plugin keeps each reported container (a pointer), this one keeps its id: a protobuf
message kept in Python keeps the whole request it was parsed from alive (the
Synchronize's megabytes), which is not a floor. The C heap is kept as `nri-sla run` keeps it
(nri_plugin.nri.heap: large blocks mapped, the freed heap given back after a large
Synchronize), so the memory figures compare the same allocator settings.

So its figures are what any plugin on this stack (CPython, the project's ttrpc/NRI stub on
uvloop, protobuf's upb runtime, PyYAML, OpenSSL's HMAC) pays before it decides anything:
a target below them cannot be met by reshaping nri-sla's code. Usage (what bench_vs_go
runs; the options it does not use are accepted for its command line):
    floor_plugin.py run --config FILE --metrics-address "" --socket PATH
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import os
import sys

from nri_plugin.nri import heap
from nri_plugin.nri.pb import nri_pb2 as pb
from nri_plugin.nri.stub import CreateResult, Stub
from nri_plugin.plan.record import record_text, sign_record
from nri_plugin.text import safeyaml
from nri_plugin.text.quantities import parse_cpu, parse_duration, parse_size

POD_KEY = "sla.nri.io/pod"
CONTAINER_KEY = "sla.nri.io/container."
APPLIED_KEY = "sla.nri.io/applied"
RECORD_VERSION = 2
PLANS_MAX = 512  # bounded, as the Go plugin's memo and nri-sla's cache are
NO_PLAN = (0, 0, 0, "")


def plan_of(texts: tuple[str, str]) -> tuple[int, int, int, str]:
    """(quota, period, memory max, enforcement) of the pod and container SLA texts, the
    container's sections over the pod's (the Go plugin's merge and checks)."""
    merged: dict = {}
    for text in texts:
        if text:
            doc = safeyaml.load(text, max_bytes=16_384)
            if not isinstance(doc, dict):
                raise ValueError("invalid SLA: not a mapping")
            merged.update(doc)
    enforcement = merged.get("enforcement", "hard")
    if enforcement not in ("hard", "soft"):
        raise ValueError("enforcement must be hard or soft")
    quota, period, memory = 0, 100_000, 0
    cpu = merged.get("cpu") or {}
    if "period" in cpu:
        if "limit" not in cpu:
            raise ValueError("cpu.period needs cpu.limit")
        period = parse_duration(cpu["period"])
        if not 1_000 <= period <= 1_000_000:
            raise ValueError("cpu.period must be a duration in 1ms..1s")
    if "limit" in cpu:
        limit = parse_cpu(cpu["limit"])
        if not 0 < limit <= 1024 or math.isnan(limit):
            raise ValueError("cpu.limit must be in (0, 1024]")
        quota = round(limit * period)
        if quota < 1_000:
            raise ValueError("cpu.limit x cpu.period must be at least 1ms")
    if (memory_max := (merged.get("memory") or {}).get("max")) is not None:
        memory = parse_size(memory_max)
        if memory <= 0:
            raise ValueError("memory.max must be a positive quantity")
    return quota, period, memory, enforcement


class FloorPlugin:
    """Handlers for the three events the Go plugin handles."""

    def __init__(self, key: bytes, cgroup_version: int) -> None:
        self.key = key
        self.cgroup_version = cgroup_version
        self.plans: dict[tuple[str, str], tuple[int, int, int, str]] = {}
        self.live: set[str] = set()

    def plan_for(self, pod: pb.PodSandbox, ctr: pb.Container) -> tuple[int, int, int, str]:
        notes = pod.annotations
        texts = (notes.get(POD_KEY, ""), notes.get(CONTAINER_KEY + ctr.name, ""))
        if texts == ("", ""):
            return NO_PLAN
        plan = self.plans.get(texts)
        if plan is None:
            plan = plan_of(texts)
            if len(self.plans) >= PLANS_MAX:
                self.plans.clear()
            self.plans[texts] = plan
        return plan

    def synchronize(self, pods: list[pb.PodSandbox], containers: list[pb.Container]) -> None:
        by_id = {pod.id: pod for pod in pods}
        live = set()
        for ctr in containers:
            live.add(ctr.id)
            if (pod := by_id.get(ctr.pod_sandbox_id)) is not None:
                with contextlib.suppress(ValueError):  # the Go plugin logs these if asked
                    self.plan_for(pod, ctr)
        self.live = live
        if len(containers) >= heap.TRIM_AFTER_CONTAINERS:
            # nri-sla run trims once the answer is sent; the floor has nothing after it.
            asyncio.get_running_loop().call_soon(heap.release_freed_heap)

    def create_container(self, pod: pb.PodSandbox, ctr: pb.Container) -> CreateResult:
        quota, period, memory, enforcement = self.plan_for(pod, ctr)
        cid = ctr.id
        self.live.add(cid)
        if not enforcement:
            return CreateResult()
        adj = pb.ContainerAdjustment()
        body = {
            "v": RECORD_VERSION,
            "path": "nri",
            "enforcement": enforcement,
            "cgroup_version": self.cgroup_version,
        }
        linux = adj.linux.resources
        if quota:
            linux.cpu.quota.value, linux.cpu.period.value = quota, period
            body["cpu_quota"], body["cpu_period"] = quota, period
        if memory:
            linux.memory.limit.value = memory
            body["memory_max"] = memory
        adj.annotations[APPLIED_KEY] = sign_record(record_text(body), cid, self.key)
        return CreateResult(adjustment=adj)

    def remove_container(self, pod: pb.PodSandbox, ctr: pb.Container) -> None:
        self.live.discard(ctr.id)


async def serve(socket_path: str) -> None:
    heap.keep_large_blocks_mapped()
    cgroup_version = 2 if os.path.exists("/sys/fs/cgroup/cgroup.controllers") else 1
    stub = Stub(
        FloorPlugin(os.urandom(32), cgroup_version),
        name="nri-sla-floor",
        idx="10",
        socket_path=socket_path,
    )
    await stub.run()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["run"])
    parser.add_argument("--socket", required=True)
    parser.add_argument("--config", help="accepted and ignored (no node config)")
    parser.add_argument("--metrics-address", help="accepted and ignored (no metrics)")
    args = parser.parse_args()
    try:
        import uvloop
    except ImportError:  # as `nri-sla run`: asyncio's loop where the wheel is missing
        asyncio.run(serve(args.socket))
    else:
        uvloop.run(serve(args.socket))
    return 0


if __name__ == "__main__":
    sys.exit(main())
