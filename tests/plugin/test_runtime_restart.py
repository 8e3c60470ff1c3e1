"""containerd killed and restarted while 120 pods are being created at once.

The plugin service runs as `nri-sla run` does (run_service, reconnecting with backoff);
the runtime side is the simulator with containerd's rules (nri_plugin/simulated/cri.py)
over a real unix socket, on a fake cgroup v1 tree that a fake runc fills from the spec.
Afterwards: every live container's cgroup files hold its plan or it was refused with a
message; the plugin holds exactly what the live containers' records hold (GPUs,
exclusive CPUs, RT budget: none lost, none doubled); the pods created while no plugin was
registered are reported as created unenforced, once each, also across a later reconnect.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time

import pytest

from nri_plugin.nri.service import run_service
from nri_plugin.ops.metrics import Metrics
from nri_plugin.plugin.service import build_service
from nri_plugin.simulated.cri import Cri
from nri_plugin.simulated.runtime import RuntimeSimulator, SimulatorOptions
from tests.support.fault_helpers import (
    MIX,
    Kubelet,
    asks_sla,
    cgroup_drift,
    held_by_records,
    holdings,
    live_records,
)
from tests.support.plugin_helpers import permissive_node

PODS = 120
KILL_AFTER = 40  # containers created before containerd is killed
RETRY_AFTER = 2.0  # s; the plugin reconnects after 0.5 s


def restarted(old: RuntimeSimulator) -> RuntimeSimulator:
    """A new runtime instance on the same socket with what survived of the old one."""
    return RuntimeSimulator(
        old.socket_path,
        SimulatorOptions(sync_chunk_bytes=64 << 10),
        pods=old.state.pods.values(),
        containers=old.state.containers.values(),
    )


@pytest.mark.slow
def test_containerd_killed_while_120_pods_are_created(tmp_path, v1_tree, caplog):
    caplog.set_level(logging.INFO, logger="nri_sla.plugin")
    metrics = Metrics()
    node = permissive_node(1, v1_tree)
    socket_path = str(tmp_path / "nri.sock")

    async def scenario():
        stop = asyncio.Event()
        plugin, options = build_service(
            node,
            metrics,
            socket=socket_path,
            handle_signals=False,
            stop_event=stop,
            backoff_initial=0.5,
            backoff_max=1.0,
        )
        service = asyncio.create_task(run_service(plugin, options))
        first = await RuntimeSimulator(socket_path).start()
        await first.accept()
        kubelet = Kubelet(Cri(first), v1_tree)
        # Half the pods are retried at once on the new instance (before the plugin is
        # back), half after the kubelet's back-off (after it is).
        pods = [
            asyncio.create_task(
                kubelet.pod(
                    f"p{i}",
                    MIX[i % len(MIX)],
                    churn=i % 7 == 0,
                    retry_after=RETRY_AFTER * (i // len(MIX) % 2),
                )
            )
            for i in range(PODS)
        ]
        while len(first.state.containers) < KILL_AFTER:
            await asyncio.sleep(0.001)
        kubelet.down()
        await first.close()  # containerd SIGKILLed: every connection and request gone
        created_before = len(first.state.containers)
        second = await restarted(first).start()
        kubelet.replace(Cri(second))  # the kubelet retries at once; the plugin backs off
        await second.accept(timeout=20)
        await asyncio.wait_for(asyncio.gather(*pods), 60)
        after = live_records(plugin, second)
        result = {
            "created_before": created_before,
            "kubelet": kubelet,
            "sim": second,
            "records": after,
            "drift": cgroup_drift(plugin, second, after),
            "held": holdings(plugin),
            "want": held_by_records(plugin, after),
            "asked": {
                cid for cid, c in second.state.containers.items() if asks_sla(plugin, second, c)
            },
            "reported": {
                r.fields["container"]
                for r in caplog.records
                if r.getMessage() == "created unenforced"
            },
            "counted": metrics.value("nri_sla_unenforced_containers_total"),
        }
        # containerd restarts once more, nothing happening: nothing changes or is recounted
        await second.close()
        third = await restarted(second).start()
        await third.accept(timeout=20)
        result["held_again"] = holdings(plugin)
        result["counted_again"] = metrics.value("nri_sla_unenforced_containers_total")
        stop.set()
        await asyncio.wait_for(service, 5)
        await third.close()
        return result

    started = time.monotonic()
    r = asyncio.run(asyncio.wait_for(scenario(), 120))
    kubelet, sim, records = r["kubelet"], r["sim"], r["records"]
    unadjusted = kubelet.cri.unadjusted
    print(
        f"{PODS} pods in {time.monotonic() - started:.1f} s: {r['created_before']} "
        f"containers before the kill, {len(unadjusted)} created while the plugin was "
        f"away, {len(records)} enforced and live at the end, {len(kubelet.refused)} "
        f"refused, {len(kubelet.removed)} deleted by the kubelet"
    )
    assert KILL_AFTER <= r["created_before"] < PODS
    assert len(sim.state.containers) > r["created_before"]
    # Some pods were created while no plugin was registered: exactly those that asked an
    # SLA are reported, each once, and counted once even after another reconnect.
    assert unadjusted, "no pod was created while the plugin was away"
    expected = unadjusted & r["asked"]
    assert r["reported"] == expected
    assert r["counted"] == r["counted_again"] == len(expected)
    assert r["asked"] - set(records) == expected  # every other SLA container has a record
    summaries = [m for m in caplog.messages if m.startswith("synchronized:")]
    assert summaries[-1].endswith(f", {len(expected)} created unenforced")
    # Every enforced container's cgroup files hold its plan (adjustment and direct writes,
    # also for those whose StartContainer came while the plugin was away).
    assert r["drift"] == {}
    # Every SLA pod that does not run was not admitted (the kubelet's GPUs ran out), or
    # refused with a message (exclusive CPUs ran out), or deleted.
    live = {sim.state.pods[c.pod_sandbox_id].name for c in sim.state.containers.values()}
    for name, sla in ((f"p{i}", MIX[i % len(MIX)]) for i in range(PODS)):
        if sla and name not in live:
            assert (
                name in kubelet.refused
                or name in kubelet.unadmitted
                or any(cid for cid in kubelet.removed if cid not in sim.state.containers)
            ), name
    assert kubelet.unadmitted
    assert all(
        re.search(r"not that many CPUs can be given", m) for m in kubelet.refused.values()
    ), kubelet.refused
    # The plugin holds exactly what the live records hold: nothing lost, nothing doubled.
    assert r["held"] == r["want"]
    assert all(len(owners) == 1 for owners in r["held"]["gpus"].values())
    assert r["held"]["gpus"] and r["held"]["cpus"] and r["held"]["rt"]
    assert r["held_again"] == r["held"]


def test_which_containers_count_as_created_unenforced(tmp_path, caplog):
    """Only a live container whose pod asks an SLA for it, without a record and without
    the nri-sla OCI hook in its spec (the fallback that enforced it), is reported."""
    from nri_plugin.hookspec import fast_hook_entry, hook_entry
    from nri_plugin.nri.pb import nri_pb2 as pb
    from nri_plugin.simulated.runtime import make_container, make_pod
    from tests.support.plugin_helpers import plugin_session

    caplog.set_level(logging.WARNING, logger="nri_sla.plugin")
    sla = {"sla.nri.io/container.app": "cpu: {limit: 1}"}
    made = {}
    for name, asked in (
        ("bare", sla),
        ("plain", None),
        ("hooked", sla),
        ("fast-hooked", sla),
        ("shell-hooked", sla),
        ("sidecar", sla),
        ("stopped", sla),
        ("forged", sla),
        ("invalid", {"sla.nri.io/pod": "cpu: 7"}),
    ):
        pod = make_pod(name, annotations=asked)
        ctr = make_container(
            pod, "side" if name == "sidecar" else "app", state=pb.CONTAINER_RUNNING
        )
        made[name] = (pod, ctr)
    for name, entry in (
        ("hooked", hook_entry()),
        ("fast-hooked", fast_hook_entry()),
        ("shell-hooked", hook_entry(if_installed=True)),
    ):
        made[name][1].hooks.create_runtime.add(path=entry["path"], args=entry["args"])
    made["stopped"][1].state = pb.CONTAINER_STOPPED
    made["forged"][1].annotations["sla.nri.io/applied"] = '{"v":2}'
    metrics = Metrics()

    async def scenario():
        async with plugin_session(
            permissive_node(2),
            tmp_path,
            metrics=metrics,
            pods=[p for p, _ in made.values()],
            containers=[c for _, c in made.values()],
        ):
            pass

    asyncio.run(asyncio.wait_for(scenario(), 30))
    reported = {
        r.fields["pod"]: r.fields for r in caplog.records if r.getMessage() == "created unenforced"
    }
    assert set(reported) == {"bare", "invalid"}
    bare = reported["bare"]
    assert bare == {
        "container": made["bare"][1].id,
        "namespace": "default",
        "pod": "bare",
        "container_name": "app",
    }
    assert metrics.value("nri_sla_unenforced_containers_total") == 2
    ignored = [r for r in caplog.records if r.getMessage() == "record ignored"]
    assert [r.fields["container"] for r in ignored] == [made["forged"][1].id]
