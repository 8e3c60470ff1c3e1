"""200 pods at once through a real containerd, with and without nri-sla (issue #12).

Runs only with NRI_SLA_E2E_LOAD=1 (about 4 minutes on 2 CPUs). The same 200 pods, 16
created at a time, first with no NRI plugin at all, then with `nri-sla run` enforcing:
every container's cgroup is read back, and the figures printed as "evidence:" lines are
the wall time of each CRI stage per pod (p50/p99), nri-sla's own time per
CreateContainer from its Prometheus histogram, and the plugin's share of the pods'
start time.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from e2e_checks import check_node
from e2e_metrics import histogram_quantile
from e2e_rollout import STAGES, Rollout, sla_pods, stage_figures
from e2e_service import SlaService

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(os.environ.get("NRI_SLA_E2E_LOAD") != "1",
                       reason="the 200-pod load run takes minutes: set NRI_SLA_E2E_LOAD=1"),
    pytest.mark.timeout(1800),
]

PODS = 200
WORKERS = 16
HISTOGRAM = "nri_sla_request_seconds"


def mem_available_mib() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) // 1024
    return -1


def run_wave(cluster, prefix: str):
    pods, expected = sla_pods(PODS, prefix)
    load = os.getloadavg()[0]
    rollout = Rollout(cluster, pods, WORKERS).start()
    runs = rollout.wait(timeout=1200)
    print(f"evidence: {prefix}: {rollout.summary()}; MemAvailable {mem_available_mib()} MiB; "
          f"load average {load:.1f} before, {os.getloadavg()[0]:.1f} after")
    for stage in STAGES:
        print(f"evidence: {prefix}: {stage_figures(runs, stage)}")
    failed = [f"{r.name} at {r.failed_at}: {r.error}" for r in runs if r.failed_at]
    assert not failed, "\n".join(failed[:10])
    return rollout, runs, expected


def pod_seconds(runs) -> float:
    return sum(sum(r.seconds.values()) for r in runs)


def test_200_pods_at_once_with_and_without_nri_sla(cluster, plugins, sla_plugin_argv):
    bare, bare_runs, _ = run_wave(cluster, "bare")
    assert not cluster.remove_pods()

    sla = SlaService(cluster, plugins, sla_plugin_argv)
    plugin = sla.start()
    enforced, runs, expected = run_wave(cluster, "sla")
    result = check_node(cluster, sla, expected, reported=set())
    assert len(result.enforced) == PODS  # every cgroup read back holds its pod's SLA

    samples = sla.scrape()
    for event in ("CreateContainer", "StartContainer"):
        buckets = samples.buckets(HISTOGRAM, event=event)
        count = samples.get(f"{HISTOGRAM}_count", event=event)
        total = samples.get(f"{HISTOGRAM}_sum", event=event)
        assert count == PODS
        p50, p99 = (histogram_quantile(q, buckets) for q in (0.5, 0.99))
        print(f"evidence: nri-sla {event}: n={count:.0f} mean={total / count * 1000:.2f}ms "
              f"p50 in ({p50[0] * 1000:g}, {p50[1] * 1000:g}]ms "
              f"p99 in ({p99[0] * 1000:g}, {p99[1] * 1000:g}]ms")
    inside = sum(samples.get(f"{HISTOGRAM}_sum", event=e) or 0.0
                 for e in ("CreateContainer", "StartContainer"))
    print(f"evidence: pod start (runp+create+start) summed over {PODS} pods: "
          f"{pod_seconds(bare_runs):.1f}s without a plugin, {pod_seconds(runs):.1f}s with "
          f"nri-sla, of which {inside:.2f}s inside nri-sla's handlers "
          f"({inside / pod_seconds(runs) * 100:.2f}%)")
    print(f"evidence: wall time for {PODS} pods: {bare.wall_seconds:.1f}s without a "
          f"plugin, {enforced.wall_seconds:.1f}s with nri-sla")
    assert "Traceback" not in plugin.output()
