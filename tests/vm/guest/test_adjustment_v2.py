"""The plugin's answer on a real cgroup v2 node: the ContainerAdjustment nri-sla builds for
an SLA, put into config.json the way containerd does (linux.resources from the adjusted
LinuxResources, swap = memory limit), applied by runc and read back by the container."""

from __future__ import annotations

from nri_plugin.config.values import NodeConfig
from nri_plugin.core.decision import decide
from nri_plugin.core.nodebuild import build_node
from nri_plugin.core.request import ContainerRequest
from nri_plugin.plugin.adjustment import build_adjustment

MIB = 1 << 20
FILES = [
    "cpu.max",
    "cpuset.cpus",
    "cpuset.mems",
    "memory.max",
    "memory.high",
    "io.max",
    "io.weight",
]


def test_plugin_adjustment_applied_by_runc(
    busybox_bundle, virtio_disk, read_files_script, sections
):
    node = build_node(NodeConfig(), detect=True)
    assert node.cgroup_version == 2
    sla = (
        "cpu: {limit: 0.5, period: 50ms}\nnuma: {nodes: '0'}\n"
        "memory: {high: 48Mi, max: 64Mi}\nio:\n  weight: 300\n"
        "  max:\n    - {device: /dev/vda, read-bps: 1Mi, write-iops: 300}\n"
    )
    decision = decide(
        node,
        ContainerRequest(
            {"sla.nri.io/pod": sla},
            "app",
            namespace="default",
            owner="ctr-guest",
            nri_version="v0.12.0",
        ),
    )
    assert decision.outcome == "enforced", decision.error
    adjustment = build_adjustment(decision.plan)
    resources = busybox_bundle.oci_resources(adjustment)
    assert set(resources["unified"]) == {"memory.high", "io.weight", "io.max"}

    res = busybox_bundle.run(read_files_script(FILES), resources)
    assert res.rc == 0, res.stderr
    got = sections(res.stdout)
    dev = virtio_disk.majmin
    assert got["cpu.max"] == "25000 50000"
    assert got["cpuset.mems"] == "0"
    assert got["cpuset.cpus"] == decision.plan.cpus
    assert got["memory.max"] == str(64 * MIB)
    assert got["memory.high"] == str(48 * MIB)
    assert got["io.max"] == f"{dev} rbps={MIB} wbps=max riops=max wiops=300"
    assert got["io.weight"].splitlines()[0] == "default 300"


def test_rt_never_reaches_runc_on_v2():
    """runc drops cpu.realtime* on v2 silently, so nri-sla must refuse (hard) or warn
    (soft) itself: the adjustment never carries RT on a v2 node."""
    node = build_node(NodeConfig(), detect=True)
    rt = "cpu: {limit: 1, rt-runtime: 5ms}"
    hard = decide(
        node, ContainerRequest({"sla.nri.io/pod": rt}, "app", namespace="default", owner="a")
    )
    assert hard.outcome == "refused" and "cgroup v2" in str(hard.error)
    soft = decide(
        node,
        ContainerRequest(
            {"sla.nri.io/pod": rt, "sla.nri.io/enforcement": "soft"},
            "app",
            namespace="default",
            owner="b",
        ),
    )
    adjustment = build_adjustment(soft.plan)
    assert not adjustment.linux.resources.cpu.HasField("realtime_runtime")
    warnings = node.annotations_for(soft.plan, "nri", "b")["sla.nri.io/warnings"]
    assert "cpu.rt-runtime" in warnings
