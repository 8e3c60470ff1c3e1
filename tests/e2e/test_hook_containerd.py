"""The OCI hook fallback under a real containerd + runc, with no NRI plugin running.

containerd has no hooks.d: `nri-sla containerd-config --write` installs the hook through
a runtime handler's `base_runtime_spec` (this containerd's own default spec, from its
`ctr oci spec`, with the hook added) and passes the SLA annotations into the container
spec with `pod_annotations`. This test sets up exactly that as a second
runtime handler and checks that the hook alone puts the SLA into the container's cgroup.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from nri_plugin.commands.basespec import node_default_spec, with_hook
from nri_plugin.commands.containerd_dropin import ContainerdVersion
from tests.e2e.e2e_config import shipped_settings, toml_value
from tests.e2e.e2e_sla_cases import GREEDY, KUBELET_LIMITS, POD_SLA

pytestmark = pytest.mark.e2e


def nri_sla_executable() -> Path:
    exe = Path(sys.executable).with_name("nri-sla")
    if exe.exists():
        return exe
    found = shutil.which("nri-sla")
    if found is None:
        pytest.skip("no nri-sla executable beside this python or on PATH (pip install -e .)")
    return Path(found)


@pytest.fixture
def hooked(cluster):
    """A runtime handler "hooked" set up as the packaging sets up the fallback."""
    default = node_default_spec(
        str(cluster.bins.ctr), ContainerdVersion(cluster.major, cluster.minor)
    )
    base_spec = cluster.base / "base-runtime-spec.json"
    base_spec.write_text(with_hook(default, str(nri_sla_executable())))
    cluster.add_runtime_handler(
        "hooked",
        (
            f'base_runtime_spec = "{base_spec}"\n'
            f"pod_annotations = {toml_value(shipped_settings(cluster.major)[1])}\n"
        ),
    )
    return "hooked"


def test_hook_alone_enforces_pod_sla(cluster, hooked):
    pc = cluster.run_pod("hooked", {"sla.nri.io/pod": POD_SLA}, runtime=hooked)
    values = cluster.cgroup(pc)
    assert (values.cpu_quota, values.cpu_period, values.memory_limit) == (50000, 100000, 268435456)
    plain = cluster.run_pod("plain", {})  # default handler: no hook, nothing applied
    assert cluster.cgroup(plain).cpu_quota == -1


def test_hook_refuses_invalid_sla_in_hard_mode(cluster, hooked):
    with pytest.raises(cluster.Error) as err:
        cluster.run_pod("bad", {"sla.nri.io/pod": "memory: {max: lots}\n"}, runtime=hooked)
    message = str(err.value)
    print("evidence: refused by the hook:", message)
    assert "crictl start" in message  # runc create runs the hook at StartContainer
    assert "sla.nri.io/pod" in message
    assert "memory.max" in message


# KUBELET_LIMITS: containerd writes them into config.json's linux.resources, where the
# hook reads them.
def test_hook_holds_the_sla_to_the_kubelet_limits(cluster, hooked):
    with pytest.raises(cluster.Error) as err:
        cluster.run_pod(
            "greedy", {"sla.nri.io/pod": GREEDY}, runtime=hooked, resources=KUBELET_LIMITS
        )
    message = str(err.value)
    print("evidence: refused by the hook:", message)
    assert "crictl start" in message
    assert "cpu.limit: 64 exceeds the 0.5 CPUs the runtime granted" in message
    assert "memory.max: 512Gi exceeds the 256Mi the runtime granted" in message
    soft = cluster.run_pod(
        "greedy-soft",
        {"sla.nri.io/pod": "enforcement: soft\n" + GREEDY},
        runtime=hooked,
        resources=KUBELET_LIMITS,
    )
    values = cluster.cgroup(soft)
    assert (values.cpu_quota, values.cpu_period, values.memory_limit) == (50000, 100000, 268435456)
