"""A rollout's worst moments against `nri-sla run` and a real containerd (issue #12):
containerd, then the plugin, SIGKILLed while 104 pods are being created 12 at a time.

Each pod asks its own CPU limit and memory.max, every 8th also one GPU, granted by the
kubelet's books (13 ask 1 of the 8 fake GPUs, so the kubelet admits 8 and keeps the rest
pending). Afterwards every running container holds its SLA in its real cgroup files (or
holds none of it and nri-sla reported it as created unenforced) and opens exactly its
grant, no GPU is open to two containers, nri-sla's GPU gauges count what the containers
hold, and a pod granted every free GPU opens exactly the ones no container holds.

Depends on the plugin reporting containers created while it was away ("created
unenforced", nri_sla_unenforced_containers_total; issue #12's plugin side).
"""

from __future__ import annotations

import time

import pytest

from tests.e2e.e2e_checks import (
    check_node,
    only_free_gpus_left,
    reported_unenforced,
    start_created,
    syncs,
)
from tests.e2e.e2e_rollout import Rollout, sla_pods
from tests.e2e.e2e_service import SlaService

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]  # ~2 min each on 2 CPUs

PODS = 104
WORKERS = 12
FAULT_AFTER = 40  # pods finished when the fault strikes; WORKERS more are in flight
PLUGIN_AWAY = 2.0  # seconds between the plugin's SIGKILL and its restart
AWAY_PODS = 4


@pytest.fixture
def sla(cluster, plugins, sla_plugin_argv) -> SlaService:
    return SlaService(cluster, plugins, sla_plugin_argv)


def gpu_grants(sla, expected):
    """The kubelet's admission of each rollout pod: its GPU grant when its SLA asks one."""
    return lambda name: sla.books.allocate(name, 1) if expected[name].gpus else None


def failures(runs) -> dict[str, int]:
    """Failed pods by stage and cause; each must carry the runtime's message."""
    kinds: dict[str, list[str]] = {}
    for r in runs:
        if r.failed_at:
            assert r.error.strip(), f"{r.name} failed at {r.failed_at} without a message"
            why = "no GPU left" if r.failed_at == "admit" else "cut off by the fault"
            kinds.setdefault(f"{r.failed_at}: {why}", []).append(r.error)
    for kind, errors in kinds.items():
        desc = errors[0].find("desc = ")  # the runtime's own words, or the kubelet's
        why = errors[0][max(desc, 0) :][:200]
        print(f"evidence: {len(errors)} failed at {kind}, e.g. {why}")
    return {kind: len(errors) for kind, errors in kinds.items()}


def test_containerd_killed_in_the_middle_of_a_rollout(cluster, sla):
    sla.start()
    pods, expected = sla_pods(PODS, "r", gpu_every=8)
    rollout = Rollout(cluster, pods, WORKERS, gpu_grants(sla, expected)).start()
    rollout.wait_finished(FAULT_AFTER)
    t0 = time.monotonic()
    cluster.kill()  # SIGKILL: CRI calls in flight fail, shims and containers live on
    cluster.start()
    up = time.monotonic() - t0
    sla.wait_registered()
    print(
        f"evidence: containerd back {up:.1f}s after the SIGKILL, nri-sla registered "
        f"again {time.monotonic() - t0:.1f}s after it"
    )
    runs = rollout.wait()
    print("evidence: rollout:", rollout.summary())
    first = sla.current
    print("evidence: plugin log:", first.wait_output(r"NRI connection lost")[0])
    syncs(first, count=2)
    failures(runs)
    assert sum(r.started for r in runs) >= FAULT_AFTER
    print("evidence: start failed after the restart:", start_created(cluster) or "none")

    # Pods made while nri-sla is away (stopped on purpose): containerd creates them
    # without it (no required-plugin validator), and the next nri-sla reports them.
    sla.stop()
    away, away_expected = sla_pods(AWAY_PODS, "away")
    away_runs = Rollout(cluster, away, 1).start().wait()
    assert all(r.started for r in away_runs), [r.error for r in away_runs]
    away_ids = {r.container_id for r in away_runs}
    sla.start()
    summary = syncs(sla.current)[0]
    reported = reported_unenforced(sla.current)
    result = check_node(cluster, sla, expected | away_expected, reported)
    assert away_ids <= reported
    assert summary.unenforced == len(reported) == len(result.unenforced)
    # Every record taken again, none refused: no container claims what another holds.
    assert summary.rebuilt == len(result.enforced)
    assert summary.ignored == 0
    assert sla.scrape().get("nri_sla_unenforced_containers_total") == len(reported)
    only_free_gpus_left(sla, set(result.gpu_owners))
    assert "Traceback" not in first.output() + sla.current.output()


def test_plugin_killed_in_the_middle_of_a_rollout(cluster, sla):
    killed = sla.start()
    pods, expected = sla_pods(PODS, "r", gpu_every=8)
    rollout = Rollout(cluster, pods, WORKERS, gpu_grants(sla, expected)).start()
    rollout.wait_finished(FAULT_AFTER)
    t0 = time.monotonic()
    sla.kill()  # as the OOM killer would: containerd drops it, pods keep coming
    time.sleep(PLUGIN_AWAY)
    restarted = sla.start()
    print(f"evidence: nri-sla registered again {time.monotonic() - t0:.1f}s after the SIGKILL")
    runs = rollout.wait()
    print("evidence: rollout:", rollout.summary())
    failures(runs)
    assert sum(r.started for r in runs) >= FAULT_AFTER
    print("evidence: start failed:", start_created(cluster) or "none")

    summary = syncs(restarted)[0]
    reported = reported_unenforced(restarted)
    result = check_node(cluster, sla, expected, reported)
    # Containers created in the gap ran without their SLA, and every one was reported.
    assert reported, "no pod was created while the plugin was down"
    assert summary.unenforced == len(reported)
    assert summary.ignored == 0
    assert sla.scrape().get("nri_sla_unenforced_containers_total") == len(reported)
    only_free_gpus_left(sla, set(result.gpu_owners))
    assert "Traceback" not in killed.output() + restarted.output()
