"""nri-sla under a real CRI-O (+ conmon, runc, crictl): the same SLA through CRI-O's NRI
and through its hooks.d, plus what is CRI-O's own.

Each test starts a private CRI-O (conftest.py `crio`: NRI_SLA_CRIO and friends), creates
host-network pods with crictl and reads the container's cgroup files back. CRI-O's own:
its Configure carries no NRI version (1.36 vendors NRI v0.11), it copies every pod
annotation into the container's spec (a forged `applied` included), and it runs a hooks.d
`prestart` hook at createRuntime.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from nri_plugin.hookspec import hooks_d_document
from tests.e2e import e2e_sla_cases as cases
from tests.e2e.e2e_sla_cases import POD_SLA, triple

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
FORGED = '{"v":2,"path":"nri","cgroup_version":1,"enforcement":"hard","mac":"00"}'
NODE_CONFIG = """\
enforcement: hard
permissions:
  realtime: ["nri-e2e"]
cgroup:
  driver: cgroupfs
nri:
  reconnect-max-seconds: 1
metrics:
  address: ""
"""


def node_config(node) -> Path:
    config = node.base / "nri-sla.yaml"
    config.write_text(NODE_CONFIG + f"state-dir: {node.base / 'nri-sla-state'}\n")
    return config


@pytest.fixture
def crio_plugin(crio, plugins, sla_plugin_argv):
    argv = [
        *sla_plugin_argv,
        "--config",
        str(node_config(crio)),
        "--socket",
        str(crio.nri_sock),
        "--name",
        "nri-sla",
        "--index",
        "50",
        "--metrics-address",
        "",
    ]
    proc = plugins.start(argv, "nri-sla")
    crio.wait_plugin_synchronized("50-nri-sla")
    print("evidence: plugin log:", *proc.wait_output(r"registered as 50-nri-sla"))
    return proc


@pytest.fixture
def crio_hook(crio):
    """The packaged hooks.d file, its binary this checkout's nri-sla, its node config the
    test's; no plugin runs."""
    exe = Path(sys.executable).with_name("nri-sla")
    if not exe.exists():
        pytest.skip("no nri-sla executable beside this python (pip install -e .)")
    doc = hooks_d_document("prestart", binary=str(exe))
    assert doc["when"] == json.loads((REPO / "hooks" / "nri-sla-hook.json").read_text())["when"]
    doc["hook"]["args"] += ["--config", str(node_config(crio))]
    crio.install_hook(doc)
    return doc


# -- through NRI --------------------------------------------------------------------------


def test_nri_version_told_from_the_release(crio, crio_plugin):
    """CRI-O sends no NRI version: the plugin names the one its release vendors."""
    (line,) = crio_plugin.wait_output(r"registered as 50-nri-sla")
    if (crio.major, crio.minor) >= (1, 35):
        assert "NRI v0.11.0, cri-o" in line and "(release table)" in line
    assert "unversioned" not in line and "<= v0.9" not in line
    pc = crio.run_pod(
        "mpol",
        {"sla.nri.io/pod": "enforcement: soft\nnuma: {nodes: '0', memory-policy: interleave}\n"},
    )
    warnings = crio.spec_annotations(pc)["sla.nri.io/warnings"]
    print("evidence: warnings:", warnings)
    assert "older than" not in warnings and "NRI v0.1" in warnings


def test_nri_pod_sla_lands_in_real_cgroup(crio, crio_plugin):
    pc = crio.run_pod("web", {"sla.nri.io/pod": POD_SLA})
    assert triple(crio.cgroup(pc)) == (50000, 100000, 256 << 20)
    assert "sla.nri.io/applied" in crio.spec_annotations(pc)


def test_nri_refusal_reaches_crictl(crio, crio_plugin):
    with pytest.raises(crio.Error) as err:
        crio.run_pod("bad", {"sla.nri.io/pod": "memory: {max: lots}\n"})
    print("evidence: refused:", err.value)
    assert "sla.nri.io/pod" in str(err.value) and "memory.max" in str(err.value)


def test_nri_strips_a_forged_record(crio, crio_plugin):
    """CRI-O copies the pod's forged `applied` into the spec; the plugin's answer
    replaces it with its own record and the SLA is enforced."""
    pc = crio.run_pod("forger", {"sla.nri.io/pod": POD_SLA, "sla.nri.io/applied": FORGED})
    assert triple(crio.cgroup(pc)) == (50000, 100000, 256 << 20)
    assert crio.spec_annotations(pc)["sla.nri.io/applied"] != FORGED


def test_fail_closed_drop_in_requires_nri_sla(crio, plugins, sla_plugin_argv):
    """The packaged 51-nri-sla-fail-closed.conf (CRI-O >= 1.34): without nri-sla CRI-O
    refuses to create a container, the toleration annotation lets one through, and with
    nri-sla connected the SLA lands."""
    if (crio.major, crio.minor) < (1, 34):
        pytest.skip("NRI's default validator needs CRI-O 1.34 or later")
    crio.add_drop_in(REPO / "packaging" / "crio" / "51-nri-sla-fail-closed.conf")
    with pytest.raises(crio.Error) as err:
        crio.run_pod("unguarded", {"sla.nri.io/pod": POD_SLA})
    print("evidence: refused without nri-sla:", err.value)
    assert "nri-sla" in str(err.value)
    tolerated = crio.run_pod("tolerated", {"tolerate-missing-nri-plugins.noderesource.dev": "true"})
    assert crio.cgroup(tolerated).cpu_quota == -1
    argv = [
        *sla_plugin_argv,
        "--config",
        str(node_config(crio)),
        "--socket",
        str(crio.nri_sock),
        "--name",
        "nri-sla",
        "--index",
        "50",
        "--metrics-address",
        "",
    ]
    plugins.start(argv, "nri-sla")
    crio.wait_plugin_synchronized("50-nri-sla")
    pc = crio.run_pod("guarded", {"sla.nri.io/pod": POD_SLA})
    assert triple(crio.cgroup(pc)) == (50000, 100000, 256 << 20)


def test_nri_container_sla_overrides_pod_sla(crio, crio_plugin):
    cases.container_sla_overrides_pod_sla(crio)


def test_nri_soft_sla_direct_writes_land_at_start(crio, crio_plugin):
    cases.soft_sla_direct_writes_land(crio)


def test_nri_numa_nodes_bind_cpuset(crio, crio_plugin):
    cases.numa_nodes_bind_cpuset(crio)


def test_nri_rt_budget_lands_with_ancestors_raised(crio, crio_plugin):
    cases.rt_budget_lands_with_ancestors_raised(crio)


def test_nri_pod_raising_its_kubelet_limits_is_refused_or_clamped(crio, crio_plugin):
    message = cases.kubelet_limits_refused_or_clamped(crio)
    assert "crictl create" in message  # refused at CreateContainer, as under containerd


def test_nri_resize_below_the_sla_is_rechecked(crio, crio_plugin):
    cases.resize_below_the_sla_is_rechecked(crio, crio_plugin)


def test_nri_plugin_reconnects_after_crio_restart(crio, crio_plugin):
    before = crio.run_pod("before", {"sla.nri.io/pod": POD_SLA})
    crio.restart()  # SIGKILL: the plugin's connection drops mid-life, conmon survives
    crio.wait_plugin_synchronized("50-nri-sla", count=2, timeout=60)
    crio_plugin.wait_output(r"NRI connection lost")
    print(
        "evidence: plugin log:",
        *crio_plugin.wait_output(
            r"synchronized: 1 pods, 1 containers, 1 allocations rebuilt, 0 records ignored"
        ),
    )
    after = crio.run_pod(
        "after", {"sla.nri.io/pod": "cpu: {limit: 0.2, period: 50ms}\nmemory: {max: 128Mi}\n"}
    )
    assert triple(crio.cgroup(after)) == (10000, 50000, 128 << 20)
    assert triple(crio.cgroup(before)) == (50000, 100000, 256 << 20)


# -- through the hook (no plugin) -----------------------------------------------------------


def test_hook_pod_sla_lands_in_real_cgroup(crio, crio_hook):
    pc = crio.run_pod("web", {"sla.nri.io/pod": POD_SLA})
    assert triple(crio.cgroup(pc)) == (50000, 100000, 256 << 20)


def test_hook_prestart_runs_at_create_runtime(crio, crio_hook):
    """CRI-O writes the hooks.d `prestart` hook into the spec as createRuntime; the hook
    enforces there all the same."""
    pc = crio.run_pod("stage", {"sla.nri.io/pod": POD_SLA})
    hooks = pc.inspect["info"]["runtimeSpec"].get("hooks", {})
    print("evidence: spec hooks:", json.dumps(hooks))
    ours = [h for h in hooks.get("createRuntime", []) if h["path"] == crio_hook["hook"]["path"]]
    assert ours and not [
        h for h in hooks.get("prestart", []) if h["path"] == crio_hook["hook"]["path"]
    ]
    assert triple(crio.cgroup(pc)) == (50000, 100000, 256 << 20)


def test_hook_ignores_a_forged_record_and_enforces(crio, crio_hook):
    pc = crio.run_pod("forger", {"sla.nri.io/pod": POD_SLA, "sla.nri.io/applied": FORGED})
    assert crio.spec_annotations(pc)["sla.nri.io/applied"] == FORGED  # copied by CRI-O
    assert triple(crio.cgroup(pc)) == (50000, 100000, 256 << 20)


def test_hook_refusal_reaches_crictl(crio, crio_hook):
    with pytest.raises(crio.Error) as err:
        crio.run_pod("bad", {"sla.nri.io/pod": "memory: {max: lots}\n"})
    print("evidence: refused by the hook:", err.value)
    assert "memory.max" in str(err.value)


def test_hook_container_sla_overrides_pod_sla(crio, crio_hook):
    cases.container_sla_overrides_pod_sla(crio)


def test_hook_soft_sla_direct_writes_land_at_start(crio, crio_hook):
    """The hook runs after the spec is written: its soft warning cannot reach the spec's
    annotations (only the NRI path adds sla.nri.io/warnings); the writes land all the same."""
    cases.soft_sla_direct_writes_land(crio, warning_in_spec=False)


def test_hook_numa_nodes_bind_cpuset(crio, crio_hook):
    cases.numa_nodes_bind_cpuset(crio)


def test_hook_holds_the_sla_to_the_kubelet_limits(crio, crio_hook):
    message = cases.kubelet_limits_refused_or_clamped(crio)
    assert "crictl create" in message  # CRI-O runs the hook at createRuntime: runc create
