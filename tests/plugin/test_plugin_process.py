"""`nri-sla run` as its own process against the runtime simulator's socket.

Started before the runtime (the NRI socket missing), it retries with capped back-off and
says so (log, /metrics, /readyz); once the socket appears it registers. Then, with 100
pods being created at once, it is SIGKILLed and started again, and 20 more pods come:
the containers created meanwhile are reported as created unenforced, the records it wrote
before the kill are taken back, and no GPU or exclusive CPU is given twice.
"""

from __future__ import annotations

import asyncio
import os

import pytest

from nri_plugin.core.recordkey import load_key
from nri_plugin.nri.pb import nri_pb2 as pb
from nri_plugin.plan.record import decode_record
from nri_plugin.plugin.unenforced import NAMED
from nri_plugin.simulated.cri import Cri
from nri_plugin.simulated.runtime import RuntimeSimulator
from nri_plugin.topology.cpulist import parse_cpulist
from tests.support.cgroups import make_v1_tree
from tests.support.fault_helpers import Kubelet
from tests.support.plugin_process import PluginProcess, free_port, log_lines, until

PODS = 100
KILL_AFTER = 30
AFTER = 20  # pods created once the restarted plugin registered
# cgroup v2 planning: everything travels in the adjustment, nothing is written on this host.
MIX = (
    "gpu: {count: 2, align: false}",
    "cpu: {exclusive: 2}",
    "cpu: {limit: 1}\nmemory: {max: 1Gi}",
    None,
)
CONFIG = """\
state-dir: {state}
permissions:
  exclusive-cpus: ["*"]
  gpus: ["*"]
  exceed-runtime-limits: ["*"]
pod-caps: {{exclusive-cpus: "100%"}}
nri: {{socket: {socket}, reconnect-max-seconds: 0.5}}
metrics: {{address: "127.0.0.1:{port}"}}
log: {{format: json}}
"""


@pytest.mark.slow
def test_plugin_process_before_runtime_then_sigkilled_under_load(tmp_path):
    socket_path = tmp_path / "nri.sock"
    state = tmp_path / "state"
    port = free_port()
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG.format(state=state, socket=socket_path, port=port))
    log = tmp_path / "plugin.log"
    # the kubelet's fake runc tree (nothing reads it here)
    cgroups = make_v1_tree(tmp_path / "cgroup")

    async def scenario():
        plugin = PluginProcess(config, log, port)
        procs = [plugin]
        try:
            # No runtime yet: retries, not ready, and says why.
            await until(
                lambda: plugin.metric("nri_sla_connect_attempts_total") >= 3,
                what="connect attempts",
            )
            waiting = (
                plugin.get("/readyz"),
                plugin.metric("nri_sla_registered"),
                [r for r in plugin.lines() if "not reachable" in r["msg"]],
            )
            sim = await RuntimeSimulator(str(socket_path)).start()
            await sim.accept(timeout=20)
            ready = plugin.get("/readyz")
            cri = Cri(sim)
            kubelet = Kubelet(cri, cgroups)
            pods = [
                asyncio.create_task(kubelet.pod(f"p{i}", MIX[i % len(MIX)])) for i in range(PODS)
            ]
            await until(lambda: len(sim.state.containers) >= KILL_AFTER, what="creates")
            plugin.kill()  # SIGKILL: no goodbye, in the middle of the load
            killed_at = len(sim.state.containers)
            # Pods that surely come while it is down (the load's own may all be done).
            await asyncio.gather(
                *(kubelet.pod(f"down{i}", MIX[i % len(MIX)]) for i in range(len(MIX)))
            )
            plugin = PluginProcess(config, log, port)
            procs.append(plugin)
            await sim.accept(timeout=20)
            # More pods once it is back: what it gives them must not collide with what
            # the records of the killed process hold.
            pods += [
                asyncio.create_task(kubelet.pod(f"after{i}", MIX[i % len(MIX)]))
                for i in range(AFTER)
            ]
            await asyncio.wait_for(asyncio.gather(*pods), 60)
            metrics = {
                name: plugin.metric(f"nri_sla_{name}")
                for name in ("unenforced_containers_total", "gpus_in_use", "exclusive_cpus_in_use")
            }
            await sim.close()
            return waiting, ready, killed_at, kubelet, sim, metrics
        finally:
            for p in procs:
                p.stop()

    waiting, ready, killed_at, kubelet, sim, metrics = asyncio.run(
        asyncio.wait_for(scenario(), 120)
    )
    (status, body), registered, unreachable = waiting
    assert (status, registered) == (503, 0.0) and "not registered" in body
    assert unreachable and "No such file or directory" in unreachable[0]["msg"]
    assert len(unreachable) == 1  # one warning per streak (then one a minute)
    assert ready[0] == 200
    assert killed_at >= KILL_AFTER
    # Containers created while no plugin was registered: reported, each once.
    lines = log_lines(log)
    # (named one line each up to unenforced.NAMED per Synchronize, the rest counted in one
    # "created unenforced, more" line: a loaded run can create more than that meanwhile)
    reported = {r["container"] for r in lines if r["msg"] == "created unenforced"}
    more = sum(int(r["containers"]) for r in lines if r["msg"] == "created unenforced, more")
    asked = {
        cid
        for cid, c in sim.state.containers.items()
        if "sla.nri.io/pod" in sim.state.pods[c.pod_sandbox_id].annotations
    }
    unenforced = kubelet.cri.unadjusted & asked
    assert unenforced, "nothing was created while the plugin was down"
    assert reported <= unenforced and len(reported) + more == len(unenforced)
    assert more == 0 or len(reported) >= NAMED
    assert metrics["unenforced_containers_total"] == len(unenforced)
    # The records of both processes together: no GPU or CPU twice, and exactly what the
    # restarted plugin counts as in use.
    key = load_key(str(tmp_path / "state"))
    gpus: list[str] = []
    cpus: list[int] = []
    for cid, c in sim.state.containers.items():
        if (
            c.state in (pb.CONTAINER_CREATED, pb.CONTAINER_RUNNING)
            and "sla.nri.io/applied" in c.annotations
        ):
            placement = (
                decode_record(c.annotations["sla.nri.io/applied"], cid, key)[1].placement_record
                or {}
            )
            gpus += placement.get("gpus", [])
            cpus += parse_cpulist(placement.get("exclusive", ""))
    assert len(set(gpus)) == len(gpus) and len(set(cpus)) == len(cpus)
    # Every GPU the kubelet granted a live container is held, with or without a record
    # (created while the plugin was down); later GPU pods were not admitted.
    assert any(name.startswith("after") for name in kubelet.unadmitted)
    assert metrics["gpus_in_use"] == 8 - len(kubelet.free_gpus) >= len(gpus)
    assert metrics["exclusive_cpus_in_use"] == len(cpus)
    assert not os.path.exists(sim.socket_path)
