"""The OCI hook's base runtime spec: the spec this node's containerd gives a container
when it has no base spec, with only the hook added.

Without a base spec, CRI starts from containerd's default spec (what `ctr oci spec` of
the same containerd prints) and then drops its default security settings: rlimits,
AppArmor profile, seccomp (CRI's WithoutDefaultSecuritySettings, in 1.7 and 2.x alike);
with one, it keeps the file's. So the base spec is `ctr oci spec` without those three.

containerd keeps a base spec's root, capabilities, rlimits and mounts, so a spec from
anywhere else (runc's `runc spec` template: read-only root, 3 capabilities) would change
every pod of the handler, with an SLA or without.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import nri_plugin
from nri_plugin.commands.containerd_dropin import ContainerdVersion, parse_version
from nri_plugin.errors import Unavailable
from nri_plugin.hookspec import DEFAULT_BINARY, DEFAULT_STAGE, oci_hooks


def find_ctr(containerd: str | None) -> str | None:
    """The ctr of the installed containerd: beside its binary, else on PATH."""
    if containerd:
        beside = Path(containerd).with_name("ctr")
        if beside.is_file() and os.access(beside, os.X_OK):
            return str(beside)
    return shutil.which("ctr")


def _run(argv: list[str]) -> str:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=30, check=True).stdout
    except subprocess.CalledProcessError as exc:
        raise Unavailable(
            f"`{' '.join(argv)}` failed: {(exc.stderr or '').strip()[:200]}"
        ) from None
    except (OSError, subprocess.SubprocessError) as exc:
        raise Unavailable(f"cannot run `{' '.join(argv)}`: {exc}") from None


def node_default_spec(ctr: str, version: ContainerdVersion) -> dict[str, Any]:
    """`ctr oci spec` of the installed containerd, checked to be of its version."""
    ctr_version = parse_version(_run([ctr, "--version"]), f"{ctr} --version")
    if ctr_version != version:
        raise Unavailable(
            f"{ctr} is from containerd {ctr_version}, not {version}: its "
            f"default spec is not this containerd's (give --ctr)"
        )
    try:
        spec = json.loads(_run([ctr, "oci", "spec"]))
    except json.JSONDecodeError as exc:
        raise Unavailable(f"`{ctr} oci spec` printed no JSON: {exc}") from None
    if not isinstance(spec, dict) or not isinstance(spec.get("process"), dict):
        raise Unavailable(f"`{ctr} oci spec` printed no OCI spec")
    return spec


def as_cri_uses_it(default: dict[str, Any]) -> dict[str, Any]:
    """`ctr oci spec` as CRI uses it for a container without a base spec."""
    spec = dict(default)
    spec["process"] = {
        k: v for k, v in default["process"].items() if k not in ("rlimits", "apparmorProfile")
    }
    if isinstance(default.get("linux"), dict):
        spec["linux"] = {k: v for k, v in default["linux"].items() if k != "seccomp"}
    return spec


def with_hook(default: dict[str, Any], binary: str) -> str:
    """The base spec's text: `ctr oci spec` as CRI uses it, with only the hook added."""
    spec = as_cri_uses_it(default)
    spec["hooks"] = oci_hooks(DEFAULT_STAGE, binary)
    return json.dumps(spec, indent=2) + "\n"


def hook_binary() -> str:
    """The nri-sla that runs this code, as the hook should run it: the host-hook tree's
    launcher (<dir>/bin/nri-sla beside <dir>/current/site/nri_plugin), the package's
    /usr/bin/nri-sla, or the one beside this interpreter (a virtualenv)."""
    package = Path(nri_plugin.__file__).resolve().parent
    if package.parent.name == "site" and package.parents[1].name.startswith("runtime-"):
        return str(package.parents[2] / "bin" / "nri-sla")
    beside = Path(sys.executable).with_name("nri-sla")
    return str(beside) if beside.is_file() else DEFAULT_BINARY
