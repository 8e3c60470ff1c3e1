"""The hook's base spec is the node's own: `ctr oci spec` of the installed containerd
(the spec CRI starts every container from when it has no base spec) with only the hook
added. Run against the real ctr of the e2e binaries (NRI_SLA_CONTAINERD, docs/e2e.md)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from nri_plugin.cli import main
from nri_plugin.commands.basespec import hook_binary
from nri_plugin.commands.containerd_dropin import parse_version
from nri_plugin.hookspec import oci_hooks


@pytest.fixture
def ctr() -> Path:
    containerd = os.environ.get("NRI_SLA_CONTAINERD")
    if not containerd:
        pytest.skip("NRI_SLA_CONTAINERD is not set: no real containerd and ctr (docs/e2e.md)")
    found = Path(os.environ.get("NRI_SLA_CTR") or Path(containerd).with_name("ctr"))
    if not found.is_file():
        pytest.skip(f"no ctr at {found}")
    return found


def test_base_spec_is_ctr_oci_spec_plus_the_hook(capsys, tmp_path, ctr):
    version = parse_version(
        subprocess.run([str(ctr), "--version"], capture_output=True, text=True, check=True).stdout,
        "ctr",
    )
    default = json.loads(
        subprocess.run([str(ctr), "oci", "spec"], capture_output=True, text=True, check=True).stdout
    )
    spec_path = tmp_path / "base-runtime-spec.json"
    dropin = tmp_path / "conf.d" / "nri-sla.toml"
    status = main(
        [
            "containerd-config",
            "--containerd-version",
            str(version),
            "--ctr",
            str(ctr),
            "--write",
            str(dropin),
            "--base-runtime-spec",
            str(spec_path),
            "--main-config",
            str(tmp_path / "config.toml"),
        ]
    )
    assert status == 0, capsys.readouterr().err
    spec = json.loads(spec_path.read_text())
    assert spec.pop("hooks") == oci_hooks("createRuntime", hook_binary())
    # CRI drops the default spec's rlimits, AppArmor profile and seccomp when it has no
    # base spec: so does nri-sla's, and nothing else moves
    assert "rlimits" in default["process"] and "rlimits" not in spec["process"]
    dropped = default["process"].pop("rlimits")
    default["process"].pop("apparmorProfile", None)
    default.get("linux", {}).pop("seccomp", None)
    assert spec == default  # root read-write, containerd's 14 capabilities
    # 2.x: the drop-in names it; 1.7: the main config (patched in place) does
    named = dropin if version.major >= 2 else tmp_path / "config.toml"
    assert f'base_runtime_spec = "{spec_path}"' in named.read_text()
    print(
        f"evidence: containerd {version}: {len(default['process']['capabilities']['bounding'])}"
        f" capabilities, root readonly={default['root'].get('readonly', False)}, "
        f"ctr's rlimits left out as CRI does: {dropped}"
    )


def test_a_ctr_of_another_version_makes_no_spec(capsys, tmp_path, ctr):
    version = parse_version(
        subprocess.run([str(ctr), "--version"], capture_output=True, text=True, check=True).stdout,
        "ctr",
    )
    other = "1.7" if version.major == 2 else "2.2"
    status = main(
        [
            "containerd-config",
            "--containerd-version",
            other,
            "--ctr",
            str(ctr),
            "--main-config",
            str(tmp_path / "config.toml"),
            "--write",
            str(tmp_path / "nri-sla.toml"),
            "--base-runtime-spec",
            str(tmp_path / "spec.json"),
        ]
    )
    err = capsys.readouterr().err
    assert status == 0 and not (tmp_path / "spec.json").exists()
    assert (
        f"no base_runtime_spec, the OCI hook fallback stays off: {ctr} is from "
        f"containerd {version}, not {other}"
    ) in err
