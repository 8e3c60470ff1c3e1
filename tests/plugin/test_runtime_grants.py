"""Over the runtime simulator: a pod cannot take more than the kubelet granted it, neither
at CreateContainer nor through UpdateContainer (a resize), unless the node policy says so."""

from __future__ import annotations

import asyncio
import json

import pytest

from nri_plugin.config.values import Permissions
from nri_plugin.simulated.runtime import PluginCallError, make_container, make_pod, make_resources
from nri_plugin.topology.cpulist import parse_cpulist
from tests.support.plugin_helpers import gpu_grant, guaranteed, make_node, plugin_session

MiB, GiB = 1 << 20, 1 << 30
HOSTILE = "cpu: {limit: 64}\nmemory: {max: 512Gi}"
# What the kubelet sets for limits {cpu: 500m, memory: 256Mi}.
KUBELET = make_resources(
    cpu_shares=512, cpu_quota=50_000, cpu_period=100_000, memory_limit=256 * MiB
)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


def test_pod_raising_its_limits_is_refused_in_hard_mode(tmp_path):
    async def scenario():
        async with plugin_session(make_node(2), tmp_path) as (_, session, plugin):
            pod = make_pod("greedy", namespace="shop", annotations={"sla.nri.io/pod": HOSTILE})
            with pytest.raises(PluginCallError) as caught:
                await session.create_container(pod, make_container(pod, "c", resources=KUBELET))
            return caught.value, plugin

    err, plugin = run(scenario())
    assert err.message == (
        "sla.nri.io/pod: cpu.limit: 64 exceeds the 0.5 CPUs the runtime granted (the pod's "
        "limit, quota 50000us per 100000us); allowed: at most 0.5 (also: sla.nri.io/pod: "
        "memory.max: 512Gi exceeds the 256Mi the runtime granted (the pod's limit); "
        "allowed: at most 256Mi)"
    )
    assert len(plugin.registry) == 0  # nothing recorded for a refused container


def test_pod_raising_its_limits_is_clamped_in_soft_mode(tmp_path):
    async def scenario():
        async with plugin_session(make_node(2), tmp_path) as (_, session, _p):
            pod = make_pod(
                "greedy",
                namespace="shop",
                annotations={"sla.nri.io/pod": HOSTILE, "sla.nri.io/enforcement": "soft"},
            )
            return (
                await session.create_container(pod, make_container(pod, "c", resources=KUBELET))
            ).adjust

    adj = run(scenario())
    res = adj.linux.resources
    assert (res.cpu.quota.value, res.cpu.period.value) == (50_000, 100_000)
    assert res.memory.limit.value == 256 * MiB
    warnings = adj.annotations["sla.nri.io/warnings"]
    assert "cpu.limit: 64 exceeds the 0.5 CPUs" in warnings
    assert "memory.max: 512Gi exceeds the 256Mi the runtime granted" in warnings
    applied = json.loads(adj.annotations["sla.nri.io/applied"])
    assert applied["memory_max"] == 256 * MiB


def test_listed_namespace_may_exceed_the_grant(tmp_path):
    async def scenario():
        node = make_node(2, permissions=Permissions(exceed_runtime_limits=("hpc",)))
        async with plugin_session(node, tmp_path) as (_, session, _p):
            pod = make_pod("big", namespace="hpc", annotations={"sla.nri.io/pod": HOSTILE})
            return (
                await session.create_container(pod, make_container(pod, "c", resources=KUBELET))
            ).adjust

    res = run(scenario()).linux.resources
    assert res.cpu.quota.value == 6_400_000 and res.memory.limit.value == 512 * GiB


def test_exclusive_cpus_and_gpus_stay_within_the_grant(tmp_path):
    async def scenario():
        async with plugin_session(make_node(2), tmp_path) as (_, session, _p):
            pod = make_pod(
                "train",
                namespace="ml",
                annotations={
                    "sla.nri.io/pod": "cpu: {exclusive: 8}\ngpu: {count: 8}",
                    "sla.nri.io/enforcement": "soft",
                },
            )
            # requests/limits: 2 CPUs, 2 GPUs from the device plugin
            ctr = make_container(pod, "c", resources=guaranteed(2), cdi_devices=gpu_grant(0, 1))
            adj = (await session.create_container(pod, ctr)).adjust
            ungranted = make_pod(
                "lab", namespace="ml", annotations={"sla.nri.io/pod": "gpu: {count: 1}"}
            )
            with pytest.raises(PluginCallError) as caught:
                await session.create_container(ungranted, make_container(ungranted, "c"))
            return adj, caught.value

    adj, err = run(scenario())
    placement = json.loads(adj.annotations["sla.nri.io/applied"])["placement_record"]
    assert len(placement["gpus"]) == 2
    assert len(parse_cpulist(placement["exclusive"])) == 2
    assert "cpu.exclusive: 8 exceeds the CPU request" in adj.annotations["sla.nri.io/warnings"]
    assert (
        "gpu.count: asks for 8 whole GPUs; the grant has 2 (granted: GPU 0"
        in adj.annotations["sla.nri.io/warnings"]
    )
    assert "CDI_devices" not in str(adj) and not adj.CDI_devices  # nothing added
    assert "no device plugin granted this container a GPU" in err.message


def test_update_container_rechecks_against_the_new_limits(tmp_path):
    sla = "cpu: {limit: 1}\nmemory: {max: 1Gi}"
    big = make_resources(
        cpu_shares=2048, cpu_quota=200_000, cpu_period=100_000, memory_limit=2 * GiB
    )

    async def scenario():
        async with plugin_session(make_node(2), tmp_path) as (_, session, _p):
            hard = make_pod("hard", annotations={"sla.nri.io/pod": sla})
            hard_ctr = make_container(hard, "c", resources=big)
            await session.create_container(hard, hard_ctr)
            # Shrunk below the SLA: never refused (containerd would keep the old, larger
            # limits); the SLA is clamped to the new ones in hard mode too.
            hard_clamped = await session.update_container(hard, hard_ctr, KUBELET)
            soft = make_pod(
                "soft", annotations={"sla.nri.io/pod": sla, "sla.nri.io/enforcement": "soft"}
            )
            soft_ctr = make_container(soft, "c", resources=big)
            await session.create_container(soft, soft_ctr)
            clamped = await session.update_container(soft, soft_ctr, KUBELET)
            restored = await session.update_container(soft, soft_ctr, big)
            return hard_clamped, clamped, restored

    hard_clamped, clamped, restored = run(scenario())
    for answer in (hard_clamped, clamped):
        (update,) = answer.update
        res = update.linux.resources
        assert (res.cpu.quota.value, res.memory.limit.value) == (50_000, 256 * MiB)
    (update,) = restored.update  # limits raised again: the SLA's own values
    res = update.linux.resources
    assert (res.cpu.quota.value, res.memory.limit.value) == (100_000, GiB)


def test_per_pod_cap_counts_the_pods_containers_also_after_a_restart(tmp_path):
    from nri_plugin.config.cap import Cap
    from nri_plugin.config.values import PodCaps
    from nri_plugin.nri.pb import nri_pb2 as pb

    caps = PodCaps(exclusive_cpus=Cap(2))
    sla = {"sla.nri.io/pod": "cpu: {exclusive: 2}"}

    async def scenario():
        pod = make_pod("two", namespace="ml", annotations=sla)
        first = make_container(pod, "a", resources=guaranteed(2))
        second = make_container(pod, "b", resources=guaranteed(2))
        async with plugin_session(make_node(2, pod_caps=caps), tmp_path) as (_, session, _p):
            adj = (await session.create_container(pod, first)).adjust
            with pytest.raises(PluginCallError) as before:
                await session.create_container(pod, second)
            other = make_pod("other", namespace="ml", annotations=sla)
            await session.create_container(
                other, make_container(other, "a", resources=guaranteed(2))
            )
        running = make_container(
            pod,
            "a",
            state=pb.CONTAINER_RUNNING,
            resources=guaranteed(2),
            annotations=dict(adj.annotations),
        )
        async with plugin_session(
            make_node(2, pod_caps=caps), tmp_path, pods=[pod], containers=[running]
        ) as (_, session, _p):
            with pytest.raises(PluginCallError) as after:
                await session.create_container(pod, second)
        return before.value, after.value

    before, after = run(scenario())
    for err in (before, after):
        assert (
            "cpu.exclusive: 2 exceeds the node's per-pod cap (node config "
            "pod-caps.exclusive-cpus: 2 = 2, the pod's other containers hold 2); allowed: "
            "at most 0"
        ) in err.message


def test_the_grant_is_read_from_the_runtime_never_the_env(tmp_path, caplog):
    """The NRI request's CDI devices, GPU device nodes and device-plugin mounts are the
    grant (bounded); NVIDIA_VISIBLE_DEVICES is only reported; a container without an SLA
    holds its grant all the same."""
    import logging

    from nri_plugin.granted import GrantedResources
    from nri_plugin.plugin.handlers import granted_resources

    caplog.set_level(logging.INFO, logger="nri_sla.plugin")
    pod = make_pod("p", namespace="ml")
    ctr = make_container(
        pod,
        "c",
        env=("NVIDIA_VISIBLE_DEVICES=all",),
        cdi_devices=("k8s.device-plugin.nvidia.com/gpu=3", "vendor.x/nic=0"),
    )
    ctr.linux.devices.add(path="/dev/nvidia5", type="c", major=195, minor=5)
    ctr.linux.devices.add(path="/dev/nvidiactl", type="c", major=195, minor=255)
    ctr.linux.devices.add(path="/dev/sda", type="b", major=8, minor=0)
    ctr.mounts.add(destination="/var/run/nvidia-container-devices/GPU-x", source="/dev/null")
    for i in range(1000):  # a flood of devices: only the first 256 are looked at
        ctr.linux.devices.add(path=f"/dev/x{i}", type="c", major=195, minor=7)
    granted = granted_resources(ctr.linux.resources, ctr)
    assert granted.cdi_devices == ("k8s.device-plugin.nvidia.com/gpu=3", "vendor.x/nic=0")
    assert granted.gpu_devices[:2] == ((195, 5), (195, 255)) and len(granted.gpu_devices) == 255
    assert granted.device_mounts == ("GPU-x",) and granted.env_gpus == "all"
    assert granted_resources(ctr.linux.resources) == GrantedResources(cpu_shares=102)
    flooded = make_container(pod, "f")  # mounts too: only the first 256 are looked at
    for i in range(300):
        flooded.mounts.add(
            destination=f"/data/{i}" if i < 256 else f"/var/run/nvidia-container-devices/GPU-{i}",
            source="/dev/null",
        )
    assert granted_resources(flooded.linux.resources, flooded).device_mounts == ()
    flooded.mounts[255].destination = "/var/run/nvidia-container-devices/GPU-last"
    assert granted_resources(flooded.linux.resources, flooded).device_mounts == ("GPU-last",)

    # The env is read item by item once its joined text names the key: only an item that
    # starts with it counts (the last one), not the key inside another item's value.
    inside = make_container(pod, "v", env=("NOTE=NVIDIA_VISIBLE_DEVICES=all", "PATH=/bin"))
    assert granted_resources(inside.linux.resources, inside).env_gpus is None
    twice = make_container(
        pod, "t", env=("NVIDIA_VISIBLE_DEVICES=0", "A=1", "NVIDIA_VISIBLE_DEVICES=2")
    )
    assert granted_resources(twice.linux.resources, twice).env_gpus == "2"

    # Without GPU evidence, replicas' grants with the same limits are one shared value,
    # equal to the one built field by field; other limits are another value.
    from nri_plugin import granted as granted_module

    plain = make_container(pod, "r1", resources=KUBELET)
    first = granted_resources(plain.linux.resources, plain)
    again = granted_resources(plain.linux.resources, make_container(pod, "r2"))
    assert again is first and first == GrantedResources(
        cpu_quota=50_000, cpu_period=100_000, cpu_shares=512, memory_limit=256 * MiB
    )
    assert (
        granted_resources(make_resources(cpu_shares=1024))
        == GrantedResources(cpu_shares=1024)
        != first
    )
    for i in range(granted_module.LIMITS_KEPT + 1):  # bounded: the oldest are dropped
        granted_module.limits_only(0, 0, i + 2, 0)
    assert len(granted_module._limits_only) <= granted_module.LIMITS_KEPT

    env_only = make_container(make_pod("e"), "c", env=("NVIDIA_VISIBLE_DEVICES=0,1",))

    async def scenario():
        async with plugin_session(make_node(2), tmp_path) as (_, session, plugin):
            await session.create_container(pod, ctr)  # no SLA
            await session.create_container(make_pod("e"), env_only)
            return plugin.node.allocator.gpus_in_use()

    held = run(scenario())
    assert held == {3: (ctr.id,), 5: (ctr.id,), 7: (ctr.id,)}
    assert any(
        r.getMessage() == "GPU env is not a grant" and r.fields["env"] == "0,1"
        for r in caplog.records
    )
