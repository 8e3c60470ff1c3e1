"""The node config changes and the plugin restarts with pods running.

Running containers keep what they were given (nri-sla cannot take a device or a cgroup
value from a running container, and does not try). At Synchronize their records are
checked again under the new config (core.restore): a record granting what the
namespace may no longer use is still taken ("record outside the node policy",
nri_sla_records_out_of_policy_total), since the container keeps using its GPUs, exclusive
CPUs and RT share until it ends and handing them to a new container would double them;
a record the new config allows is taken back whole, even where it holds CPUs now in
reserved-cpus (they are kept until it ends, never handed to another). New containers get the new
config: its default enforcement, permissions and reserved CPUs.
"""

from __future__ import annotations

import asyncio
import logging

from nri_plugin.config.cap import Cap
from nri_plugin.config.values import Permissions, PodCaps
from nri_plugin.nri.pb import nri_pb2 as pb
from nri_plugin.simulated.runtime import PluginCallError, make_container, make_pod
from nri_plugin.topology.cpulist import parse_cpulist
from tests.support.plugin_helpers import gpu_grant, make_node, make_pod_cgroups, plugin_session

CAPS = PodCaps(exclusive_cpus=Cap(100, percent=True), rt_share=1.0)
BEFORE = dict(
    enforcement="hard",
    pod_caps=CAPS,
    permissions=Permissions(
        realtime=("team-a",), gpus=("*",), exclusive_cpus=("*",), exceed_runtime_limits=("*",)
    ),
)


def after(reserved: tuple[int, ...]) -> dict:
    """The new config: soft by default, realtime and GPUs no longer for team-a, and the
    CPUs a running container holds exclusively now reserved."""
    return dict(
        enforcement="soft",
        pod_caps=CAPS,
        reserved_cpus=reserved,
        permissions=Permissions(
            realtime=(), gpus=("ml-*",), exclusive_cpus=("*",), exceed_runtime_limits=("*",)
        ),
    )


async def run_pod(session, root, name, sla, namespace="default", gpus=()):
    pod = make_pod(name, namespace=namespace, annotations={"sla.nri.io/pod": sla})
    ctr = make_container(pod, "c", cdi_devices=gpu_grant(*gpus))
    make_pod_cgroups(root, ctr.linux.cgroups_path)
    await session.run_pod_sandbox(pod)
    try:
        resp = await session.create_container(pod, ctr)
    except PluginCallError as exc:
        return pod, ctr, exc.message
    await session.start_container(pod, ctr)
    return pod, ctr, resp


def test_restart_with_a_changed_config(tmp_path, v1_tree, caplog):
    caplog.set_level(logging.WARNING, logger="nri_sla.plugin")

    async def scenario():
        async with plugin_session(make_node(1, v1_tree, **BEFORE), tmp_path) as (sim, session, _p):
            old = {
                name: await run_pod(session, v1_tree, name, sla, ns, gpus)
                for name, sla, ns, gpus in (
                    ("rt", "cpu: {rt-runtime: 10ms}", "team-a", ()),
                    ("gpu", "gpu: {count: 2, align: false}", "team-a", (0, 1)),
                    ("excl", "cpu: {exclusive: 4}", "default", ()),
                )
            }
            state = sim.state
        held = frozenset(parse_cpulist(old["excl"][2].adjust.linux.resources.cpu.cpus))
        node = make_node(1, v1_tree, **after(tuple(sorted(held))))
        async with plugin_session(
            node, tmp_path, pods=state.pods.values(), containers=state.containers.values()
        ) as (_s, session, plugin):
            kept = (
                dict(plugin.node.allocator.gpus_in_use()),
                plugin.node.allocator.exclusive_cpus_in_use(),
                plugin.node.rt_budget.owners(),
                sorted(e.id for e in plugin.registry if e.decided_plan),
            )
            new = {
                name: (await run_pod(session, v1_tree, name, sla, ns, gpus))[2]
                for name, sla, ns, gpus in (
                    ("rt2", "cpu: {rt-runtime: 10ms}", "team-a", ()),
                    ("gpu2", "gpu: {count: 1, align: false}", "team-a", (2,)),
                    ("ml", "gpu: {count: 8, align: false}", "ml-train", range(3, 8)),
                    ("excl2", "cpu: {exclusive: 4}", "default", ()),
                    ("hard", "enforcement: hard\ncpu: {rt-runtime: 10ms}", "team-a", ()),
                )
            }
            in_use = plugin.node.allocator.gpus_in_use()  # after "ml"
        return old, state, held, kept, new, in_use

    old, state, held, kept, new, in_use = asyncio.run(asyncio.wait_for(scenario(), 30))
    ids = {name: ctr.id for name, (_pod, ctr, _r) in old.items()}
    # The running containers are untouched by the restart (still running, same spec).
    assert all(state.containers[i].state == pb.CONTAINER_RUNNING for i in ids.values())
    # Records re-checked: rt and gpu grant what team-a may no longer use: still held, and
    # reported.
    gpus, cpus, rt, plans = kept
    assert plans == sorted(ids.values())
    assert set(gpus.values()) == {(ids["gpu"],)} and len(gpus) == 2 and rt == (ids["rt"],)
    assert set(cpus) == held and set(cpus.values()) == {ids["excl"]}
    assert not [r for r in caplog.records if r.getMessage() == "record ignored"]
    breaches = {
        r.fields["container"]: r.fields["error"]
        for r in caplog.records
        if r.getMessage() == "record outside the node policy"
    }
    assert set(breaches) == {ids["rt"], ids["gpu"]}
    assert "may no longer use" in breaches[ids["gpu"]]
    # New containers: the new default (soft) warns and drops what is not allowed ...
    for name in ("rt2", "gpu2"):
        assert "sla.nri.io/warnings" in new[name].adjust.annotations, name
    assert not new["rt2"].adjust.linux.resources.cpu.HasField("realtime_runtime")
    assert "permissions.gpus" in new["gpu2"].adjust.annotations["sla.nri.io/warnings"]
    # ... an explicit hard SLA is still refused ...
    assert isinstance(new["hard"], str) and "realtime" in new["hard"]
    # ... an allowed namespace's SLA asking 8 GPUs of a 5-GPU grant: the soft default
    # warns, and nri-sla adds none (team-a's container still holds its 2, gpu2 its one:
    # every grant is held) ...
    assert len(in_use) == 8 and not new["ml"].adjust.CDI_devices
    assert (
        "asks for 8 whole GPUs; the grant has 5"
        in new["ml"].adjust.annotations["sla.nri.io/warnings"]
    )
    # ... and exclusive CPUs come from outside reserved-cpus and what excl holds.
    got = parse_cpulist(new["excl2"].adjust.linux.resources.cpu.cpus)
    assert len(got) == 4 and not got & held
