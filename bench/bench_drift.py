"""What one drift-watch pass costs for 1,000 SLA containers, and what reading its results
costs (a scrape of the per-container series, `nri-sla status`).

The plugin gets its containers as in production (CreateContainer, StartContainer through
its handlers); their cgroups are a fake tree on a tmpfs (/dev/shm) holding what runc and
nri-sla wrote and what the kernel shows (cpu.stat, memory.events, PSI). With --real N
(root, a cgroup v1 host) N containers get real cgroups instead, so the per-file cost of
cgroupfs itself is measured too. Every figure is the median wall and CPU time (this
process) of one pass, one scrape of the metrics registry, one status document; on a
loaded machine the CPU time is the one to read. "loop held" is the longest the service's
event loop goes without answering a request because of a pass: the whole pass when it
ran as one call (before 2026-12-01), now the longest of its steps (watch.PASS_STEP
containers each; the service serves requests between them), and that longest step again
with the cyclic garbage collector off (what is left is the steps' own work; the difference
is a full collection a pass's allocations set off, which grows with the heap).

    .venv/bin/python bench/bench_drift.py [--containers 1000] [--passes 7] [--real 200]
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

from prometheus_client.exposition import generate_latest

from nri_plugin.config.values import NodeConfig, WatchConfig
from nri_plugin.core.hosttopology import node_allocator
from nri_plugin.core.nodestate import NodeState
from nri_plugin.enforce.capabilities import NodeCapabilities
from nri_plugin.enforce.cgpaths import CgroupFacts
from nri_plugin.enforce.cgroupdetect import detect_cgroup_facts
from nri_plugin.ops.metrics import Metrics
from nri_plugin.plan.rt_budget import RtBudget
from nri_plugin.plugin.container_metrics import ContainerCollector
from nri_plugin.plugin.handlers import SlaPlugin
from nri_plugin.simulated.runtime import make_container, make_pod, make_resources

SLA = {
    1: "cpu: {limit: 0.5}\nmemory: {max: 256Mi}\nio: {weight: 200}",
    2: "cpu: {limit: 0.5}\nmemory: {max: 256Mi, high: 200Mi}\nio: {weight: 200}",
}
KERNEL_FILES = {  # what the kernel shows besides the values written
    1: {
        "cpu": {"cpu.stat": "nr_periods 100\nnr_throttled 3\nthrottled_time 1000\n"},
        "memory": {
            "memory.failcnt": "0\n",
            "memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n",
        },
    },
    2: {
        "": {
            "cpu.stat": "usage_usec 1\nnr_periods 100\nnr_throttled 3\nthrottled_usec 10\n",
            "memory.events": "low 0\nhigh 2\nmax 0\noom 0\noom_kill 0\n",
            **{
                f"{r}.pressure": "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
                "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
                for r in ("cpu", "memory", "io")
            },
        }
    },
}
WRITTEN = {
    1: {
        "cpu": ("cpu.cfs_quota_us", "cpu.cfs_period_us"),
        "memory": ("memory.limit_in_bytes",),
        "blkio": ("blkio.bfq.weight",),
    },
    2: {"": ("cpu.max", "memory.max", "memory.high", "io.weight")},
}


def plugin_over(facts: CgroupFacts) -> SlaPlugin:
    config = NodeConfig(watch=WatchConfig(interval=30))
    node = NodeState(
        config,
        facts.version,
        facts=facts,
        allocator=node_allocator(config, gpus=False),
        rt_budget=RtBudget(0.5),
        capabilities=NodeCapabilities(io_weight=True, bfq=True),
    )
    return SlaPlugin(node, Metrics())


def populate(
    plugin: SlaPlugin, count: int, make_dirs: Callable[[str], None], prefix: str = ""
) -> None:
    """`count` started SLA containers (cgroups under `prefix`): planned by the plugin,
    cgroups made by make_dirs, the adjustment's values written as runc does, the direct
    ones by StartContainer."""
    version = plugin.node.cgroup_version
    for i in range(count):
        pod = make_pod(
            f"pod-{i}", namespace=f"ns-{i % 20}", annotations={"sla.nri.io/pod": SLA[version]}
        )
        ctr = make_container(
            pod,
            "app",
            resources=make_resources(
                cpu_shares=1024, cpu_quota=100_000, cpu_period=100_000, memory_limit=1 << 30
            ),
        )
        ctr.linux.cgroups_path = prefix + ctr.linux.cgroups_path
        plugin.create_container(pod, ctr)
        make_dirs(ctr.linux.cgroups_path)
        plan = plugin.registry.get(ctr.id).current_plan
        assert plugin.node.write_plan(plan, ctr.linux.cgroups_path, "runtime") == []
        plugin.start_container(pod, ctr)


def fake_tree(root: Path, version: int) -> Callable[[str], None]:
    def make_dirs(cgroups_path: str) -> None:
        controllers = KERNEL_FILES[version] | {c: {} for c in WRITTEN[version]}
        for controller in controllers:
            d = root / controller / cgroups_path.lstrip("/")
            d.mkdir(parents=True, exist_ok=True)
            for name in WRITTEN[version].get(controller, ()):
                (d / name).touch()
            for name, text in KERNEL_FILES[version].get(controller, {}).items():
                (d / name).write_text(text)

    return make_dirs


@contextlib.contextmanager
def real_v1() -> Iterator[tuple[CgroupFacts, Callable[[str], None], str]]:
    facts = detect_cgroup_facts()
    if os.geteuid() != 0 or facts.version != 1:
        raise SystemExit("--real needs root on a cgroup v1 host")
    top = f"nri-sla-bench-{uuid.uuid4().hex[:8]}"
    made: list[Path] = []

    def make_dirs(cgroups_path: str) -> None:
        for hierarchy in facts.controllers().values():
            d = Path(hierarchy.path) / cgroups_path.lstrip("/")
            d.mkdir(parents=True, exist_ok=True)
            made.append(d)

    try:
        yield facts, make_dirs, f"/{top}"
    finally:
        for d in sorted(made, key=lambda p: len(p.parts), reverse=True):
            while d.name != top and d.parent != d:
                with contextlib.suppress(OSError):
                    d.rmdir()
                d = d.parent
        for hierarchy in facts.controllers().values():
            with contextlib.suppress(OSError):
                (Path(hierarchy.path) / top).rmdir()


def timed(work: Callable[[], object], passes: int) -> tuple[float, float]:
    """Median wall and CPU seconds of `passes` runs."""
    wall, cpu = [], []
    for _ in range(passes):
        w, c = time.perf_counter(), time.process_time()
        work()
        wall.append(time.perf_counter() - w)
        cpu.append(time.process_time() - c)
    return statistics.median(wall), statistics.median(cpu)


def longest_step(plugin: SlaPlugin, passes: int, collector: bool = True) -> tuple[float, float]:
    """Median over `passes` passes of the longest step's wall and CPU seconds (with the
    cyclic garbage collector on, as in the service, or off)."""
    wall, cpu = [], []
    if not collector:
        gc.disable()
    for _ in range(passes):
        steps = plugin.drift_steps()
        longest = (0.0, 0.0)
        while True:
            w, c = time.perf_counter(), time.process_time()
            if next(steps, None) is None:
                break
            longest = max(longest, (time.perf_counter() - w, time.process_time() - c))
        wall.append(longest[0])
        cpu.append(longest[1])
    gc.enable()
    return statistics.median(wall), statistics.median(cpu)


def report(label: str, plugin: SlaPlugin, passes: int) -> None:
    count = len(plugin.registry.watched())
    files = sum(len(r.settings) for r in plugin.watch.look().containers)
    wall, cpu = timed(plugin.drift_pass, passes)
    step_wall, step_cpu = longest_step(plugin, passes)
    no_gc = longest_step(plugin, passes, collector=False)
    assert all(r.state == "watched" and not r.drifted for r in plugin.watch.last.containers)
    metrics = plugin.metrics
    metrics.registry.register(ContainerCollector(lambda: plugin.watch.last, count))
    scrape = timed(lambda: generate_latest(metrics.registry), passes)
    status = timed(lambda: plugin.watch.look().to_json(True), passes)
    print(
        f"{label:<30} {count:5d} containers, {files:5d} settings; wall/cpu ms: pass "
        f"{wall * 1e3:6.1f}/{cpu * 1e3:6.1f} ({cpu / count * 1e6:4.0f} us cpu/container), "
        f"scrape {scrape[0] * 1e3:6.1f}/{scrape[1] * 1e3:6.1f}, status "
        f"{status[0] * 1e3:6.1f}/{status[1] * 1e3:6.1f}; loop held: whole pass "
        f"{wall * 1e3:6.1f}/{cpu * 1e3:6.1f} -> longest step "
        f"{step_wall * 1e3:5.1f}/{step_cpu * 1e3:5.1f} (collector off "
        f"{no_gc[0] * 1e3:4.1f}/{no_gc[1] * 1e3:4.1f})",
        flush=True,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--containers", type=int, default=1000)
    parser.add_argument("--passes", type=int, default=7)
    parser.add_argument(
        "--real",
        type=int,
        default=0,
        metavar="N",
        help="also N containers with real cgroup v1 dirs (root)",
    )
    args = parser.parse_args()
    shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
    for version in (1, 2):
        with tempfile.TemporaryDirectory(dir=shm) as tmp:
            root = Path(tmp)
            for controller in WRITTEN[version] if version == 1 else ():
                (root / controller).mkdir()
            facts = CgroupFacts(version, "cgroupfs", root)
            plugin = plugin_over(facts)
            populate(plugin, args.containers, fake_tree(root, version))
            report(f"fake cgroup v{version} tree (tmpfs)", plugin, args.passes)
    if args.real:
        with real_v1() as (facts, make_dirs, prefix):
            plugin = plugin_over(facts)
            populate(plugin, args.real, make_dirs, prefix)
            report("real cgroup v1 (this host)", plugin, args.passes)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
