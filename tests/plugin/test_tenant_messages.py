"""What a tenant learns: every refusal and warning a pod author can see (the CRI error the
runtime shows in the pod's events, the `sla.nri.io/warnings` annotation) names only that
pod's request, its grant and the node policy, while another tenant holds exclusive CPUs, a
GPU and real-time budget on the node. The full picture goes to the operator's log."""

from __future__ import annotations

import asyncio
import logging
import re

from nri_plugin.simulated.runtime import PluginCallError, make_container, make_pod
from tests.support.plugin_helpers import (
    gpu_grant,
    guaranteed,
    make_pod_cgroups,
    permissive_node,
    plugin_session,
    runc_create,
)

WARNINGS = "sla.nri.io/warnings"
# Words that describe the node's occupancy or someone else's holdings.
OCCUPANCY = re.compile(
    r"\b(free|held|holds?|in use|occupied|other containers?|others?)\b", re.IGNORECASE
)

# The second tenant's requests, each one a refusal (hard) and a warning (soft).
REQUESTS = {
    "exclusive-on-full-node": ("numa: {nodes: 0}\ncpu: {exclusive: 8}", ()),
    "aligned-on-full-node": ("numa: {nodes: 0}", ()),
    "gpu-held-by-other": ("gpu: {ids: [0]}", (1,)),
    "gpu-count-over-grant": ("gpu: {count: 2}", (1,)),
    "rt-over-node-books": ("cpu: {rt-runtime: 600ms, rt-period: 1s}", ()),
    "rt-over-kernel-budget": ("cpu: {rt-runtime: 100ms, rt-period: 1s}", ()),
}


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


def test_refusals_and_warnings_name_no_other_tenant(tmp_path, v1_tree, caplog):
    caplog.set_level(logging.INFO)
    # Someone outside Kubernetes holds half the kernel's RT time (a system service).
    (v1_tree.root / "cpu" / "system.slice").mkdir()
    (v1_tree.root / "cpu" / "system.slice" / "cpu.rt_period_us").write_text("1000000")
    (v1_tree.root / "cpu" / "system.slice" / "cpu.rt_runtime_us").write_text("500000")

    async def scenario():
        node = permissive_node(1, v1_tree, rt_budget=1.0)
        seen: dict[str, str] = {}
        async with plugin_session(node, tmp_path) as (sim, session, _p):
            alpha = make_pod(
                "alpha",
                namespace="prod",
                qos="guaranteed",
                annotations={
                    "sla.nri.io/pod": "numa: {nodes: 0}\ncpu: {exclusive: 32, rt-runtime: 400ms,"
                    " rt-period: 1s}"
                },
            )
            held = make_container(
                alpha, "holder", resources=guaranteed(32), cdi_devices=gpu_grant(0)
            )
            await session.run_pod_sandbox(alpha)
            make_pod_cgroups(v1_tree, held.linux.cgroups_path)
            await session.create_container(alpha, held)
            runc_create(v1_tree, sim.state.containers[held.id])
            await session.start_container(alpha, held)
            for mode in ("hard", "soft"):
                for name, (sla, gpus) in REQUESTS.items():
                    pod = make_pod(
                        f"beta-{name}-{mode}",
                        namespace="batch",
                        annotations={"sla.nri.io/pod": sla, "sla.nri.io/enforcement": mode},
                    )
                    ctr = make_container(
                        pod, "c", resources=guaranteed(8), cdi_devices=gpu_grant(*gpus)
                    )
                    await session.run_pod_sandbox(pod)
                    make_pod_cgroups(v1_tree, ctr.linux.cgroups_path)
                    try:
                        resp = await session.create_container(pod, ctr)
                    except PluginCallError as exc:
                        seen[f"{name}/{mode}"] = exc.message
                        continue
                    seen[f"{name}/{mode}"] = resp.adjust.annotations.get(WARNINGS, "")
                    await session.remove_container(pod, ctr)
        return alpha, held, seen

    alpha, held, seen = run(scenario())
    # Every request was refused (hard) or warned about (soft): each path was walked.
    assert all(seen.values()), {k: v for k, v in seen.items() if not v}
    hard = {k: v for k, v in seen.items() if k.endswith("/hard")}
    assert "not that many CPUs" in hard["exclusive-on-full-node/hard"]
    assert "no CPU this container can be given" in hard["aligned-on-full-node/hard"]
    assert (
        "GPU 0 is not granted to this container (granted: GPU 1" in hard["gpu-held-by-other/hard"]
    )
    assert "RT budget for SLA containers" in hard["rt-over-node-books/hard"]
    assert "real-time budget exhausted" in hard["rt-over-kernel-budget/hard"]
    secrets = {
        held.id,
        alpha.id,
        alpha.uid,
        alpha.name,
        alpha.namespace,
        alpha.linux.cgroup_parent,
        "0-15,32-47",
        "90.00%",
        "100.00%",
        "40.0%",
    }
    for key, message in seen.items():
        leaked = [s for s in secrets if s in message]
        assert not leaked, f"{key}: {message!r} names {leaked}"
        assert not OCCUPANCY.search(message), f"{key}: {message!r}"
    # The operator sees the full picture.
    log = caplog.text
    assert "free CPUs there: 0 CPUs (none)" in log
    assert "brings the groups under" in log and "RT budget short" in log
