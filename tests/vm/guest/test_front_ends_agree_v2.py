"""The plugin and the OCI hook leave the same values in a real cgroup v2 hierarchy.

For each SLA: the plugin's adjustment put into config.json as containerd does and applied
by runc (BusyboxBundle.oci_resources), against the hook run by runc at createRuntime on a
spec without resources (BusyboxBundle.run_with_hook). The container prints its own
cgroup files; both must print the same. tests/hook/test_front_ends_agree.py does the same
on fake v1 and v2 trees with a wider table.
"""

from __future__ import annotations

import pytest

from nri_plugin.config.values import NodeConfig
from nri_plugin.core.decision import decide
from nri_plugin.core.nodebuild import build_node
from nri_plugin.core.request import ContainerRequest
from nri_plugin.plugin.adjustment import build_adjustment

FILES = [
    "cpu.max",
    "cpuset.cpus",
    "cpuset.mems",
    "memory.max",
    "memory.high",
    "io.max",
    "io.weight",
]
SLAS = {
    "cpu, memory": "cpu: {limit: 0.5, period: 50ms}\nmemory: {high: 48Mi, max: 64Mi}\n",
    "numa, io weight": "numa: {nodes: '0'}\ncpu: {limit: 1}\nio: {weight: 300}\n",
    "io.max one disk": "io:\n  max:\n    - {device: 'DISK', read-bps: 1Mi, write-iops: 300}\n",
}


@pytest.mark.parametrize("case", sorted(SLAS))
def test_plugin_and_hook_leave_the_same_cgroup_values(
    case, busybox_bundle, virtio_disk, read_files_script, sections, tmp_path
):
    sla = SLAS[case].replace("DISK", virtio_disk.majmin)
    node = build_node(NodeConfig(), detect=True)
    decision = decide(
        node,
        ContainerRequest(
            {"sla.nri.io/pod": sla},
            "app",
            namespace="default",
            owner="ctr-agree",
            nri_version="v0.12.0",
        ),
    )
    assert decision.outcome == "enforced", decision.error
    adjustment = build_adjustment(decision.plan)
    resources = busybox_bundle.oci_resources(adjustment)
    by_plugin = busybox_bundle.run(read_files_script(FILES), resources)
    assert by_plugin.rc == 0, by_plugin.stderr

    by_hook, log = busybox_bundle.run_with_hook(
        read_files_script(FILES), {"sla.nri.io/pod": sla}, tmp_path
    )
    assert by_hook.rc == 0, (by_hook.stderr, log)
    plugin_files, hook_files = sections(by_plugin.stdout), sections(by_hook.stdout)
    assert hook_files == plugin_files
    untouched = sections(busybox_bundle.run(read_files_script(FILES), {}).stdout)
    assert plugin_files != untouched, "the SLA changed nothing: the comparison proves nothing"
