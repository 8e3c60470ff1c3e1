"""Compliance signals per SLA container (fake cgroup v2 files): throttling over the last
interval, memory events, PSI and the enforced values, as Prometheus series labelled
namespace/pod/container that go away with the container, capped in number."""

from __future__ import annotations

import asyncio
from itertools import pairwise
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.exposition import generate_latest

from nri_plugin.config.values import WatchConfig
from nri_plugin.ops.metrics import Metrics
from nri_plugin.plugin.container_metrics import ContainerCollector, fair_quota
from nri_plugin.simulated.runtime import make_container, make_pod
from tests.support.cgroups import CgroupTree
from tests.support.plugin_helpers import guaranteed, make_node, plugin_session

SLA = "cpu: {limit: 1.5}\nmemory: {max: 1Gi, high: 768Mi}"


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


def signals(d: Path, periods: int, throttled: int, high: int = 0) -> None:
    """What the kernel shows in a v2 container cgroup."""
    (d / "cpu.stat").write_text(
        f"usage_usec 5000000\nuser_usec 4000000\nsystem_usec 1000000\n"
        f"nr_periods {periods}\nnr_throttled {throttled}\n"
        f"throttled_usec {throttled * 20000}\nnr_bursts 0\n"
        "burst_usec 0\n"
    )
    (d / "memory.events").write_text(f"low 0\nhigh {high}\nmax 1\noom 0\noom_kill 0\n")
    (d / "cpu.pressure").write_text(
        "some avg10=12.50 avg60=3.00 avg300=1.00 total=2500000\n"
        "full avg10=2.00 avg60=0.50 avg300=0.10 total=400000\n"
    )
    (d / "memory.pressure").write_text(
        "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
        "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
    )
    (d / "io.pressure").write_text("garbage line\nsome avg10=x total=1\n")  # skipped


def collect(metrics: Metrics, plugin) -> None:
    """The per-container series of the plugin's watch, as `nri-sla run` registers them."""
    limit = plugin.node.config.watch.metrics_containers
    metrics.registry.register(ContainerCollector(lambda: plugin.watch.last, limit))


async def started(
    session, plugin, node, tree: CgroupTree, pod_name: str, name: str, namespace: str = "infer"
):
    pod = make_pod(pod_name, namespace=namespace, annotations={"sla.nri.io/pod": SLA})
    ctr = make_container(pod, name, resources=guaranteed(2))
    await session.create_container(pod, ctr)
    d = tree.add_cgroup(ctr.linux.cgroups_path)["unified"]
    assert (
        node.write_plan(
            plugin.registry.get(ctr.id).current_plan, ctr.linux.cgroups_path, scope="runtime"
        )
        == []
    )
    await session.start_container(pod, ctr)
    return pod, ctr, d


def test_signals_and_enforced_values_become_container_series(tmp_path, v2_tree):
    metrics = Metrics()
    node = make_node(2, v2_tree, watch=WatchConfig(interval=30))
    who = {"namespace": "infer", "pod": "llm", "container": "server"}

    def value(name: str, **labels: str) -> float | None:
        return metrics.value(f"nri_sla_container_{name}", **who, **labels)

    async def scenario():
        async with plugin_session(node, tmp_path, metrics=metrics) as (_, session, served):
            collect(metrics, served)
            pod, ctr, d = await started(session, served, node, v2_tree, "llm", "server")
            signals(d, periods=1000, throttled=10)
            served.drift_pass()
            first = value("cpu_throttled_ratio")
            signals(d, periods=1200, throttled=60, high=7)  # 50 of 200 periods throttled
            served.drift_pass()
            during = {
                name: value(name)
                for name in (
                    "cpu_throttled_ratio",
                    "cpu_periods_total",
                    "cpu_throttled_periods_total",
                    "cpu_throttled_seconds_total",
                    "cpu_limit_cores",
                    "memory_max_bytes",
                    "memory_high_bytes",
                    "drifted_settings",
                )
            }
            during["high"] = value("memory_events_total", event="high")
            during["psi"] = value("pressure_stalled_seconds_total", resource="cpu", kind="some")
            during["stalled"] = value("pressure_stalled_seconds_total", resource="cpu", kind="full")
            during["io_psi"] = value("pressure_stalled_seconds_total", resource="io", kind="some")
            text = generate_latest(metrics.registry).decode()
            await session.stop_container(pod, ctr)
            await session.remove_container(pod, ctr)
            served.drift_pass()
            after = value("cpu_limit_cores")
            return first, during, text, after

    first, during, text, after = run(scenario())
    assert first is None  # one sample: no interval yet
    assert during == {
        "cpu_throttled_ratio": 0.25,
        "cpu_periods_total": 1200,
        "cpu_throttled_periods_total": 60,
        "cpu_throttled_seconds_total": 1.2,
        "cpu_limit_cores": 1.5,
        "memory_max_bytes": 1 << 30,
        "memory_high_bytes": 768 << 20,
        "drifted_settings": 0,
        "high": 7,
        "psi": 2.5,
        "stalled": 0.4,
        "io_psi": None,
    }
    assert (
        'nri_sla_container_memory_events_total{container="server",event="high",'
        'namespace="infer",pod="llm"} 7.0' in text
    )
    assert after is None  # the container went away: its series with it
    assert "nri_sla_container_" not in generate_latest(metrics.registry).decode().replace(
        "# HELP nri_sla_container_", ""
    ).replace("# TYPE nri_sla_container_", "")


def test_series_are_capped_and_the_rest_counted(tmp_path, v2_tree):
    metrics = Metrics()
    node = make_node(2, v2_tree, watch=WatchConfig(interval=30, metrics_containers=2))

    async def scenario():
        async with plugin_session(node, tmp_path, metrics=metrics) as (_, session, served):
            collect(metrics, served)
            for i in range(5):
                await started(session, served, node, v2_tree, f"p{i}", "c")
            served.drift_pass()

    run(scenario())
    text = generate_latest(metrics.registry).decode()
    exported = {
        line.split('pod="')[1].split('"')[0]
        for line in text.splitlines()
        if line.startswith("nri_sla_container_cpu_limit_cores{")
    }
    assert exported == {"p0", "p1"}  # in a stable order: namespace, pod, container
    assert metrics.value("nri_sla_containers_unexported") == 3
    assert metrics.value("nri_sla_namespace_containers_unexported", namespace="infer") == 3


@pytest.mark.slow
def test_one_namespace_cannot_silence_the_others_series(tmp_path, v2_tree, caplog):
    """The cap once kept the first 1,000 containers in (namespace, pod, name) order,
    so 1,000 containers in `batch` dropped every series of `prod`. The cap is shared
    round-robin between namespaces: all 5 of prod are exported, batch gets the rest."""
    import logging
    import time

    metrics = Metrics()
    node = make_node(2, v2_tree, watch=WatchConfig(interval=30, metrics_containers=1000))

    async def scenario():
        async with plugin_session(node, tmp_path, metrics=metrics) as (_, session, served):
            collect(metrics, served)
            for i in range(1000):
                await started(session, served, node, v2_tree, f"job-{i:04d}", "c", "batch")
            for i in range(5):
                await started(session, served, node, v2_tree, f"web-{i}", "app", "prod")
            served.drift_pass()

    run(scenario())
    caplog.set_level(logging.WARNING, logger="nri_sla.metrics")
    start = time.perf_counter()
    text = generate_latest(metrics.registry).decode()
    took = time.perf_counter() - start
    generate_latest(metrics.registry)  # a second scrape: no second line
    series = [
        line for line in text.splitlines() if line.startswith("nri_sla_container_cpu_limit_cores{")
    ]
    prod = {line.split('pod="')[1].split('"')[0] for line in series if 'namespace="prod"' in line}
    assert prod == {f"web-{i}" for i in range(5)}
    assert len(series) == 1000
    for i in range(5):  # every series of a prod container, not only one
        who = {"namespace": "prod", "pod": f"web-{i}", "container": "app"}
        assert metrics.value("nri_sla_container_memory_max_bytes", **who) == 1 << 30
        assert metrics.value("nri_sla_container_drifted_settings", **who) == 0
    assert metrics.value("nri_sla_containers_unexported") == 5
    assert metrics.value("nri_sla_namespace_containers_unexported", namespace="batch") == 5
    assert metrics.value("nri_sla_namespace_containers_unexported", namespace="prod") is None
    # batch keeps its first 995 by pod name: deterministic
    assert 'pod="job-0994"' in text and 'pod="job-0995"' not in text
    lines = [r for r in caplog.records if r.getMessage() == "per-container series capped"]
    assert len(lines) == 1 and lines[0].fields["unexported"] == 5
    assert lines[0].fields["largest"] == "batch"
    print(
        f"evidence: 1,005 containers, cap 1,000: prod 5/5 exported, batch 995/1000, "
        f"scrape {took * 1000:.0f} ms, {len(lines)} log line"
    )


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(st.text("abcdef", min_size=1, max_size=3), st.integers(1, 50), max_size=12),
    st.integers(0, 200),
)
def test_fair_quota_is_round_robin(counts, limit):
    quota = fair_quota(counts, limit)
    assert set(quota) == set(counts)
    assert sum(quota.values()) == min(limit, sum(counts.values()))
    assert all(0 <= quota[ns] <= counts[ns] for ns in counts)
    capped = [ns for ns in counts if quota[ns] < counts[ns]]
    for ns in capped:  # a namespace left short has at least what any other got, minus one
        assert quota[ns] >= max(quota.values()) - 1
    # round-robin in name order: of two capped namespaces the earlier never has fewer
    capped.sort()
    assert all(quota[a] >= quota[b] for a, b in pairwise(capped))
    assert fair_quota(dict(reversed(list(counts.items()))), limit) == quota
