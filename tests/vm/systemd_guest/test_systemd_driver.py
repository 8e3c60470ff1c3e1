"""nri-sla's two paths under the systemd cgroup driver, and what `systemctl daemon-reload`
does to each (inside the systemd guest: systemd 252, runc 1.1.5, kernel 6.1).

Two kubelet-shaped containers get the same SLA, each in its own
`cri-containerd-<id>.scope` of a `kubepods-burstable-pod<uid>.slice`, started by
`runc --systemd-cgroup`:
* "runtime": the plugin's NRI adjustment in the spec's linux.resources, as containerd puts
  it there; runc hands these values to systemd as properties of the transient scope
  (CPUQuota=, MemoryMax=, MemoryHigh=) and writes the files;
* "hook": no resources in the spec; the packaged OCI hook (the createRuntime entry of
  /etc/nri-sla/base-runtime-spec.json) finds the scope and writes the files directly.
The tests run in file order: the second one reloads systemd.
"""

from __future__ import annotations

import pytest

from nri_plugin.config.values import NodeConfig
from nri_plugin.core.decision import decide
from nri_plugin.core.nodebuild import build_node
from nri_plugin.core.request import ContainerRequest
from nri_plugin.hookspec import oci_hooks
from nri_plugin.plugin.adjustment import build_adjustment

MIB = 1 << 20
SLA = (
    "cpu: {limit: 0.5, period: 50ms}\nnuma: {nodes: '0'}\n"
    "memory: {high: 96Mi, max: 128Mi}\nio:\n  weight: 300\n"
    "  max: [{device: /dev/vda, read-bps: 1Mi}]\n"
)
FILES = ["cpu.max", "cpuset.mems", "memory.max", "memory.high", "io.weight", "io.max"]
# What `systemctl daemon-reload` writes back into each container's scope (systemd 252,
# runc 1.1.5 and 1.4.3 alike): systemd re-applies the unit's own settings, and a file it
# manages that the unit has no setting for gets systemd's default. runc hands cpu.max,
# memory.max and memory.high from the spec to systemd as unit properties (CPUQuota=,
# CPUQuotaPeriodSec=, MemoryMax=, MemoryHigh=), but not io.weight from `unified`.
RESET_BY_DAEMON_RELOAD = {
    "runtime": {"io.weight": "default 100"},
    "hook": {
        "cpu.max": "max 100000",
        "memory.max": "max",
        "memory.high": "max",
        "io.weight": "default 100",
    },
}


def shipped_hook(timeout: int) -> dict:
    """The createRuntime hook `containerd-config --write` puts in the base runtime spec,
    with its time limits raised for the emulated machine: the shipped 5 s (hook) / 10 s
    (runtime) fit a real node (the hook takes well under a second there), not Python
    starting under TCG."""
    (hook,) = oci_hooks("createRuntime")["createRuntime"]
    args = list(hook["args"])
    args[args.index("--timeout") + 1] = str(timeout)
    return {"createRuntime": [{**hook, "args": args, "timeout": timeout + 20}]}


@pytest.fixture(scope="module")
def two_paths(package, systemd, tmp_path_factory):
    """{"runtime": KubeContainer, "hook": KubeContainer}, with the same SLA."""
    bundles = systemd.kube_bundles(tmp_path_factory.mktemp("bundle"))
    try:
        pod, ctr = bundles.pod_container("runtime", {"sla.nri.io/pod": SLA})
        node = build_node(NodeConfig(), detect=True)
        assert (node.cgroup_version, node.facts.driver) == (2, "systemd")
        decision = decide(
            node,
            ContainerRequest(
                dict(pod.annotations),
                ctr.name,
                namespace=pod.namespace,
                owner=ctr.id,
                nri_version="v0.12.0",
            ),
        )
        assert decision.outcome == "enforced", decision.error
        resources = bundles.bundle.oci_resources(build_adjustment(decision.plan))
        result, by_runtime = bundles.start(ctr, resources=resources)
        assert by_runtime is not None, result.stderr

        _pod, ctr = bundles.pod_container("hook")
        result, by_hook = bundles.start(
            ctr, annotations={**ctr.annotations, "sla.nri.io/pod": SLA}, hooks=shipped_hook(100)
        )
        assert by_hook is not None, result.stderr
        yield {"runtime": by_runtime, "hook": by_hook}
    finally:
        bundles.delete_all()


def test_hook_finds_the_scope_and_both_paths_agree(two_paths, first_disk, systemd):
    """The hook, run by runc at createRuntime, found the container's scope (systemd put
    it where the slice names say) and left exactly what runc applied from the spec."""
    for container in two_paths.values():
        pod_slice = container.cgroups_path.split(":")[0]
        assert container.cgroup.parts[-4:] == (
            "kubepods.slice",
            "kubepods-burstable.slice",
            pod_slice,
            container.scope,
        )
        unit = systemd.unit_properties(container.scope, "ActiveState", "Delegate")
        assert unit == {"ActiveState": "active", "Delegate": "yes"}
    by_runtime = two_paths["runtime"].values(FILES)
    by_hook = two_paths["hook"].values(FILES)
    assert (
        by_hook
        == by_runtime
        == {
            "cpu.max": "25000 50000",
            "cpuset.mems": "0",
            "memory.max": str(128 * MIB),
            "memory.high": str(96 * MIB),
            "io.weight": "default 300",
            "io.max": f"{first_disk} rbps={MIB} wbps=max riops=max wiops=max",
        }
    )


def test_daemon_reload_keeps_unit_properties_and_resets_direct_writes(two_paths, systemd):
    """What survives `systemctl daemon-reload` (documented in docs/testing-cgroup-v2.md
    and docs/install.md): systemd re-applies each scope's own settings to its cgroup.
    Values runc gave systemd as unit properties (the NRI path's CPU and memory) come back
    as they were; files written directly (the hook, the plugin's direct writes) or by runc
    alone (io.weight from `unified`) that systemd manages get systemd's default back.
    io.max and cpuset, which systemd writes only when a unit configures them, stay."""
    before = {name: c.values(FILES) for name, c in two_paths.items()}
    res = systemd.run(["systemctl", "daemon-reload"])
    assert res.returncode == 0, res.stderr
    after = {name: c.values(FILES) for name, c in two_paths.items()}
    for name, reset in RESET_BY_DAEMON_RELOAD.items():
        assert after[name] == {**before[name], **reset}, name
