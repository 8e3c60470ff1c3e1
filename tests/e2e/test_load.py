"""200 pods at once through a real containerd enforcing with nri-sla, beside 200 pods
through a second containerd with no NRI plugin at all, both at the same time (issue #12).

Runs only with NRI_SLA_E2E_LOAD=1 (about 3 minutes on 2 CPUs). The two rollouts share
the machine at the same moments, so whatever else loads it weighs on both alike: the
difference between them is the plugin's. Each creates 200 pods (each its own CPU limit
and memory.max), 16 at a time. Every container's cgroup is read back (nri-sla's: exactly
its SLA; the other's: none). The "evidence:" lines give the wall time of each CRI stage
per pod (p50/p99) on both, nri-sla's own time per CreateContainer and StartContainer
from its Prometheus histogram, and the CPU time the plugin process used.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.e2e.e2e_checks import check_node
from tests.e2e.e2e_metrics import histogram_quantile, per_bucket
from tests.e2e.e2e_rollout import (
    STAGES,
    Expected,
    Rollout,
    audit,
    node_containers,
    sla_pods,
    stage_figures,
)
from tests.e2e.e2e_service import SlaService

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        os.environ.get("NRI_SLA_E2E_LOAD") != "1",
        reason="the 200-pod load run takes minutes: set NRI_SLA_E2E_LOAD=1",
    ),
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


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (proc(5): fields 14 and 15, after the command)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def report(name: str, rollout: Rollout) -> None:
    print(f"evidence: {name}: {rollout.summary()}")
    for stage in STAGES:
        print(f"evidence: {name}: {stage_figures(rollout.runs, stage)}")
    failed = [f"{r.name} at {r.failed_at}: {r.error}" for r in rollout.runs if r.failed_at]
    assert not failed, "\n".join(failed[:10])


def pod_seconds(rollout: Rollout) -> float:
    return sum(sum(r.seconds.values()) for r in rollout.runs)


def test_200_pods_at_once_with_and_without_nri_sla(
    cluster, second_cluster, plugins, sla_plugin_argv
):
    sla = SlaService(cluster, plugins, sla_plugin_argv)
    plugin = sla.start()
    cpu_before = cpu_seconds(plugin.proc.pid)
    pods, expected = sla_pods(PODS, "p")
    load, mem = os.getloadavg()[0], mem_available_mib()
    enforced = Rollout(cluster, pods, WORKERS).start()
    bare = Rollout(second_cluster, pods, WORKERS).start()
    enforced.wait(timeout=1500)
    bare.wait(timeout=1500)
    plugin_cpu = cpu_seconds(plugin.proc.pid) - cpu_before
    print(
        f"evidence: load average {load:.1f} before, {os.getloadavg()[0]:.1f} after; "
        f"MemAvailable {mem} MiB before, {mem_available_mib()} MiB with 400 pods"
    )
    report("nri-sla", enforced)
    report("no plugin", bare)

    result = check_node(cluster, sla, expected, reported=set())
    assert len(result.enforced) == PODS  # every cgroup read back holds its pod's SLA
    # No record on any of them: the audit checks that nothing of an SLA is in force.
    unlimited = {name: Expected(-1, 100_000, -1) for name in expected}
    plain = audit(node_containers(second_cluster), unlimited)
    assert len(plain.unenforced) == PODS and not plain.wrong, plain.wrong[:5]

    samples = sla.scrape()
    inside = 0.0
    for event in ("CreateContainer", "StartContainer"):
        buckets = samples.buckets(HISTOGRAM, event=event)
        count = samples.get(f"{HISTOGRAM}_count", event=event)
        total = samples.get(f"{HISTOGRAM}_sum", event=event) or 0.0
        assert count == PODS
        inside += total
        p50, p99 = (histogram_quantile(q, buckets) for q in (0.5, 0.99))
        print(
            f"evidence: nri-sla {event}: n={count:.0f} mean={total / count * 1000:.2f}ms "
            f"p50 in ({p50[0] * 1000:g}, {p50[1] * 1000:g}]ms "
            f"p99 in ({p99[0] * 1000:g}, {p99[1] * 1000:g}]ms; per bucket (le ms: n) "
            + " ".join(f"{le * 1000:g}:{n:.0f}" for le, n in per_bucket(buckets))
        )
    with_plugin, without = pod_seconds(enforced), pod_seconds(bare)
    print(
        f"evidence: pod start (runp+create+start) summed over {PODS} pods: "
        f"{with_plugin:.1f}s with nri-sla, {without:.1f}s without a plugin "
        f"({(with_plugin / without - 1) * 100:+.1f}%); inside nri-sla's handlers "
        f"{inside:.2f}s ({inside / with_plugin * 100:.3f}% of it); the plugin process "
        f"used {plugin_cpu:.2f}s of CPU ({plugin_cpu / PODS * 1000:.1f}ms per pod)"
    )
    print(
        f"evidence: wall time for {PODS} pods: {enforced.wall_seconds:.1f}s with nri-sla, "
        f"{bare.wall_seconds:.1f}s without a plugin"
    )
    assert "Traceback" not in plugin.output()
