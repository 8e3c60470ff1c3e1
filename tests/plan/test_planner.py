"""plan_container: every SLA field planned exactly, or a shortfall (hard: refusal)."""

from __future__ import annotations

import pytest

from nri_plugin.config.values import NodeConfig, Permissions
from nri_plugin.enforce.errors import DeviceError
from nri_plugin.plan.context import PlanContext
from nri_plugin.plan.errors import PlanError
from nri_plugin.plan.model import ContainerPlan, IoLimit
from nri_plugin.plan.planner import plan_container
from nri_plugin.plan.rt_budget import RtBudget, RtGrant
from nri_plugin.sla.parse import parse_sla_document

KEY = "sla.nri.io/pod"


def sla(text: str, enforcement: str = "hard"):
    return parse_sla_document(KEY, text, default_enforcement=enforcement)


def resolve(spec: str) -> tuple[int, int]:
    if spec == "/dev/sda":
        return 8, 0
    raise DeviceError(spec, "no such block device")


def ctx(version: int = 2, **kw) -> PlanContext:
    kw.setdefault("config", NodeConfig(permissions=Permissions(realtime=("rt-*",))))
    kw.setdefault("resolve_device", resolve)
    return PlanContext(cgroup_version=version, owner="ctr-1", **kw)


def test_cpu_limit_becomes_quota_over_period():
    plan = plan_container(sla("cpu: {limit: 1.5, period: 50ms}"), ctx())
    assert (plan.cpu_quota, plan.cpu_period) == (75_000, 50_000)
    assert plan.warnings == ()


@pytest.mark.parametrize(
    "version, ns, expect",
    [
        (2, "rt-team", "not available on cgroup v2"),
        (1, "default", "may not use realtime"),
    ],
)
def test_realtime_refusals(version, ns, expect):
    with pytest.raises(PlanError, match=expect) as caught:
        plan_container(sla("cpu: {rt-runtime: 5ms}"), ctx(version, namespace=ns))
    assert caught.value.key == KEY and caught.value.field == "cpu.rt-runtime"


def test_the_rt_period_in_force_defaults_to_the_kernels():
    half = plan_container(sla("cpu: {rt-runtime: 5ms, rt-period: 500ms}"), ctx(1, namespace="rt-a"))
    assert half.rt_period_in_force == 500_000
    # the parser's default (sla/parse.py) is the one the planner plans with
    unwritten = plan_container(sla("cpu: {rt-runtime: 5ms}"), ctx(1, namespace="rt-a"))
    assert (unwritten.rt_runtime, unwritten.rt_period) == (5000, 1_000_000)
    assert ContainerPlan("hard", 1, rt_runtime=5000).rt_period_in_force == 1_000_000


def test_realtime_budget_is_accounted_and_released():
    budget = RtBudget(0.01)  # 1% of CPU time for all SLA containers
    first = plan_container(
        sla("cpu: {rt-runtime: 5ms, rt-period: 1s}"), ctx(1, namespace="rt-a", rt_budget=budget)
    )
    assert (first.rt_runtime, first.rt_period) == (5000, 1_000_000)
    budget.reserve("ctr-1", RtGrant(first.rt_runtime, first.rt_period))  # its admission
    second = PlanContext(
        cgroup_version=1, namespace="rt-b", owner="ctr-2", config=ctx().config, rt_budget=budget
    )
    with pytest.raises(
        PlanError, match=r"RT budget for SLA containers \(1\.0%.*cannot take that much"
    ):
        plan_container(sla("cpu: {rt-runtime: 6ms, rt-period: 1s}"), second)
    budget.release("ctr-1")
    assert plan_container(sla("cpu: {rt-runtime: 6ms, rt-period: 1s}"), second).rt_runtime == 6000


def test_soft_mode_applies_the_rest_and_warns():
    plan = plan_container(
        sla("cpu: {limit: 1, rt-runtime: 5ms}\nmemory: {high: 1Gi, max: 2Gi}", "soft"),
        ctx(1, namespace="rt-x"),
    )
    assert plan.cpu_quota == 100_000 and plan.rt_runtime == 5000
    assert plan.memory_max == 2 * 1024**3
    assert plan.memory_high is None and plan.memory_soft_limit == 1024**3
    assert len(plan.warnings) == 1 and "memory.high" in plan.warnings[0]
    assert plan.reasons == ("unsupported",)


def test_memory_high_on_v2_is_unified():
    plan = plan_container(sla("memory: {high: 1Gi, max: 2Gi}"), ctx(2))
    assert plan.memory_high == 1024**3 and plan.memory_soft_limit is None


def test_io_devices_resolved_and_missing_device_named():
    plan = plan_container(sla("io:\n  max:\n  - {device: /dev/sda, read-bps: 1Mi}"), ctx())
    assert plan.io_max == (IoLimit(8, 0, read_bps=1024**2),)
    with pytest.raises(PlanError, match=r"io\.max\[0\]\.device"):
        plan_container(sla("io:\n  max:\n  - {device: /dev/nvme9n1, read-bps: 1Mi}"), ctx())


def test_io_max_needs_permission():
    config = NodeConfig(permissions=Permissions(io_max=("storage",)))
    with pytest.raises(PlanError, match=r"permissions\.io-max"):
        plan_container(
            sla("io:\n  max:\n  - {device: '8:0', write-iops: 10}"),
            ctx(config=config, namespace="web"),
        )


def test_io_weight_without_proportional_controller():
    with pytest.raises(PlanError, match="BFQ"):
        plan_container(sla("io: {weight: 300}"), ctx(1, io_weight_supported=False))


def test_placement_without_topology_is_a_shortfall():
    plan = plan_container(sla("gpu: {count: 1}", "soft"), ctx())
    assert "no node topology" in plan.warnings[0]
