"""The containerd keys nri-sla owns, and the drop-in file that sets them for `imports`.

nri-sla sets as few keys as it needs, each at the value containerd's defaults do not
give, and keeps every other key of the node's config (docs/install.md lists them):

* NRI on (`disable = false`; containerd 1.7 has it off by default);
* the runc handler's `pod_annotations`: what the node passes on already, then the SLA
  keys (containerd replaces a list an imported file sets, so the drop-in carries both);
* `base_runtime_spec`: the node's own default spec with the hook added
  (nri_plugin.commands.basespec), only when that file was made;
* asked for only, as they can stop a node: the fail-closed validator
  (`required_plugins`, containerd >= 2.2: the pods that start before nri-sla must carry
  the toleration annotation first) and `SystemdCgroup` (must match the kubelet's).

containerd 2.x merges an imported file key by key, 1.7 by whole plugin section (its
drop-in would reset the CRI plugin's other keys), so on 1.7 the keys are patched into the
main config instead (nri_plugin.commands.containerd_patch).
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from typing import Any

import tomlkit

from nri_plugin.errors import InvalidInput
from nri_plugin.sla import DEFAULT_PREFIX, ENFORCEMENT_ALIAS

NRI_PLUGIN = "io.containerd.nri.v1.nri"
# The CRI plugin that holds the runtime handlers, by config version (containerd's
# version.ConfigVersion: 2 in 1.7, 3 in 2.0-2.2, 4 from 2.3; 3 -> 4 moved no key of ours).
CRI_RUNTIME_PLUGIN = {
    2: "io.containerd.grpc.v1.cri",
    3: "io.containerd.cri.v1.runtime",
    4: "io.containerd.cri.v1.runtime",
}
DEFAULT_DROPIN = "/etc/containerd/conf.d/nri-sla.toml"
DEFAULT_MAIN_CONFIG = "/etc/containerd/config.toml"
DEFAULT_BASE_SPEC = "/etc/nri-sla/base-runtime-spec.json"
# The first line of every drop-in this module writes: what the package's maintainer
# scripts look for before they take a drop-in out (never someone else's file).
MARKER = "# Written by `nri-sla containerd-config`"
PASSED_ANNOTATIONS = (
    f"{DEFAULT_PREFIX}/pod",
    f"{DEFAULT_PREFIX}/container.*",
    f"{DEFAULT_PREFIX}/enforcement",
    ENFORCEMENT_ALIAS,
)
# containerd 2.2 reads a fixed key; later releases the one configured here.
TOLERATION_KEYS = (
    "tolerate-missing-plugins.nri.io",
    "tolerate-missing-nri-plugins.noderesource.dev",
)
# Who must tolerate a missing nri-sla before the validator is turned on: they start
# before the nri-sla pod can, or the node never gets a network for it.
PODS_TO_TOLERATE = (
    "the CNI's pods (calico-node, cilium, flannel, ...)",
    "kube-proxy",
    "static pods (kube-apiserver, etcd, ... in the kubelet's manifest dir)",
    "the nri-sla DaemonSet itself (it carries both keys)",
)
_VERSION = re.compile(r"\bv?(\d+)\.(\d+)(?:\.\d+)?")

KeyPath = tuple[str, ...]


@dataclass(frozen=True)
class ContainerdVersion:
    major: int
    minor: int

    @property
    def config_version(self) -> int:
        """The config version this containerd writes (`containerd config default`)."""
        if self.major < 2:
            return 2
        return 4 if self.minor >= 3 else 3

    @property
    def merges_imports_by_key(self) -> bool:
        return self.major >= 2

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
        raise InvalidInput(f"{source}: no containerd version (x.y) in {text.strip()[:200]!r}")
    version = ContainerdVersion(int(match.group(1)), int(match.group(2)))
    if (version.major, version.minor) < (1, 7) or version.major > 2:
        raise InvalidInput(f"{source}: containerd {version} is not supported: NRI needs 1.7 or 2.x")
    return version


@dataclass(frozen=True)
class DropinOptions:
    version: ContainerdVersion
    config_version: int  # the main config's: containerd refuses a newer drop-in
    pod_annotations: tuple[str, ...] = ()  # what the node's runc handler passes on now
    fail_closed: bool = False  # the default validator requiring nri-sla (>= 2.2)
    systemd_cgroup: bool | None = None  # None: leave the runc option alone
    base_spec: str | None = None  # the hook's base spec, when made


def config_version_of(main_config: dict[str, Any] | None, version: ContainerdVersion) -> int:
    """The version nri-sla's keys are written in: the main config's, else containerd's."""
    if not main_config or "version" not in main_config:
        return version.config_version
    found = main_config["version"]
    if found not in CRI_RUNTIME_PLUGIN:
        raise InvalidInput(
            f"containerd's config has version = {found!r}: nri-sla writes "
            f"config versions 2 to 4 (`containerd config migrate` converts)"
        )
    return int(found)


def runc_path(config_version: int) -> KeyPath:
    return ("plugins", CRI_RUNTIME_PLUGIN[config_version], "containerd", "runtimes", "runc")


def lookup(doc: dict[str, Any], path: KeyPath) -> Any:
    for key in path:
        if not isinstance(doc, dict) or key not in doc:
            return None
        doc = doc[key]
    return doc


def existing_pod_annotations(
    main_config: dict[str, Any] | None, config_version: int
) -> tuple[str, ...]:
    found = lookup(main_config or {}, (*runc_path(config_version), "pod_annotations"))
    if found is None:
        return ()
    if not isinstance(found, list) or not all(isinstance(v, str) for v in found):
        raise InvalidInput(
            "containerd's config: the runc handler's pod_annotations is not a list of strings"
        )
    return tuple(found)


def owned_keys(options: DropinOptions) -> list[tuple[KeyPath, Any]]:
    """(key path, value) of every key nri-sla sets, in the config's version."""
    version = options.version
    if options.fail_closed and not version.has_validator:
        raise InvalidInput(
            f"--fail-closed: containerd {version} has no NRI default validator (2.2 and "
            f"later); the OCI hook in the base runtime spec is the fallback there"
        )
    nri: KeyPath = ("plugins", NRI_PLUGIN)
    runc = runc_path(options.config_version)
    passed = list(options.pod_annotations)
    passed += [key for key in PASSED_ANNOTATIONS if key not in passed]
    keys: list[tuple[KeyPath, Any]] = [((*nri, "disable"), False)]
    if options.fail_closed:
        validator = (*nri, "default_validator")
        keys += [
            ((*validator, "enable"), True),
            ((*validator, "required_plugins"), ["nri-sla"]),
            ((*validator, "tolerate_missing_plugins_annotation"), TOLERATION_KEYS[1]),
        ]
    keys.append(((*runc, "pod_annotations"), passed))
    if options.base_spec is not None:
        keys.append(((*runc, "base_runtime_spec"), options.base_spec))
    if options.systemd_cgroup is not None:
        keys.append(((*runc, "options", "SystemdCgroup"), options.systemd_cgroup))
    return keys


def set_key(doc: Any, path: KeyPath, value: Any) -> None:
    """Set one key in a tomlkit document, making the tables on the way as [a.b.c]."""
    table = doc
    for key in path[:-1]:
        if key not in table:
            table[key] = tomlkit.table(is_super_table=True)
        table = table[key]
    table[path[-1]] = value


def render(options: DropinOptions) -> str:
    """The drop-in's text: valid TOML of the main config's version."""
    keys = owned_keys(options)
    doc = tomlkit.document()
    doc.add(
        tomlkit.comment(
            MARKER[2:] + f" for containerd {options.version} (config "
            f"version {options.config_version})."
        )
    )
    doc.add(
        tomlkit.comment(
            "Removing the nri-sla package takes it out; by hand: "
            "`nri-sla containerd-config --remove`."
        )
    )
    if options.fail_closed:
        doc.add(
            tomlkit.comment(
                f"Fail closed: these pods need {TOLERATION_KEYS[1]}: "
                f'"true" first ({TOLERATION_KEYS[0]} on containerd 2.2): '
                + "; ".join(PODS_TO_TOLERATE)
            )
        )
    doc["version"] = options.config_version
    for path, value in keys:
        set_key(doc, path, value)
    return tomlkit.dumps(doc)


def imported_by(main_config: dict[str, Any], dropin: str) -> bool:
    """Whether the parsed main config's `imports` (paths or globs) names the drop-in."""
    imports = main_config.get("imports", [])
    return isinstance(imports, list) and any(
        isinstance(pattern, str) and fnmatch.fnmatchcase(dropin, pattern) for pattern in imports
    )


def written_by_nri_sla(text: str) -> bool:
    return text.startswith(MARKER)
