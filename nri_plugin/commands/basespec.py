"""The OCI hook's base runtime spec: the spec this node's containerd gives a container
when it has no base spec (what `ctr oci spec` of the same containerd prints: root
read-write, its default capabilities and rlimits), with only the hook added.

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
        return subprocess.run(argv, capture_output=True, text=True, timeout=30,
                              check=True).stdout
    except subprocess.CalledProcessError as exc:
        raise Unavailable(f"`{' '.join(argv)}` failed: "
                          f"{(exc.stderr or '').strip()[:200]}") from None
    except (OSError, subprocess.SubprocessError) as exc:
        raise Unavailable(f"cannot run `{' '.join(argv)}`: {exc}") from None


def node_default_spec(ctr: str, version: ContainerdVersion) -> dict[str, Any]:
    """`ctr oci spec` of the installed containerd, checked to be of its version."""
    ctr_version = parse_version(_run([ctr, "--version"]), f"{ctr} --version")
    if ctr_version != version:
        raise Unavailable(f"{ctr} is from containerd {ctr_version}, not {version}: its "
                          f"default spec is not this containerd's (give --ctr)")
    try:
        spec = json.loads(_run([ctr, "oci", "spec"]))
    except json.JSONDecodeError as exc:
        raise Unavailable(f"`{ctr} oci spec` printed no JSON: {exc}") from None
    if not isinstance(spec, dict) or not isinstance(spec.get("process"), dict):
        raise Unavailable(f"`{ctr} oci spec` printed no OCI spec")
    return spec


def with_hook(default: dict[str, Any], binary: str) -> str:
    """The base spec's text: `default` with only the hook added."""
    spec = dict(default)
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
