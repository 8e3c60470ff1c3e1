"""The SLA plugin end to end over a real unix socket, driven by the runtime simulator."""

from __future__ import annotations

import asyncio
import json

import pytest

from nri_plugin.nri.pb import nri_pb2 as pb
from nri_plugin.simulated.runtime import PluginCallError, make_container, make_pod
from nri_plugin.topology.cpulist import parse_cpulist
from tests.support.plugin_helpers import (
    FULL_SLA,
    gpu_grant,
    guaranteed,
    make_node,
    make_pod_cgroups,
    plugin_session,
)

GiB = 1024**3
MiB = 1024**2


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


def applied(adj) -> dict:
    return json.loads(adj.annotations["sla.nri.io/applied"])


def test_full_sla_on_v2_node(tmp_path):
    async def scenario():
        node = make_node(2)
        async with plugin_session(node, tmp_path) as (_, session, _plugin):
            pod = make_pod(
                "trainer",
                namespace="ml",
                annotations={
                    "sla.nri.io/container.work": FULL_SLA.replace(
                        "  rt-runtime: 5ms\n", ""
                    ).replace("  rt-period: 1s\n", "")
                },
            )
            # The kubelet granted 4 CPUs, 16Gi and two GPUs: 0 and 7 (not NVLinked) are
            # refused for gpu.topology nvlink, 4 and 5 (NVLinked, NUMA 1) meet it.
            ctr = make_container(pod, "work", resources=guaranteed(4), cdi_devices=gpu_grant(0, 7))
            with pytest.raises(PluginCallError) as refused:
                await session.create_container(pod, ctr)
            ctr = make_container(pod, "work", resources=guaranteed(4), cdi_devices=gpu_grant(4, 5))
            return (await session.create_container(pod, ctr)).adjust, node, refused.value

    adj, node, refused = run(scenario())
    assert (
        "gpu.topology: nvlink: the granted GPUs are not connected to each other over NVLink "
        "(granted: GPU 0 (GPU-d0000000-0000-0000-0000-000000000000, NUMA 0), GPU 7 "
        "(GPU-d0000000-0000-0000-0000-000000000007, NUMA 1))"
    ) in refused.message
    res = adj.linux.resources
    assert res.cpu.quota.value == 250_000 and res.cpu.period.value == 100_000
    assert res.memory.limit.value == 10 * GiB
    assert res.unified["memory.high"] == str(8 * GiB)
    assert res.unified["io.weight"] == "default 500"
    assert res.unified["io.max"] == (
        f"259:0 rbps={500 * MiB} wbps={200 * MiB} riops=20000 wiops=10000"
    )
    assert not res.cpu.HasField("realtime_runtime")
    # the two granted GPUs, CPUs and memory of their NUMA node, four of them exclusive;
    # nothing added to what the device plugin granted
    assert not adj.CDI_devices and not adj.env and not adj.linux.devices
    record = applied(adj)
    assert [g[-1] for g in record["placement_record"]["gpus"]] == ["4", "5"]
    assert res.cpu.mems == "1"
    exclusive = record["placement_record"]["exclusive"]
    assert res.cpu.mems == record["placement_record"]["mems"]
    assert res.cpu.cpus and exclusive
    assert adj.linux.memory_policy.nodes == res.cpu.mems
    assert record["path"] == "nri" and record["enforcement"] == "hard"
    gpus, cpus = node.usage()
    assert (gpus, cpus) == (2, 4)


def test_full_sla_on_v1_node_adds_direct_writes(tmp_path, v1_tree):
    async def scenario():
        node = make_node(1, v1_tree)
        async with plugin_session(node, tmp_path) as (_, session, _plugin):
            sla = FULL_SLA.replace("  high: 8Gi\n", "")  # v1 has no memory.high: hard refuses
            pod = make_pod(
                "trainer", namespace="ml", annotations={"sla.nri.io/container.work": sla}
            )
            ctr = make_container(pod, "work", resources=guaranteed(4), cdi_devices=gpu_grant(0, 1))
            make_pod_cgroups(v1_tree, ctr.linux.cgroups_path)
            adj = (await session.create_container(pod, ctr)).adjust
            dirs = v1_tree.add_cgroup(ctr.linux.cgroups_path)
            await session.event(6, pod, ctr)  # StartContainer: the direct writes
            return adj, dirs

    adj, dirs = run(scenario())
    # every ancestor got enough RT budget before runc writes the container's 5ms/1s
    pod_dir = dirs["cpu"].parent
    for ancestor in (pod_dir, pod_dir.parent, pod_dir.parent.parent):
        assert int((ancestor / "cpu.rt_runtime_us").read_text()) >= 5000
    res = adj.linux.resources
    assert not res.unified, "a unified key on cgroup v1 makes runc refuse the container"
    assert res.cpu.realtime_runtime.value == 5000
    assert res.cpu.realtime_period.value == 1_000_000
    assert res.cpu.quota.value == 250_000
    assert (dirs["blkio"] / "blkio.throttle.read_bps_device").read_text() == f"259:0 {500 * MiB}"
    assert (dirs["blkio"] / "blkio.throttle.write_iops_device").read_text() == "259:0 10000"
    assert (dirs["blkio"] / "blkio.bfq.weight").read_text().isdigit()


def test_hard_memory_high_on_v1_is_refused_with_message(tmp_path, v1_tree):
    async def scenario():
        async with plugin_session(make_node(1, v1_tree), tmp_path) as (_, session, _p):
            pod = make_pod("web", annotations={"sla.nri.io/pod": "memory: {high: 1Gi, max: 2Gi}"})
            with pytest.raises(PluginCallError) as caught:
                await session.create_container(pod, make_container(pod, "web"))
            return caught.value

    err = run(scenario())
    assert "sla.nri.io/pod: memory.high" in err.message
    assert "not available on cgroup v1" in err.message


def test_soft_memory_high_on_v1_starts_with_warning(tmp_path, v1_tree):
    async def scenario():
        async with plugin_session(make_node(1, v1_tree), tmp_path) as (_, session, _p):
            pod = make_pod(
                "web",
                annotations={
                    "sla.nri.io/pod": "memory: {high: 1Gi, max: 2Gi}",
                    "sla.nri.io/enforcement": "soft",
                },
            )
            ctr = make_container(pod, "web")
            adj = (await session.create_container(pod, ctr)).adjust
            dirs = v1_tree.add_cgroup(ctr.linux.cgroups_path)
            await session.event(6, pod, ctr)
            return adj, dirs

    adj, dirs = run(scenario())
    assert "memory.high" in adj.annotations["sla.nri.io/warnings"]
    assert adj.linux.resources.memory.limit.value == 2 * GiB
    assert (dirs["memory"] / "memory.soft_limit_in_bytes").read_text() == str(GiB)


def test_containerd_17_mode_and_no_sla_pods(tmp_path):
    async def scenario():
        async with plugin_session(make_node(2), tmp_path, mode="v0.8") as (_, session, _p):
            plain = make_pod("plain")
            none = await session.create_container(plain, make_container(plain, "c"))
            pod = make_pod("p", annotations={"sla.nri.io/pod": "cpu: {limit: 1}"})
            resp = await session.container_life_cycle(pod, make_container(pod, "c"))
            return none, resp

    none, resp = run(scenario())
    assert not none.HasField("adjust") or not none.adjust.ListFields()
    assert resp.adjust.linux.resources.cpu.quota.value == 100_000


def test_allocations_released_and_rebuilt_from_synchronize(tmp_path):
    """Every granted container holds its GPUs, with or without an SLA; a restarted plugin
    learns them from the running containers (record or not) and lets go at Stop."""
    one_gpu = {"sla.nri.io/pod": "gpu: {count: 1}"}

    async def scenario():
        async with plugin_session(make_node(2), tmp_path) as (_, session, plugin):
            pod = make_pod("big", annotations={"sla.nri.io/pod": "gpu: {count: 6}"})
            ctr = make_container(pod, "c", cdi_devices=gpu_grant(*range(6)))
            adj = (await session.create_container(pod, ctr)).adjust
            plain = make_pod("plain")  # no SLA: its grant counts all the same
            plain_ctr = make_container(plain, "c", cdi_devices=gpu_grant(6, 7))
            await session.create_container(plain, plain_ctr)
            before = plugin.node.allocator.gpus_in_use()
        # A restarted plugin learns the holders from the running containers.
        running = [
            make_container(
                pod,
                "c",
                state=pb.CONTAINER_RUNNING,
                annotations=dict(adj.annotations),
                cdi_devices=gpu_grant(*range(6)),
            ),
            make_container(plain, "c", state=pb.CONTAINER_RUNNING, cdi_devices=gpu_grant(6, 7)),
        ]
        async with plugin_session(
            make_node(2), tmp_path, pods=[pod, plain], containers=running
        ) as (_, session, plugin):
            after_restart = plugin.node.allocator.gpus_in_use()
            await session.stop_container(pod, running[0])
            third = make_pod("third", annotations=one_gpu)
            freed = await session.create_container(
                third, make_container(third, "c", cdi_devices=gpu_grant(0))
            )
            end = plugin.node.allocator.gpus_in_use()
        return ctr.id, plain_ctr.id, before, after_restart, freed, end

    big, plain, before, after_restart, freed, end = run(scenario())
    assert before == after_restart == {**dict.fromkeys(range(6), (big,)), 6: (plain,), 7: (plain,)}
    assert applied(freed.adjust)["placement_record"]["gpus"][0].endswith("0")
    assert set(end) == {0, 6, 7} and end[6] == (plain,)


def test_exclusive_cpus_leave_aligned_neighbours_cpusets(tmp_path):
    async def scenario():
        async with plugin_session(make_node(2), tmp_path) as (_, session, _p):
            shared = make_pod("shared", annotations={"sla.nri.io/pod": "numa: {nodes: '1'}"})
            first = (await session.create_container(shared, make_container(shared, "c"))).adjust
            excl = make_pod(
                "excl", annotations={"sla.nri.io/pod": "numa: {nodes: '1'}\ncpu: {exclusive: 4}"}
            )
            ctr = make_container(excl, "c", resources=guaranteed(4))
            taken = await session.create_container(excl, ctr)
            given_back = await session.stop_container(excl, ctr)
            return first, taken, given_back, _p.drift_pass()

    first, taken, given_back, widened = run(scenario())
    exclusive = set(parse_cpulist(taken.adjust.linux.resources.cpu.cpus))
    (update,) = taken.update
    narrowed = set(parse_cpulist(update.linux.resources.cpu.cpus))
    assert narrowed == set(parse_cpulist(first.linux.resources.cpu.cpus)) - exclusive
    assert update.ignore_failure
    assert list(given_back.update) == []  # the stop moves nobody: the drift pass widens
    (restored,) = widened
    assert restored.linux.resources.cpu.cpus == first.linux.resources.cpu.cpus


def test_hook_injected_for_verification_when_configured(tmp_path):
    from nri_plugin.config.values import HookConfig

    async def scenario():
        node = make_node(2, hook=HookConfig(inject=True))
        async with plugin_session(node, tmp_path) as (_, session, _p):
            pod = make_pod("p", annotations={"sla.nri.io/pod": "cpu: {limit: 1}"})
            return (await session.create_container(pod, make_container(pod, "c"))).adjust

    adj = run(scenario())
    (hook,) = adj.hooks.create_runtime
    assert hook.path == "/usr/bin/nri-sla"
    assert list(hook.args[:4]) == ["nri-sla", "hook", "--stage", "createRuntime"]
    assert hook.timeout.value > 0


def test_hard_direct_write_failure_fails_the_start(tmp_path, v1_tree):
    async def scenario():
        async with plugin_session(make_node(1, v1_tree), tmp_path) as (_, session, _p):
            pod = make_pod(
                "io",
                annotations={
                    "sla.nri.io/pod": "io:\n  max:\n  - {device: /dev/sda, read-iops: 100}"
                },
            )
            ctr = make_container(pod, "c")
            await session.create_container(pod, ctr)
            # the cgroup exists but this kernel has no blkio throttle files
            (v1_tree.root / "blkio" / ctr.linux.cgroups_path.lstrip("/")).mkdir(parents=True)
            with pytest.raises(PluginCallError) as caught:
                await session.event(6, pod, ctr)
            return caught.value

    err = run(scenario())
    assert err.method == "StartContainer"
    assert "blkio.throttle.read_iops_device" in err.message


def test_update_container_keeps_the_sla_also_after_a_restart(tmp_path):
    from nri_plugin.simulated.runtime import make_resources

    async def scenario():
        pod = make_pod(
            "p", annotations={"sla.nri.io/pod": "cpu: {limit: 0.5}\nmemory: {high: 1Gi, max: 2Gi}"}
        )
        ctr = make_container(pod, "c")
        kubelet = make_resources(cpu_quota=400_000, cpu_period=100_000, memory_limit=8 << 30)
        async with plugin_session(make_node(2), tmp_path) as (_, session, _p):
            adj = (await session.create_container(pod, ctr)).adjust
            first = await session.update_container(pod, ctr, kubelet)
        running = make_container(
            pod, "c", state=pb.CONTAINER_RUNNING, annotations=dict(adj.annotations)
        )
        async with plugin_session(make_node(2), tmp_path, pods=[pod], containers=[running]) as (
            _,
            session,
            _p,
        ):
            again = await session.update_container(pod, running, kubelet)
            plain = make_pod("plain")
            untouched = await session.update_container(plain, make_container(plain, "c"), kubelet)
        return first, again, untouched

    first, again, untouched = run(scenario())
    for response in (first, again):
        (update,) = response.update
        res = update.linux.resources
        assert res.cpu.quota.value == 50_000 and res.cpu.period.value == 100_000
        assert res.memory.limit.value == 2 << 30
        assert res.unified["memory.high"] == str(1 << 30)
    assert not untouched.update


def test_crio_136_is_told_by_its_release(tmp_path):
    """CRI-O 1.36 (NRI v0.11) sends no NRI version: the plugin knows it from the release
    (not "older than v0.10"), and the memory-policy message names that version."""
    sla = "numa: {nodes: '0', memory-policy: interleave}\nenforcement: soft"

    async def scenario():
        async with plugin_session(make_node(2), tmp_path, mode="v0.11") as (_, session, plugin):
            pod = make_pod("p", annotations={"sla.nri.io/pod": sla})
            adj = (await session.create_container(pod, make_container(pod, "c"))).adjust
            return plugin.nri_version, plugin.runtime, adj

    version, runtime, adj = run(scenario())
    assert (version, runtime) == ("v0.11.0", "cri-o 1.36.3")
    warnings = adj.annotations["sla.nri.io/warnings"]
    assert "interleave needs NRI v0.12" in warnings
    assert "NRI v0.11.0 cannot set it (cpuset.mems=0 applies)" in warnings
    assert not adj.linux.HasField("memory_policy")
