"""SLA cases the containerd and the CRI-O suites both run: each takes a running node (a
Cluster or a CrioNode) and, where the case reads the plugin's log, the plugin process.

Run-specific extras (a runtime handler, the hook's stage) are keyword arguments passed to
run_pod; a case skips with a reason when the host lacks what it throttles.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.e2e.e2e_cgroup import whole_disk

POD_SLA = "cpu: {limit: 0.5, period: 100ms}\nmemory: {max: 256Mi}\n"
POD_SLA_TRIPLE = (50000, 100000, 268435456)

# What the kubelet sends for limits {cpu: 500m, memory: 256Mi} (requests = limits).
KUBELET_LIMITS = {
    "cpu_period": 100000,
    "cpu_quota": 50000,
    "cpu_shares": 512,
    "memory_limit_in_bytes": 268435456,
}
GREEDY = "cpu: {limit: 64}\nmemory: {max: 512Gi}\n"
NODE0_CPUS = Path("/sys/devices/system/node/node0/cpulist")


def triple(values) -> tuple[int | None, int | None, int | None]:
    return values.cpu_quota, values.cpu_period, values.memory_limit


def container_sla_overrides_pod_sla(node, **run: Any) -> None:
    pc = node.run_pod(
        "override",
        {
            "sla.nri.io/pod": POD_SLA,
            "sla.nri.io/container.work": "cpu: {limit: 0.25}\n",
        },
        **run,
    )
    # cpu.limit from the container key, period and memory.max from the pod key.
    assert triple(node.cgroup(pc)) == (25000, 100000, 268435456)


def soft_sla_direct_writes_land(node, *, warning_in_spec: bool = True, **run: Any):
    """The soft SLA's memory and io writes, read back. v1 has no memory.high: soft mode
    falls back to the soft limit and warns; the NRI path puts that warning into the spec
    (`warning_in_spec`), the hook cannot (it runs after the spec is written)."""
    disk = whole_disk()
    if disk is None:
        pytest.skip("no whole block disk under /sys/block to throttle")
    pc = node.run_pod(
        "soft",
        {
            "sla.nri.io/pod": (
                "enforcement: soft\n"
                "memory: {high: 128Mi, max: 256Mi}\n"
                f"io:\n  max:\n    - {{device: '{disk}', read-bps: 10Mi, write-iops: 100}}\n"
            )
        },
        **run,
    )
    assert node.cgroup(pc).memory_limit == 268435456
    if node.cgroup_v2:
        assert node.cgroup_file(pc, "memory", "memory.high") == "134217728"
        io_max = node.cgroup_file(pc, "io", "io.max") or ""
        assert f"{disk} rbps=10485760 wbps=max riops=max wiops=100" in io_max
    else:
        # No memory.high on v1: soft mode falls back to the soft limit, with a warning.
        assert node.cgroup_file(pc, "memory", "memory.soft_limit_in_bytes") == "134217728"
        assert node.cgroup_file(pc, "blkio", "blkio.throttle.read_bps_device") == (
            f"{disk} 10485760"
        )
        assert node.cgroup_file(pc, "blkio", "blkio.throttle.write_iops_device") == (f"{disk} 100")
        if warning_in_spec:
            assert "memory.high" in node.spec_annotations(pc).get("sla.nri.io/warnings", "")
    if not warning_in_spec:
        assert "sla.nri.io/warnings" not in node.spec_annotations(pc)


def numa_nodes_bind_cpuset(node, **run: Any) -> None:
    if not NODE0_CPUS.exists():
        pytest.skip("no NUMA sysfs (/sys/devices/system/node/node0)")
    pc = node.run_pod("numa", {"sla.nri.io/pod": 'numa: {nodes: "0"}\n'}, **run)
    assert node.cgroup_file(pc, "cpuset", "cpuset.mems") == "0"
    assert node.cgroup_file(pc, "cpuset", "cpuset.cpus") == NODE0_CPUS.read_text().strip()


def rt_budget_lands_with_ancestors_raised(node, **run: Any) -> None:
    """Needs `permissions: realtime` to allow the e2e namespace in the node config."""
    if node.cgroup_v2:
        pytest.skip("real-time budgets are cgroup v1 only (v2 ignores them)")
    if not Path("/sys/fs/cgroup/cpu/cpu.rt_runtime_us").exists():
        pytest.skip("kernel without CONFIG_RT_GROUP_SCHED (no cpu.rt_runtime_us)")
    pc = node.run_pod("rt", {"sla.nri.io/pod": "cpu: {rt-runtime: 5ms, rt-period: 1s}\n"}, **run)
    assert node.cgroup_file(pc, "cpu", "cpu.rt_runtime_us") == "5000"
    assert node.cgroup_file(pc, "cpu", "cpu.rt_period_us") == "1000000"
    # runc can only set a child's budget when every ancestor has at least as much:
    # the pod cgroup and the private parent were raised by the plugin.
    pod_dir = Path("/sys/fs/cgroup/cpu") / pc.cgroups_path.lstrip("/")
    for ancestor in (pod_dir.parent, pod_dir.parent.parent):
        budget = int((ancestor / "cpu.rt_runtime_us").read_text())
        print(f"evidence: {ancestor}/cpu.rt_runtime_us = {budget}")
        assert budget >= 5000


def kubelet_limits_refused_or_clamped(node, **run: Any) -> str:
    """Hostile: an annotation asking 64 CPUs / 512Gi over kubelet limits of 0.5 / 256Mi.
    Hard is refused naming both fields, soft runs with the kubelet's values; returns the
    refusal's text for the caller's runtime-specific checks."""
    with pytest.raises(node.Error) as err:
        node.run_pod("greedy", {"sla.nri.io/pod": GREEDY}, resources=KUBELET_LIMITS, **run)
    message = str(err.value)
    print("evidence: refused:", message)
    assert "cpu.limit: 64 exceeds the 0.5 CPUs the runtime granted" in message
    assert "memory.max: 512Gi exceeds the 256Mi the runtime granted" in message
    soft = node.run_pod(
        "greedy-soft",
        {"sla.nri.io/pod": "enforcement: soft\n" + GREEDY},
        resources=KUBELET_LIMITS,
        **run,
    )
    # The kernel holds the kubelet's values, not 64 CPUs / 512Gi.
    assert triple(node.cgroup(soft)) == POD_SLA_TRIPLE
    return message


def resize_below_the_sla_is_rechecked(node, plugin) -> None:
    """UpdateContainer (kubelet resize) against the new limits: never refused (the runtime
    would keep the old, larger limits), the SLA clamped to them in both modes; neither
    re-asserts the SLA above what Kubernetes now grants."""
    roomy = {
        "cpu_period": 100000,
        "cpu_quota": 100000,
        "cpu_shares": 1024,
        "memory_limit_in_bytes": 1 << 30,
    }
    hard = node.run_pod("resize-hard", {"sla.nri.io/pod": POD_SLA}, resources=roomy)
    soft = node.run_pod(
        "resize-soft", {"sla.nri.io/pod": "enforcement: soft\n" + POD_SLA}, resources=roomy
    )
    assert triple(node.cgroup(hard)) == POD_SLA_TRIPLE
    for pc in (hard, soft):
        node.update(pc, cpu_quota=25000, cpu_period=100000, memory=128 << 20)
        assert triple(node.cgroup(pc)) == (25000, 100000, 134217728)
    print(
        "evidence: plugin log:",
        *plugin.wait_output(
            r"update: sla.nri.io/pod: cpu.limit: 0.5 exceeds the 0.25 CPUs.*hard mode", count=1
        ),
    )
    plugin.wait_output(
        r"update: sla.nri.io/pod: cpu.limit: 0.5 exceeds the 0.25 CPUs.*"
        r"soft mode"
    )
