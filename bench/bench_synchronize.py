#!/usr/bin/env python3
"""What the plugin's Synchronize handler costs, in-process, for N live containers.

Each case builds N running containers (one pod each, the simulator's make_pod and
make_container), every one asking an SLA (CPU and memory limits), and answers their
encoded SynchronizeRequest through the NRI stub's route (the request checked, its pods
and containers handed on encoded) and runs the restore after it, on a plugin that has
just started (a restart: nothing known):

* records: every container carries the `applied` record the plugin wrote at its
  CreateContainer (genuine: made by a plugin over the same node key), so restore
  verifies and decodes every one;
* no records: no container carries one (created while no plugin was registered), so
  every one is reported "created unenforced";
* no SLA: plain containers.

Then a second Synchronize on the same plugin (a reconnect: the runtime restarted). The
node plans for cgroup v2 over examples/dgx-like.yaml, its cgroup tree a temporary
directory holding every container's files as runc wrote them, and the drift watch on
(its default interval). Figures: CPU time (time.process_time) and wall time, best of
--repeat, of the answer (what the runtime waits for: the stub's route and
`SlaPlugin.synchronize`) and of the restore that runs right after it
(`SynchronizeRestore.restore`: every request waits for it); the 0.5 s target of 10,000
containers is the answer's. Then the memory per tracked container: the Python heap a
restart Synchronize leaves the plugin holding (tracemalloc), divided by N. --profile
prints the top of a cProfile of one restart Synchronize (answer and restore) per case.

    .venv/bin/python bench/bench_synchronize.py [--n 1000 10000] [--repeat 3] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import logging
import pstats
import shutil
import tempfile
import time
import tracemalloc
from pathlib import Path

from nri_plugin.config.cap import Cap
from nri_plugin.config.values import NodeConfig, Permissions, PodCaps
from nri_plugin.core.nodestate import NodeState
from nri_plugin.enforce.capabilities import NodeCapabilities
from nri_plugin.enforce.cgpaths import CgroupFacts
from nri_plugin.enforce.plan_writes import cgroup_writes
from nri_plugin.nri.core import PLUGIN_SERVICE
from nri_plugin.nri.pb import nri_pb2 as pb
from nri_plugin.nri.stub import Stub
from nri_plugin.plan.allocator import Allocator
from nri_plugin.plan.rt_budget import RtBudget
from nri_plugin.plugin import SlaPlugin
from nri_plugin.simulated.runtime import make_container, make_pod, make_resources
from nri_plugin.topology.snapshot import load_snapshot

DGX = Path(__file__).resolve().parents[1] / "examples" / "dgx-like.yaml"
KEY = bytes(range(32))  # the node's record key, shared by the plugin before and after
SLA = "cpu: {limit: 1}\nmemory: {max: 1Gi}"
TARGET_10K = 0.5  # seconds


def node(cgroup_root: Path) -> NodeState:
    snapshot = load_snapshot(DGX)
    config = NodeConfig(
        permissions=Permissions(exclusive_cpus=("*",), exceed_runtime_limits=("*",)),
        pod_caps=PodCaps(exclusive_cpus=Cap(100, percent=True)),
    )
    return NodeState(
        config,
        2,
        facts=CgroupFacts(version=2, driver="cgroupfs", root=cgroup_root),
        allocator=Allocator(snapshot.topology, snapshot.inventory),
        rt_budget=RtBudget(0.5),
        capabilities=NodeCapabilities(io_weight=True, bfq=False),
        record_key=KEY,
    )


def build(n: int, case: str, cgroup_root: Path) -> tuple[list[pb.PodSandbox], list[pb.Container]]:
    """N running containers as the runtime reports them at Synchronize, their cgroups
    written as runc would (the plugin's adjustment applied)."""
    maker = SlaPlugin(node(cgroup_root))  # the plugin that created them
    pods, containers = [], []
    for i in range(n):
        pod = make_pod(
            f"sync-{i}", annotations={"sla.nri.io/pod": SLA} if case != "no SLA" else None
        )
        ctr = make_container(
            pod, "c", resources=make_resources(cpu_shares=102), state=pb.CONTAINER_CREATED
        )
        answer = maker.create_container(pod, ctr)
        if answer.adjustment is not None:
            ctr.linux.resources.MergeFrom(answer.adjustment.linux.resources)
            if case == "records":
                ctr.annotations.update(answer.adjustment.annotations)
        entry = maker.registry.get(ctr.id)
        if entry is not None and entry.decided_plan is not None:
            cgroup = cgroup_root / ctr.linux.cgroups_path.lstrip("/")
            cgroup.mkdir(parents=True)
            for write in cgroup_writes(entry.decided_plan, "all", bfq=False):
                (cgroup / write.file).write_text(write.value)
        ctr.state = pb.CONTAINER_RUNNING
        pods.append(pod)
        containers.append(ctr)
    return pods, containers


def answer(plugin: SlaPlugin, request: bytes) -> None:
    """The Synchronize as the stub answers it: the encoded request checked, its pods and
    containers handed on encoded (nri.wire.LazyMessages), the plugin's handler."""
    Stub(plugin, name="bench", idx="01").routes[(PLUGIN_SERVICE, "Synchronize")](request)


def measure(plugin: SlaPlugin, request: bytes) -> tuple[float, float, float, float]:
    """CPU and wall seconds of one Synchronize: its answer, then the restore after it."""
    cpu, wall = time.process_time(), time.perf_counter()
    answer(plugin, request)
    answer_cpu, answer_wall = time.process_time() - cpu, time.perf_counter() - wall
    cpu, wall = time.process_time(), time.perf_counter()
    plugin.restorer.restore()
    return (answer_cpu, answer_wall, time.process_time() - cpu, time.perf_counter() - wall)


def whole(plugin: SlaPlugin, request: bytes) -> None:
    answer(plugin, request)
    plugin.restorer.restore()


def per_container(plugin: SlaPlugin, request: bytes, n: int) -> float:
    """Bytes of the Python heap a restart Synchronize of `n` containers leaves the plugin
    holding, per container (tracemalloc: what the registry, the node's books and the
    plans keep; no protobuf message outlives the restore)."""
    gc.collect()
    tracemalloc.start()
    try:
        whole(plugin, request)
        gc.collect()
        return tracemalloc.get_traced_memory()[0] / n
    finally:
        tracemalloc.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--case", nargs="+", default=["records", "no records", "no SLA"])
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--sort", default="cumulative", help="the profile's order (pstats)")
    args = parser.parse_args()
    # What a service logs at its default level goes somewhere, as in `nri-sla run`.
    logging.basicConfig(level=logging.INFO, filename="/dev/null")
    missed = False
    for n in args.n:
        for case in args.case:
            root = Path(tempfile.mkdtemp(prefix="nri-bench-sync-"))
            try:
                pods, containers = build(n, case, root)
                request = pb.SynchronizeRequest(
                    pods=pods, containers=containers
                ).SerializeToString()
                restart, reconnect = [], []
                for _ in range(args.repeat):
                    plugin = SlaPlugin(node(root))
                    restart.append(measure(plugin, request))
                    reconnect.append(measure(plugin, request))
                held = per_container(SlaPlugin(node(root)), request, n)
                if args.profile:
                    plugin = SlaPlugin(node(root))
                    profile = cProfile.Profile()
                    profile.runcall(whole, plugin, request)
                    print(f"-- profile: {n} containers, {case}")
                    pstats.Stats(profile).sort_stats(args.sort).print_stats(30)
            finally:
                shutil.rmtree(root, ignore_errors=True)
            for what, samples in (("restart", restart), ("reconnect", reconnect)):
                answer_cpu, answer_wall = min(s[:2] for s in samples)
                cpu, wall = min(s[2:] for s in samples)
                over = n >= 10000 and answer_wall > TARGET_10K
                missed |= over
                print(
                    f"Synchronize {n:>6} containers, {case:<10} {what:<9} answer "
                    f"cpu {answer_cpu * 1e3:6.2f} ms wall {answer_wall * 1e3:6.2f} ms"
                    f"{'  (over the 0.5 s target)' if over else ''}; restore after it "
                    f"cpu {cpu * 1e3:8.1f} ms wall {wall * 1e3:8.1f} ms",
                    flush=True,
                )
            print(
                f"Synchronize {n:>6} containers, {case:<10} held after it: "
                f"{held / 1024:.2f} KiB per tracked container (Python heap)",
                flush=True,
            )
    return 1 if missed else 0


if __name__ == "__main__":
    raise SystemExit(main())
