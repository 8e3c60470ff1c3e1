"""Hostile pods against `nri-sla run` and a real containerd: records nri-sla did not write
grant nothing and break nothing, and GPUs of containers that die while containerd is down
are no longer counted as held.

GPUs are the fake ones of e2e_gpu.py, granted by the kubelet's books (e2e_service.py) as
the NVIDIA device plugin's CDI devices; `align: false` keeps the snapshot's NUMA CPUs out
of cpusets. nri-sla verifies grants and counts holders (`nri_sla_gpus_in_use`); two
containers able to open one GPU would show in `nri_sla_gpus_shared`.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from tests.e2e.e2e_service import (
    GPU_UUIDS,
    PLUGIN,
    SlaService,
    visible_gpus,
)

pytestmark = pytest.mark.e2e

APPLIED, WARNINGS = "sla.nri.io/applied", "sla.nri.io/warnings"
# What a pod would write to be handed every GPU and CPU after the next plugin restart.
FORGED = json.dumps(
    {
        "v": 2,
        "path": "nri",
        "enforcement": "hard",
        "cgroup_version": 1,
        "placement_record": {"gpus": GPU_UUIDS, "exclusive": "0-63"},
    }
)
HOSTILE = {
    "forged": FORGED,
    "nested": '{"v":2,"x":' + "[" * 8000 + "]" * 8000 + "}",  # RecursionError in json
    "huge": '{"v":2,"placement_record":{"exclusive":"0-' + "9" * (200 << 10) + '"}}',
}


@pytest.fixture
def sla(cluster, plugins, sla_plugin_argv):
    """`nri-sla run` processes with a private state directory (its record key) that a
    restarted plugin finds again, and the kubelet's GPU books."""
    return SlaService(cluster, plugins, sla_plugin_argv)


def test_forged_records_grant_nothing_across_a_plugin_restart(cluster, sla):
    # A handler whose pod_annotations pass every sla.nri.io/* key (what the packaging did
    # before it listed only the keys nri-sla reads): pod-set records reach the specs.
    cluster.add_runtime_handler("leaky", 'pod_annotations = ["sla.nri.io/*"]\n')
    sla.start()
    holder = sla.run_gpu_pod("holder", 2)
    held = visible_gpus(holder)
    assert len(held) == 2

    # The shipped pass-through: the forged record reaches NRI in the pod's annotations
    # only, and nothing of it in the container.
    via_pod = cluster.run_pod("via-pod", {APPLIED: FORGED, WARNINGS: "none"})
    assert APPLIED not in cluster.spec_annotations(via_pod)
    # The leaky handler copies it into the container; the plugin answers CreateContainer
    # for it, so it removes both keys (NRI's "-key").
    stripped = cluster.run_pod("stripped", {APPLIED: FORGED, WARNINGS: "none"}, runtime="leaky")
    assert APPLIED not in cluster.spec_annotations(stripped)
    assert WARNINGS not in cluster.spec_annotations(stripped)

    # With the plugin down (fail-open), records land in specs that no one answered for.
    sla.stop()
    landed = {
        name: cluster.run_pod(f"landed-{name}", {APPLIED: text}, runtime="leaky")
        for name, text in HOSTILE.items()
    }
    for pc in landed.values():
        assert APPLIED in cluster.spec_annotations(pc)

    restarted = sla.start()  # Synchronize: every record above, the holder's included
    print(
        "evidence: plugin log:",
        *restarted.wait_output(
            r"synchronized: \d+ pods, \d+ containers, 1 allocations rebuilt, 3 records ignored"
        ),
    )
    ignored = restarted.wait_output(r"record ignored", count=3)
    print("evidence: plugin log:", *ignored, sep="\n  ")
    for container in (pc.container_id for pc in landed.values()):
        assert any(container in line for line in ignored)
    assert sum("problem=unauthenticated" in line for line in ignored) == 2  # forged, nested
    assert sum("problem=invalid" in line for line in ignored) == 1  # huge: refused by size

    # The kubelet grants the other 6: the forged all-GPU record made nobody their holder.
    six = visible_gpus(sla.run_gpu_pod("six", 6))
    assert len(six) == 6 and not set(six) & set(held)
    sla.assert_gpus_counted(8)
    assert "Traceback" not in restarted.output()


def _wait_gone(pid: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while Path(f"/proc/{pid}").exists():
        if time.monotonic() > deadline:
            raise AssertionError(f"pid {pid} still alive after SIGKILL")
        time.sleep(0.05)


def test_gpus_of_containers_that_died_while_containerd_was_down_are_freed(cluster, sla):
    plugin = sla.start()
    big = sla.run_gpu_pod("big", 8)
    assert len(visible_gpus(big)) == 8
    sla.assert_gpus_counted(8)

    cluster.kill()  # containerd down (SIGKILL); the plugin keeps running, reconnecting
    pid = cluster.pid(big)
    os.kill(pid, signal.SIGKILL)  # the GPU container dies while nobody watches
    _wait_gone(pid)
    cluster.start()
    cluster.wait_plugin_synchronized(PLUGIN, count=2, timeout=60)
    print(
        "evidence: plugin log:",
        *plugin.wait_output(
            r"synchronized: .* 0 allocations rebuilt, 0 records ignored, 1 owners released"
        ),
    )

    sla.books.release("big")  # the kubelet gives the dead pod's GPUs to the next one
    after = visible_gpus(sla.run_gpu_pod("after", 8))
    assert sorted(after) == sorted(GPU_UUIDS)
    sla.assert_gpus_counted(8)  # the dead container holds none of them any more
