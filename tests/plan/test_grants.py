"""Never more than Kubernetes accounted for: the planner against what the runtime granted
(nri_plugin.plan.grants) and the node's per-pod caps; hard refuses naming both values,
soft clamps and warns; UpdateContainer's re-check; the core's reuse key."""

from __future__ import annotations

from pathlib import Path

import pytest

from nri_plugin.config.cap import Cap
from nri_plugin.config.values import CpuConfig, NodeConfig, Permissions, PodCaps
from nri_plugin.core.decision import decide, recheck
from nri_plugin.core.nodestate import NodeState
from nri_plugin.core.request import ContainerRequest
from nri_plugin.granted import GrantedResources
from nri_plugin.plan.allocator import Allocator
from nri_plugin.plan.context import PlanContext, PodUsage
from nri_plugin.plan.errors import PlanError
from nri_plugin.plan.planner import plan_container
from nri_plugin.plan.rt_budget import RtBudget, RtGrant
from nri_plugin.plan.runtime_gpus import NO_GRANT
from nri_plugin.sla.parse import parse_sla_document
from nri_plugin.topology.cpulist import parse_cpulist
from nri_plugin.topology.snapshot import load_snapshot

KEY = "sla.nri.io/pod"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
MiB, GiB = 1 << 20, 1 << 30
# The kubelet's values for limits 0.5 CPU / 256Mi, requests 250m.
KUBELET = GrantedResources(
    cpu_quota=50_000, cpu_period=100_000, cpu_shares=256, memory_limit=256 * MiB
)


def sla(text: str, enforcement: str = "hard"):
    return parse_sla_document(KEY, text, default_enforcement=enforcement)


def allocator(snapshot: str = "dgx-like.yaml") -> Allocator:
    snap = load_snapshot(EXAMPLES / snapshot)
    return Allocator(snap.topology, snap.inventory)


def ctx(granted: GrantedResources = KUBELET, **kw) -> PlanContext:
    kw.setdefault("config", NodeConfig(permissions=Permissions(realtime=("*",))))
    kw.setdefault("namespace", "shop")
    return PlanContext(cgroup_version=kw.pop("version", 2), owner="ctr-1", granted=granted, **kw)


def refused(text: str, context: PlanContext) -> PlanError:
    with pytest.raises(PlanError) as caught:
        plan_container(sla(text), context)
    return caught.value


# -- CPU quota and memory.max: tighten only ------------------------------------------------


def test_a_tighter_sla_is_planned_as_asked():
    plan = plan_container(sla("cpu: {limit: 0.25}\nmemory: {high: 100Mi, max: 200Mi}"), ctx())
    assert (plan.cpu_quota, plan.cpu_period, plan.memory_max) == (25_000, 100_000, 200 * MiB)
    assert plan.warnings == ()


def test_hard_refusal_names_both_values():
    err = refused("cpu: {limit: 64}\nmemory: {max: 512Gi}", ctx())
    assert str(err) == (
        "sla.nri.io/pod: cpu.limit: 64 exceeds the 0.5 CPUs the runtime granted (the pod's "
        "limit, quota 50000us per 100000us); allowed: at most 0.5 (also: sla.nri.io/pod: "
        "memory.max: 512Gi exceeds the 256Mi the runtime granted (the pod's limit); "
        "allowed: at most 256Mi)"
    )
    assert err.reason == "limit" and err.field == "cpu.limit"


def test_soft_mode_clamps_to_the_grant_and_warns():
    plan = plan_container(sla("cpu: {limit: 64}\nmemory: {max: 512Gi}", "soft"), ctx())
    assert (plan.cpu_quota, plan.cpu_period, plan.memory_max) == (50_000, 100_000, 256 * MiB)
    assert plan.warnings == (
        "sla.nri.io/pod: cpu.limit: 64 exceeds the 0.5 CPUs the runtime granted (the pod's "
        "limit, quota 50000us per 100000us); allowed: at most 0.5; clamped to quota 50000us "
        "per 100000us",
        "sla.nri.io/pod: memory.max: 512Gi exceeds the 256Mi the runtime granted (the pod's "
        "limit); allowed: at most 256Mi; clamped to 256Mi",
    )
    assert plan.reasons == ("limit", "limit")


@pytest.mark.parametrize(
    ("text", "allowed"),
    [
        ("cpu: {limit: 0.5, period: 1s}", True),  # quota 500000 > 50000, same rate
        ("cpu: {limit: 0.5, period: 10ms}", True),  # quota 5000 < 50000, same rate
        ("cpu: {limit: 0.6, period: 10ms}", False),  # quota 6000 < 50000, but 0.6 > 0.5 CPU
        ("cpu: {limit: 0.501, period: 1s}", False),
    ],
)
def test_quota_is_compared_as_a_rate(text, allowed):
    if allowed:
        plan = plan_container(sla(text), ctx())
        assert plan.warnings == ()
    else:
        assert refused(text, ctx()).field == "cpu.limit"


def test_soft_clamp_keeps_the_sla_period_unless_below_the_kernel_minimum():
    plan = plan_container(sla("cpu: {limit: 2, period: 10ms}", "soft"), ctx())
    assert (plan.cpu_quota, plan.cpu_period) == (5_000, 10_000)  # 0.5 CPU at 10ms
    plan = plan_container(sla("cpu: {limit: 1, period: 1ms}", "soft"), ctx())
    # 0.5 CPU at 1ms would be a 500us quota, below the kernel's 1ms: the runtime's own
    assert (plan.cpu_quota, plan.cpu_period) == (50_000, 100_000)


def test_runtime_period_other_than_the_default_is_respected():
    granted = GrantedResources(cpu_quota=20_000, cpu_period=50_000)  # 0.4 CPU
    assert plan_container(sla("cpu: {limit: 0.4}"), ctx(granted)).cpu_quota == 40_000
    assert "the 0.4 CPUs" in str(refused("cpu: {limit: 0.41}", ctx(granted)))


def test_no_runtime_limit_caps_nothing():
    plan = plan_container(
        sla("cpu: {limit: 64}\nmemory: {max: 512Gi}"),
        ctx(GrantedResources(cpu_quota=-1, memory_limit=-1)),
    )
    assert (plan.cpu_quota, plan.memory_max) == (6_400_000, 512 * GiB)


def test_node_policy_may_let_a_namespace_exceed_the_grant():
    config = NodeConfig(permissions=Permissions(exceed_runtime_limits=("batch-*",)))
    plan = plan_container(
        sla("cpu: {limit: 64}\nmemory: {max: 512Gi}"), ctx(config=config, namespace="batch-1")
    )
    assert (plan.cpu_quota, plan.memory_max) == (6_400_000, 512 * GiB)
    assert refused("memory: {max: 512Gi}", ctx(config=config, namespace="web"))


# -- exclusive CPUs: within the CPU request ------------------------------------------------


@pytest.mark.parametrize(
    ("granted", "whole"),
    [
        (GrantedResources(cpu_shares=2048), 2),  # requests.cpu: 2
        (GrantedResources(cpu_shares=1536), 1),  # 1500m
        (GrantedResources(cpu_shares=2), 0),  # no request (BestEffort)
        (GrantedResources(cpu_quota=400_000, cpu_period=100_000), 4),  # no shares: the quota
    ],
)
def test_exclusive_cpus_stay_within_the_request(granted, whole):
    assert granted.cpu_request_millis // 1000 == whole
    err = refused("cpu: {exclusive: 8}", ctx(granted, allocator=allocator()))
    assert err.field == "cpu.exclusive" and err.reason == "limit"
    assert "8 exceeds the CPU request the runtime granted" in err.message
    assert err.message.endswith(f"whole CPUs); allowed: at most {whole}")


def test_soft_exclusive_is_clamped_to_the_request():
    alloc = allocator()
    plan = plan_container(
        sla("cpu: {exclusive: 8}", "soft"), ctx(GrantedResources(cpu_shares=2048), allocator=alloc)
    )
    assert len(parse_cpulist(plan.placement_record["exclusive"])) == 2
    assert not alloc.exclusive_cpus_in_use()  # planning takes nothing; admitting does
    alloc.restore("ctr-1", plan.placement_record)
    assert len(alloc.exclusive_cpus_in_use()) == 2
    assert "allowed: at most 2; clamped to 2" in plan.warnings[0]


def test_exclusive_request_without_whole_cpus_drops_exclusive_in_soft_mode():
    alloc = allocator()
    plan = plan_container(
        sla("cpu: {limit: 0.5, exclusive: 2}", "soft"),
        ctx(GrantedResources(cpu_shares=512), allocator=alloc),
    )
    assert plan.placement_record is None and plan.cpu_quota == 50_000
    assert not alloc.exclusive_cpus_in_use()
    assert "allowed: at most 0; clamped to none" in plan.warnings[0]


def test_exclusive_cpus_are_the_count_asked_never_whole_cores_rounded_up():
    alloc = allocator()  # 2 threads per core
    plan = plan_container(
        sla("cpu: {exclusive: 1}"), ctx(GrantedResources(cpu_shares=1024), allocator=alloc)
    )
    assert len(parse_cpulist(plan.placement_record["exclusive"])) == 1
    alloc.restore("ctr-1", plan.placement_record)
    assert len(alloc.exclusive_cpus_in_use()) == 1


FULL_CORES = NodeConfig(cpu=CpuConfig(exclusive_full_cores=True))


def test_full_cores_refuses_a_count_that_does_not_fill_whole_cores():
    alloc = allocator()
    err = refused(
        "cpu: {exclusive: 3}",
        ctx(GrantedResources(cpu_shares=4096), config=FULL_CORES, allocator=alloc),
    )
    assert err.field == "cpu.exclusive" and err.message == (
        "3 does not fill whole cores of 2 CPUs (node policy cpu.exclusive-full-cores: "
        "exclusive CPUs are whole cores only); allowed: a multiple of 2"
    )
    assert not alloc.exclusive_cpus_in_use()  # never rounded up to 4
    plan = plan_container(
        sla("cpu: {exclusive: 4}"),
        ctx(GrantedResources(cpu_shares=4096), config=FULL_CORES, allocator=alloc),
    )
    held = parse_cpulist(plan.placement_record["exclusive"])
    assert len(held) == 4 and all(alloc.topology.core_of(c) <= held for c in held)


def test_full_cores_soft_runs_shared_with_a_warning():
    alloc = allocator()
    plan = plan_container(
        sla("cpu: {exclusive: 3}", "soft"),
        ctx(GrantedResources(cpu_shares=4096), config=FULL_CORES, allocator=alloc),
    )
    assert plan.placement_record is None and not alloc.exclusive_cpus_in_use()
    assert plan.warnings[0].endswith("allowed: a multiple of 2; runs on the shared CPUs")


def test_exclusive_per_pod_cap_counts_the_pods_other_containers():
    config = NodeConfig(pod_caps=PodCaps(exclusive_cpus=Cap(6)))
    granted = GrantedResources(cpu_shares=8192)
    err = refused(
        "cpu: {exclusive: 4}",
        ctx(granted, config=config, allocator=allocator(), pod_usage=PodUsage(exclusive_cpus=4)),
    )
    assert err.message == (
        "4 exceeds the node's per-pod cap (node config "
        "pod-caps.exclusive-cpus: 6 = 6, the pod's other containers hold "
        "4); allowed: at most 2"
    )
    # the default: half of the node's CPUs (64 here)
    err = refused(
        "cpu: {exclusive: 40}", ctx(GrantedResources(cpu_shares=64 * 1024), allocator=allocator())
    )
    assert "pod-caps.exclusive-cpus: 50% = 32" in err.message


# -- GPUs: a requirement on the device plugin's grant, never chosen --------------------------

UUID = "GPU-d0000000-0000-0000-0000-00000000000"  # + the index: dgx-like.yaml's GPUs


def cdi(*names: object, kind: str = "nvidia.com/gpu") -> GrantedResources:
    return GrantedResources(cdi_devices=tuple(f"{kind}={n}" for n in names))


def test_no_grant_is_refused_and_an_env_is_no_grant():
    err = refused("gpu: {count: 1}", ctx(allocator=allocator()))
    assert err.field == "gpu" and err.message.startswith(
        "no device plugin granted this container a GPU"
    )
    err = refused(
        "gpu: {count: 8}", ctx(GrantedResources(env_gpus="0,1,2,3,4,5,6,7"), allocator=allocator())
    )
    assert "its env NVIDIA_VISIBLE_DEVICES='0,1,2,3,4,5,6,7' is not a grant" in err.message
    plan = plan_container(
        sla("gpu: {count: 1}\ncpu: {exclusive: 2}", "soft"),
        ctx(GrantedResources(cpu_shares=2048, env_gpus="all"), allocator=allocator()),
    )
    assert "gpus" not in plan.placement_record and plan.placement_record["exclusive"]
    assert "no GPU is aligned" in plan.warnings[0]


def test_the_grant_is_held_and_aligned_to_never_replaced():
    # The device plugin granted GPUs 0 and 7 (different NUMA nodes, no NVLink between).
    granted = cdi(0, 7)
    plan = plan_container(sla("gpu: {count: 2}"), ctx(granted, allocator=allocator()))
    assert [g[-1] for g in plan.placement_record["gpus"]] == ["0", "7"]
    assert plan.mems == "0-1"
    err = refused("gpu: {count: 2, topology: nvlink}", ctx(granted, allocator=allocator()))
    assert err.field == "gpu.topology" and err.message == (
        "nvlink: the granted GPUs are not connected to each other over NVLink (granted: "
        "GPU 0 (GPU-d0000000-0000-0000-0000-000000000000, NUMA 0), "
        "GPU 7 (GPU-d0000000-0000-0000-0000-000000000007, NUMA 1))"
    )
    err = refused("gpu: {count: 4}", ctx(granted, allocator=allocator()))
    assert err.field == "gpu.count"
    assert err.message.startswith("asks for 4 whole GPUs; the grant has 2 (granted: GPU 0")


def test_a_memory_policy_adds_no_second_refusal_to_a_failed_placement():
    """The placement's refusal says why there are no NUMA nodes; "memory-policy needs NUMA
    nodes" would only send the pod author to set what they did set. Without any placement
    asked for, that message is the only one and stays."""
    policy = "\nnuma: {memory-policy: interleave}"
    err = refused(
        "gpu: {count: 2, topology: nvlink}" + policy, ctx(cdi(0, 7), allocator=allocator())
    )
    assert err.field == "gpu.topology" and "memory-policy" not in str(err)
    err = refused("cpu: {limit: 1}" + policy, ctx(cdi(0), allocator=allocator()))
    assert err.field == "numa.memory-policy" and "needs NUMA nodes" in err.message


def test_soft_grant_shortfalls_warn_and_keep_the_grant():
    granted = cdi("GPU-d0000000-0000-0000-0000-000000000003")
    plan = plan_container(sla("gpu: {count: 4}", "soft"), ctx(granted, allocator=allocator()))
    assert plan.placement_record["gpus"] == ["GPU-d0000000-0000-0000-0000-000000000003"]
    assert "asks for 4 whole GPUs; the grant has 1" in plan.warnings[0]
    plan = plan_container(sla("gpu: {ids: [0, 5]}", "soft"), ctx(cdi(0, 1), allocator=allocator()))
    assert [g[-1] for g in plan.placement_record["gpus"]] == ["0", "1"]
    assert "gpu.ids: GPU 5 is not granted to this container" in plan.warnings[0]


def test_every_grant_kind_and_evidence_counts():
    """The NVIDIA device plugin's CDI kind, GPU device nodes and volume mounts are grants;
    a CDI kind the node config does not list is not."""
    for granted in (
        cdi(4, 5, kind="k8s.device-plugin.nvidia.com/gpu"),
        GrantedResources(gpu_devices=((195, 4), (195, 5), (195, 255))),
        GrantedResources(device_mounts=("4", f"{UUID}5")),
    ):
        plan = plan_container(
            sla("gpu: {count: 2, topology: numa}"), ctx(granted, allocator=allocator())
        )
        assert [g[-1] for g in plan.placement_record["gpus"]] == ["4", "5"]
        assert plan.mems == "1"
    err = refused("gpu: {count: 1}", ctx(cdi(0, kind="example.com/gpu"), allocator=allocator()))
    assert err.message.startswith("no device plugin granted")


def test_all_is_every_gpu_when_the_runtime_wrote_it():
    plan = plan_container(sla("gpu: {count: 8}"), ctx(cdi("all"), allocator=allocator()))
    assert len(plan.placement_record["gpus"]) == 8


def test_gpu_from_stays_accepted_and_means_the_grant():
    for text in ("gpu: {from: runtime}", "gpu: {from: plugin, count: 2}"):
        plan = plan_container(sla(text), ctx(cdi(4, 5), allocator=allocator()))
        assert plan.placement_record["gpus"] and plan.mems == "1"


def test_a_mig_grant_meets_a_mig_profile_not_a_whole_gpu_count():
    granted = cdi("MIG-a0000000-0000-0000-0000-000000000003")
    plan = plan_container(
        sla("gpu: {mig: 1g.10gb}"), ctx(granted, allocator=allocator("mig-box.yaml"))
    )
    assert plan.placement_record["migs"] == ["MIG-a0000000-0000-0000-0000-000000000003"]
    err = refused("gpu: {count: 1}", ctx(granted, allocator=allocator("mig-box.yaml")))
    assert err.message.startswith("asks for 1 whole GPU; the grant has 0 (granted: MIG 1g.10gb")
    err = refused("gpu: {mig: 7g.80gb}", ctx(granted, allocator=allocator("mig-box.yaml")))
    assert err.field == "gpu.mig" and "none is granted" in err.message


def test_unknown_grant_names_are_reported():
    err = refused("gpu: {count: 1}", ctx(cdi("GPU-elsewhere"), allocator=allocator()))
    assert "'GPU-elsewhere', which match no GPU on this node" in err.message


# -- real-time share -----------------------------------------------------------------------


def test_rt_share_per_pod_cap():
    err = refused("cpu: {rt-runtime: 200ms, rt-period: 1s}", ctx(version=1))
    assert err.field == "cpu.rt-runtime" and err.reason == "limit"
    assert err.message == (
        "200ms per 1s (20.0% of CPU time) exceeds the node's per-pod "
        "real-time cap (node config pod-caps.rt-share: 10.0%); allowed: "
        "at most 100ms per 1s"
    )
    budget = RtBudget(0.5)
    plan = plan_container(
        sla("cpu: {rt-runtime: 200ms, rt-period: 1s}", "soft"),
        ctx(version=1, rt_budget=budget, pod_usage=PodUsage(rt_share=0.08)),
    )
    assert (plan.rt_runtime, plan.rt_period) == (20_000, 1_000_000)
    assert budget.share_of("ctr-1") == 0.0  # planning takes nothing; admitting does
    budget.reserve("ctr-1", RtGrant(plan.rt_runtime, plan.rt_period))
    assert budget.share_of("ctr-1") == pytest.approx(0.02)


# -- the core: UpdateContainer re-check, reuse key, per-pod usage ---------------------------


def node(**config) -> NodeState:
    snap = load_snapshot(EXAMPLES / "dgx-like.yaml")
    return NodeState(
        NodeConfig(**config),
        2,
        allocator=Allocator(snap.topology, snap.inventory),
        rt_budget=RtBudget(0.5),
    )


def test_recheck_against_resized_limits():
    n = node()
    ann = {KEY: "cpu: {limit: 0.5}\nmemory: {max: 256Mi}"}
    plan = decide(
        n,
        ContainerRequest(
            ann,
            "c",
            namespace="shop",
            owner="a",
            granted=GrantedResources(cpu_quota=100_000, memory_limit=GiB),
        ),
    ).plan
    smaller = GrantedResources(cpu_quota=25_000, memory_limit=128 * MiB)
    hard = recheck(n, plan, smaller, namespace="shop")  # hard mode clamps a resize too
    assert (hard.cpu_quota, hard.memory_max) == (25_000, 128 * MiB)
    assert any("memory.max: 256Mi exceeds the 128Mi" in w for w in hard.warnings)
    soft = {**ann, "sla.nri.io/enforcement": "soft"}
    soft_plan = decide(
        n,
        ContainerRequest(
            soft, "c", namespace="shop", owner="b", granted=GrantedResources(memory_limit=GiB)
        ),
    ).plan
    clamped = recheck(n, soft_plan, smaller, namespace="shop")
    assert (clamped.cpu_quota, clamped.memory_max) == (25_000, 128 * MiB)
    assert len(clamped.warnings) == 2
    # raised again: the SLA's own values, not the clamped ones
    assert recheck(n, soft_plan, GrantedResources(), namespace="shop") is soft_plan


def test_exclusive_cpus_above_a_smaller_request_are_given_back():
    """A resize down is no refusal for exclusive CPUs (hard or soft): the pool gives back
    the cores above the new request, so Kubernetes' accounting and the node agree."""
    n = node()
    plan = decide(
        n,
        ContainerRequest(
            {KEY: "cpu: {exclusive: 4}"},
            "c",
            namespace="ml",
            owner="a",
            granted=GrantedResources(cpu_shares=4096),
        ),
    ).plan
    n.admit("a", plan, NO_GRANT, 4000, "").commit()
    smaller = GrantedResources(cpu_shares=2048)
    assert recheck(n, plan, smaller, namespace="ml") is plan
    held = n.allocator.placement_of("a").exclusive_cpus
    given = n.resize_cpus("a", smaller.cpu_request_millis, "ml")
    kept = n.allocator.placement_of("a").exclusive_cpus
    assert len(held) == 4 and len(given) == 2 and kept == held - given
    assert set(n.allocator.exclusive_cpus_in_use()) == kept
    assert n.resize_cpus("a", smaller.cpu_request_millis, "ml") == frozenset()  # once


def test_reuse_key_includes_the_grant():
    n = node()
    ann = {KEY: "memory: {max: 200Mi}"}
    first = decide(n, ContainerRequest(ann, "c", namespace="shop", granted=KUBELET))
    assert first.outcome == "enforced" and first.reusable
    smaller = decide(
        n,
        ContainerRequest(
            ann, "c", namespace="shop", granted=GrantedResources(memory_limit=100 * MiB)
        ),
    )
    assert smaller.outcome == "refused" and "exceeds the 100Mi" in smaller.error_text
    again = decide(n, ContainerRequest(ann, "c", namespace="shop", granted=KUBELET))
    assert again.plan is first.plan  # the same grant: the remembered decision


def test_per_pod_usage_follows_the_node_state():
    n = node()
    n.pod_members = lambda pod: {"p": ("a", "b")}.get(pod, ())  # the plugin: its registry
    granted = GrantedResources(
        cpu_shares=8192, cdi_devices=tuple(f"nvidia.com/gpu={i}" for i in range(2))
    )
    first = decide(
        n,
        ContainerRequest(
            {KEY: "cpu: {exclusive: 4}\ngpu: {count: 2}"},
            "a",
            namespace="ml",
            owner="a",
            pod="p",
            granted=granted,
        ),
    )
    assert first.outcome == "enforced"
    assert n.pod_usage("p", "b") == PodUsage()  # decided, not admitted: nothing held
    n.admit("a", first.plan, n.gpu_grant(granted), 8000, "").commit()
    assert n.pod_usage("p", "b") == PodUsage(exclusive_cpus=4)
    assert n.pod_usage("other", "b") == PodUsage() and n.pod_usage("p", "a") == PodUsage()
    n.release("a")
    assert n.pod_usage("p", "b") == PodUsage()
