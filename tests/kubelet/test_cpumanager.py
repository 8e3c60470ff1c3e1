"""The kubelet's CPU manager checkpoint: `nri-sla run` warns unless its policy is none."""

from __future__ import annotations

import json

import pytest

from nri_plugin.kubelet.cpumanager import policy_warning

# What a kubelet with the static policy writes (k8s.io/kubernetes cpumanager/state).
STATIC = {
    "policyName": "static",
    "defaultCpuSet": "0,3-63",
    "entries": {"5a1b": {"app": "1-2"}},
    "checksum": 1234,
}


def test_static_policy_is_a_warning_naming_the_file(tmp_path):
    path = tmp_path / "cpu_manager_state"
    path.write_text(json.dumps(STATIC))
    warning = policy_warning(str(path))
    assert warning is not None
    assert warning.startswith(
        f"the kubelet's CPU manager policy is 'static' ({path}); nri-sla needs 'none'"
    )
    assert "cpuManagerPolicy: none" in warning


@pytest.mark.parametrize(
    "content",
    [
        json.dumps({**STATIC, "policyName": "none", "entries": {}}),
        "not json",
        "[1, 2]",
        json.dumps({"policyName": 7}),
        b"\xff\xfe",
    ],
)
def test_none_or_unreadable_says_nothing(tmp_path, content):
    path = tmp_path / "cpu_manager_state"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    assert policy_warning(str(path)) is None
    assert policy_warning(str(tmp_path / "absent")) is None
