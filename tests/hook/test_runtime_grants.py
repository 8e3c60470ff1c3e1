"""The OCI hook holds an SLA to what the runtime set in config.json (linux.resources, the
kubelet's values) exactly as the plugin does: hard refuses naming both values, soft
clamps and warns, an unlimited runtime caps nothing."""

from __future__ import annotations

import pytest

from nri_plugin.errors import EXIT_OK, EXIT_REFUSED

CTR = "/kubepods/pod-a/ctr-1"
NAME = "io.kubernetes.cri.container-name"
HOSTILE = "cpu:\n  limit: 64\nmemory:\n  max: 512Gi\n"
# What containerd writes for limits {cpu: 500m, memory: 256Mi}, requests {cpu: 500m}.
KUBELET = {"cpu": {"shares": 512, "quota": 50000, "period": 100000}, "memory": {"limit": 256 << 20}}


@pytest.fixture
def v2(tmp_path, h):
    root = tmp_path / "cg"
    cdir = h.fake_v2_tree(root, CTR)
    config = tmp_path / "config.yaml"
    config.write_text("enforcement: hard\n")

    def run(annotations, resources=KUBELET):
        bundle = h.write_bundle(
            tmp_path / "bundle", {NAME: "app", **annotations}, CTR, resources=resources
        )
        return h.run_inproc(
            h.state_json(bundle), config=str(config), cgroup_root=str(root), cache_dir="off"
        )

    return cdir, run


def test_hook_refuses_an_sla_above_config_json_limits(v2):
    cdir, run = v2
    out = run({"sla.nri.io/pod": HOSTILE})
    assert out.exit_code == EXIT_REFUSED
    assert out.lines == [
        "nri-sla hook: sla.nri.io/pod: cpu.limit: 64 exceeds the 0.5 CPUs the runtime granted "
        "(the pod's limit, quota 50000us per 100000us); allowed: at most 0.5 (also: "
        "sla.nri.io/pod: memory.max: 512Gi exceeds the 256Mi the runtime granted (the pod's "
        "limit); allowed: at most 256Mi)"
    ]
    assert (cdir / "cpu.max").read_text().strip() == "max 100000"  # nothing written
    assert (cdir / "memory.max").read_text().strip() == "max"


def test_hook_soft_mode_clamps_to_config_json_limits(v2):
    cdir, run = v2
    out = run({"sla.nri.io/pod": "enforcement: soft\n" + HOSTILE})
    assert out.exit_code == EXIT_OK
    assert (cdir / "cpu.max").read_text().strip() == "50000 100000"
    assert (cdir / "memory.max").read_text().strip() == str(256 << 20)
    assert any("memory.max: 512Gi exceeds the 256Mi" in line for line in out.lines)


def test_hook_unlimited_runtime_values_cap_nothing(v2):
    cdir, run = v2
    out = run(
        {"sla.nri.io/pod": HOSTILE},
        resources={"cpu": {"quota": -1, "period": 100000}, "memory": {"limit": -1}},
    )
    assert out.exit_code == EXIT_OK, out.lines
    assert (cdir / "cpu.max").read_text().strip() == "6400000 100000"


def test_hook_exclusive_cpus_within_the_request(v2):
    _cdir, run = v2
    out = run({"sla.nri.io/pod": "cpu:\n  exclusive: 2\n"})
    assert out.exit_code == EXIT_REFUSED
    assert (
        "cpu.exclusive: 2 exceeds the CPU request the runtime granted (500m: 0 whole "
        "CPUs); allowed: at most 0"
    ) in out.lines[0]
