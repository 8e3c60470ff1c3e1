"""The containerd settings nri-sla needs, as a drop-in file for containerd's `imports`.

The facts come from the shipped examples (config.toml.example for 2.x, config version 3;
packaging/containerd/config-1.7.toml.example for 1.7, config version 2); a test keeps
the two in step. What can break a node is only written when asked:

* the fail-closed validator (`required_plugins`, containerd >= 2.2): no container starts
  while nri-sla is not registered, so the pods that start before it (CNI, kube-proxy,
  static pods) must carry the toleration annotation first;
* `SystemdCgroup`: it must match the kubelet's cgroupDriver, or no pod starts;
* `base_runtime_spec`: containerd refuses to create any container when the file it names
  is missing, so it is only written when the hook's base spec is installed.
"""

from __future__ import annotations

import fnmatch
import json
import re
from dataclasses import dataclass

from nri_plugin.errors import InvalidInput
from nri_plugin.sla import DEFAULT_PREFIX, ENFORCEMENT_ALIAS

NRI_PLUGIN = "io.containerd.nri.v1.nri"
# The CRI plugin that holds the runtime handlers, by config version.
CRI_RUNTIME_PLUGIN = {2: "io.containerd.grpc.v1.cri", 3: "io.containerd.cri.v1.runtime"}
DEFAULT_DROPIN = "/etc/containerd/conf.d/nri-sla.toml"
DEFAULT_MAIN_CONFIG = "/etc/containerd/config.toml"
DEFAULT_BASE_SPEC = "/etc/nri-sla/base-runtime-spec.json"
# The first line of every drop-in this module writes: what the package's maintainer
# scripts look for before they take a drop-in out (never someone else's file).
MARKER = "# Written by `nri-sla containerd-config`"
PASSED_ANNOTATIONS = (f"{DEFAULT_PREFIX}/pod", f"{DEFAULT_PREFIX}/container.*",
                      f"{DEFAULT_PREFIX}/enforcement", ENFORCEMENT_ALIAS)
# containerd 2.2 reads a fixed key; later releases the one configured here.
TOLERATION_KEYS = ("tolerate-missing-plugins.nri.io",
                   "tolerate-missing-nri-plugins.noderesource.dev")
# Who must tolerate a missing nri-sla before the validator is turned on: they start
# before the nri-sla pod can, or the node never gets a network for it.
PODS_TO_TOLERATE = ("the CNI's pods (calico-node, cilium, flannel, ...)", "kube-proxy",
                    "static pods (kube-apiserver, etcd, ... in the kubelet's manifest dir)",
                    "the nri-sla DaemonSet itself (it carries both keys)")
_VERSION = re.compile(r"\bv?(\d+)\.(\d+)(?:\.\d+)?")


@dataclass(frozen=True)
class ContainerdVersion:
    major: int
    minor: int

    @property
    def config_version(self) -> int:
        return 3 if self.major >= 2 else 2

    @property
    def has_validator(self) -> bool:
        return (self.major, self.minor) >= (2, 2)

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}"


def parse_version(text: str, source: str) -> ContainerdVersion:
    """The version in `containerd --version` output ("containerd containerd.io 1.7.27 ..."
    or "... github.com/containerd/containerd/v2 v2.1.4 ...") or a plain "2.2"."""
    # the module path's "/v2" is no version: take the first x.y
    match = _VERSION.search(text)
    if match is None:
        raise InvalidInput(f"{source}: no containerd version (x.y) in "
                           f"{text.strip()[:200]!r}")
    version = ContainerdVersion(int(match.group(1)), int(match.group(2)))
    if (version.major, version.minor) < (1, 7) or version.major > 2:
        raise InvalidInput(f"{source}: containerd {version} is not supported: "
                           f"NRI needs 1.7 or 2.x")
    return version


@dataclass(frozen=True)
class DropinOptions:
    version: ContainerdVersion
    fail_closed: bool = False  # the default validator requiring nri-sla (>= 2.2)
    systemd_cgroup: bool | None = None  # None: leave the runc option alone
    base_spec: str | None = None  # the hook's base spec, when installed


def _string(value: str) -> str:
    return json.dumps(value)  # a TOML basic string for these ASCII values


def _strings(values: tuple[str, ...]) -> str:
    return "[" + ", ".join(_string(v) for v in values) + "]"


def render(options: DropinOptions) -> str:
    """The drop-in's text: valid TOML of the version's config format."""
    version = options.version
    if options.fail_closed and not version.has_validator:
        raise InvalidInput(
            f"--fail-closed: containerd {version} has no NRI default validator (2.2 and "
            f"later); the OCI hook in the base runtime spec is the fallback there")
    runc = f'plugins."{CRI_RUNTIME_PLUGIN[version.config_version]}".containerd.runtimes.runc'
    lines = [MARKER + f" for containerd {version} (config version "
                      f"{version.config_version}).",
             "# Removing the nri-sla package takes it out; by hand: delete it, restart containerd.",
             f"version = {version.config_version}", "",
             f'[plugins."{NRI_PLUGIN}"]',
             "  disable = false",
             "  disable_connections = false",
             '  socket_path = "/var/run/nri/nri.sock"',
             '  plugin_path = "/opt/nri/plugins"',
             '  plugin_config_path = "/etc/nri/conf.d"',
             '  plugin_registration_timeout = "5s"',
             '  plugin_request_timeout = "2s"']
    if options.fail_closed:
        lines += ["",
                  "# Fail closed: no container starts while nri-sla is not registered.",
                  f"# These pods need the annotation {TOLERATION_KEYS[1]}: \"true\"",
                  f"# first ({TOLERATION_KEYS[0]} on containerd 2.2):",
                  *(f"#   {pod}" for pod in PODS_TO_TOLERATE),
                  f'[plugins."{NRI_PLUGIN}".default_validator]',
                  "  enable = true",
                  '  required_plugins = ["nri-sla"]',
                  f"  tolerate_missing_plugins_annotation = {_string(TOLERATION_KEYS[1])}"]
    lines += ["", f"[{runc}]",
              '  runtime_type = "io.containerd.runc.v2"',
              "  # the SLA annotations reach each container's OCI spec (the hook reads them)",
              f"  pod_annotations = {_strings(PASSED_ANNOTATIONS)}"]
    if options.base_spec is not None:
        lines.append(f"  base_runtime_spec = {_string(options.base_spec)}")
    if options.systemd_cgroup is not None:
        lines += ["", f"[{runc}.options]",
                  "  # must match the kubelet's cgroupDriver",
                  f"  SystemdCgroup = {str(options.systemd_cgroup).lower()}"]
    return "\n".join(lines) + "\n"


def imported_by(main_config: dict, dropin: str) -> bool:
    """Whether the parsed main config's `imports` (paths or globs) names the drop-in."""
    imports = main_config.get("imports", [])
    return isinstance(imports, list) and any(
        isinstance(pattern, str) and fnmatch.fnmatchcase(dropin, pattern)
        for pattern in imports)


def written_by_nri_sla(text: str) -> bool:
    return text.startswith(MARKER)
