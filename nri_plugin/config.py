"""The node policy file, ``/etc/nri-sla/config.yaml``, as a frozen :class:`NodeConfig`.

Every field is optional; docs/config.md and examples/config.yaml describe each one. The
file is read with the same hardened YAML reader as annotations (no tags, anchors or
duplicate keys) and checked strictly: an unknown key, a wrong type or a value out of range
is a :class:`ConfigError` naming the file, the field path and what is allowed, e.g.
``/etc/nri-sla/config.yaml: cgroup.driver must be one of auto, cgroupfs, systemd, got
cgroupv2``.
"""

from __future__ import annotations

import fnmatch
import math
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from nri_plugin.errors import InvalidInput, ProgrammingError
from nri_plugin.sla import DEFAULT_PREFIX, ENFORCEMENT_MODES
from nri_plugin.text.fields import (
    FieldProblem,
    choice,
    key_text,
    parse_id_list,
    show,
    unknown_key_message,
)
from nri_plugin.text.safeyaml import YamlProblem, load

DEFAULT_PATH = "/etc/nri-sla/config.yaml"
DEFAULT_STATE_DIR = "/var/lib/nri-sla"
MAX_CONFIG_BYTES = 1024 * 1024
PERMISSIONS = ("realtime", "exclusive-cpus", "gpus", "io-max", "exceed-runtime-limits")
GPU_INJECTIONS = ("cdi", "env", "devices")
GPU_INVENTORIES = ("auto", "nvml", "sysfs")  # or an absolute path to a snapshot file
CGROUP_DRIVERS = ("auto", "cgroupfs", "systemd")
# The CDI kinds a GPU grant is read from: the NVIDIA container toolkit's and the NVIDIA
# device plugin's (cdi-cri strategy), whole GPUs and MIG devices.
DEFAULT_GRANT_CDI_KINDS = ("nvidia.com/gpu", "nvidia.com/mig",
                           "k8s.device-plugin.nvidia.com/gpu",
                           "k8s.device-plugin.nvidia.com/mig")
DEFAULT_GRANT_RESOURCES = ("nvidia.com/gpu", "nvidia.com/mig-*")
DEFAULT_PODRESOURCES_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
MAX_LISTED = 32  # entries in a list of CDI kinds or resource names
# Keys that issue 18 removed: nri-sla no longer chooses GPUs in the NRI plugin or the
# hook, so there is nothing left for them to allow or cap. An old file that still sets
# one is refused with this line (a silently ignored security setting would mislead).
REMOVED_KEYS = {
    "permissions.ungranted-gpus": "was removed: nri-sla no longer gives GPUs to containers "
                                  "(a container opens exactly its device plugin's grant); "
                                  "delete the key",
    "pod-caps.gpus": "was removed: the kubelet counts GPUs (resources.limits nvidia.com/gpu);"
                     " delete the key",
}
LOG_FORMATS = ("text", "json")
LOG_LEVELS = ("debug", "info", "warning", "error")


class ConfigError(InvalidInput, ValueError):
    """A problem in the node config: ``source`` (file), ``field`` (dotted path), message."""

    def __init__(self, source: str, field: str, message: str) -> None:
        self.source = source
        self.field = field
        self.message = message
        super().__init__(f"{source}: {field} {message}" if field else f"{source}: {message}")

    def __reduce__(self):
        return (ConfigError, (self.source, self.field, self.message))


@dataclass(frozen=True, slots=True)
class Permissions:
    """Namespaces (names or shell globs) allowed to request each privileged feature.

    Safe defaults: real-time CPU time can starve a node, so nobody gets it unless listed;
    exclusive CPUs, a `gpu` section (a requirement on the device plugin's grant) and io.max
    are open to all namespaces, within what Kubernetes granted the container
    (nri_plugin.plan.grants). Going beyond that grant only for the namespaces listed here.
    """

    realtime: tuple[str, ...] = ()
    exclusive_cpus: tuple[str, ...] = ("*",)
    gpus: tuple[str, ...] = ("*",)
    io_max: tuple[str, ...] = ("*",)
    # CPU quota, memory.max and exclusive CPUs above the runtime's values.
    exceed_runtime_limits: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Cap:
    """A per-pod cap: a count, or a percentage of what the node has."""

    value: float
    percent: bool = False

    def of(self, node_total: int) -> int:
        """The cap as a count on a node with `node_total` of the resource."""
        if self.percent:
            return int(node_total * self.value // 100)
        return int(self.value)

    def __str__(self) -> str:
        number = f"{self.value:g}"
        return f"{number}%" if self.percent else number


@dataclass(frozen=True, slots=True)
class PodCaps:
    """The node config's `pod-caps` section: the most one pod's containers together may
    hold, whatever the runtime granted (a second line behind Kubernetes' accounting: soft
    mode, namespaces allowed to exceed their grant). GPUs have no cap here: the kubelet
    counts them, and a container opens exactly its grant."""

    exclusive_cpus: Cap = Cap(50, percent=True)  # of the CPUs not in reserved-cpus
    rt_share: float = 0.1  # rt-runtime / rt-period summed over the pod's containers


@dataclass(frozen=True, slots=True)
class GpuConfig:
    """The node config's `gpu` section."""

    injection: str = "cdi"  # cdi | env | devices
    inventory: str = "auto"  # auto | nvml | sysfs | /absolute/path/to/snapshot.yaml
    rescan_interval: float = 60.0  # s between inventory rescans by the plugin; 0: never
    health_interval: float = 10.0  # s between GPU health polls (NVML XIDs); 0: never
    # CDI kinds ("vendor/class") whose devices are a GPU grant (runtime_gpus.resolve_grant)
    grant_cdi_kinds: tuple[str, ...] = DEFAULT_GRANT_CDI_KINDS
    # the kubelet's PodResources socket; "" turns it off
    podresources_socket: str = DEFAULT_PODRESOURCES_SOCKET
    # resource names (a trailing * matches any suffix) whose PodResources devices are GPUs
    grant_resources: tuple[str, ...] = DEFAULT_GRANT_RESOURCES


@dataclass(frozen=True, slots=True)
class DevicePluginConfig:
    """The node config's `device-plugin` section: `nri-sla device-plugin`, the node's GPU
    device plugin for the kubelet (docs/device-plugin.md)."""

    resource_name: str = "nvidia.com/gpu"  # the extended resource pods ask for
    socket_dir: str = "/var/lib/kubelet/device-plugins"  # the kubelet's kubelet.sock is here


@dataclass(frozen=True, slots=True)
class CgroupConfig:
    """The node config's `cgroup` section."""

    root: str = "/sys/fs/cgroup"
    driver: str = "auto"  # auto | cgroupfs | systemd
    version: int | None = None  # None: detect; 1 or 2 to force


@dataclass(frozen=True, slots=True)
class NriConfig:
    """The node config's `nri` section."""

    socket: str = "/var/run/nri/nri.sock"
    plugin_name: str = "nri-sla"
    plugin_index: str = "50"  # two digits; NRI orders plugins by it
    reconnect_max_seconds: float = 5.0  # nri.service.ServiceOptions.backoff_max says why


@dataclass(frozen=True, slots=True)
class HookConfig:
    """The node config's `hook` section."""

    inject: bool = False  # ask NRI to add the verification OCI hook to containers


@dataclass(frozen=True, slots=True)
class MetricsConfig:
    """The node config's `metrics` section."""

    address: str = "127.0.0.1:9810"  # host:port; "" disables the metrics endpoint
    # host:port of the probe listener (/healthz, /readyz only; nri_plugin.ops.health); "" off
    health_address: str = ""

    @property
    def enabled(self) -> bool:
        return bool(self.address)

    @property
    def host(self) -> str:
        return self.address.rpartition(":")[0].strip("[]")

    @property
    def port(self) -> int:
        return int(self.address.rpartition(":")[2]) if self.address else 0


@dataclass(frozen=True, slots=True)
class WatchConfig:
    """The node config's `watch` section: the drift watch and the compliance signals."""

    interval: float = 30.0  # seconds between passes; 0 turns the watch off
    repair_backoff_max: float = 600.0  # longest wait before retrying a failed repair
    metrics_containers: int = 1000  # containers with per-container series, at most


@dataclass(frozen=True, slots=True)
class StatusConfig:
    """The node config's `status` section: the root-only socket `nri-sla status` reads."""

    socket: str = "/run/nri-sla/status.sock"  # "" turns it off


@dataclass(frozen=True, slots=True)
class LogConfig:
    """The node config's `log` section."""

    format: str = "text"  # text | json
    level: str = "info"  # debug | info | warning | error


@dataclass(frozen=True, slots=True)
class NodeConfig:
    """The validated node config (/etc/nri-sla/config.yaml)."""

    enforcement: str = "hard"
    annotation_prefix: str = DEFAULT_PREFIX
    permissions: Permissions = field(default_factory=Permissions)
    pod_caps: PodCaps = field(default_factory=PodCaps)
    rt_budget: float = 0.5  # share of the kernel's RT budget SLA containers may take
    reserved_cpus: tuple[int, ...] = ()  # never handed out as exclusive CPUs
    # Where nri-sla keeps what must outlive it: the key that authenticates its records.
    state_dir: str = DEFAULT_STATE_DIR
    gpu: GpuConfig = field(default_factory=GpuConfig)
    device_plugin: DevicePluginConfig = field(default_factory=DevicePluginConfig)
    cgroup: CgroupConfig = field(default_factory=CgroupConfig)
    nri: NriConfig = field(default_factory=NriConfig)
    hook: HookConfig = field(default_factory=HookConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    watch: WatchConfig = field(default_factory=WatchConfig)
    status: StatusConfig = field(default_factory=StatusConfig)
    log: LogConfig = field(default_factory=LogConfig)
    source: str = "<defaults>"  # the file it was read from

    def allows(self, permission: str, namespace: str) -> bool:
        """Whether pods in ``namespace`` may use ``permission`` (one of PERMISSIONS)."""
        if permission not in PERMISSIONS:
            raise ProgrammingError(f"unknown permission {permission!r}; one of "
                                   f"{', '.join(PERMISSIONS)}")
        patterns = getattr(self.permissions, permission.replace("-", "_"))
        return any(fnmatch.fnmatchcase(namespace, p) for p in patterns)


# -- converters ----------------------------------------------------------------------------

def _bool(value: object) -> bool:
    if not isinstance(value, bool):
        raise FieldProblem(f"must be true or false, got {show(value)}")
    return value


def _abs_path(value: object) -> str:
    if not isinstance(value, str) or not value.startswith("/") or "\x00" in value:
        raise FieldProblem(f"must be an absolute path, got {show(value)}")
    return os.path.normpath(value)


# Field patterns are compiled on first use (`re`'s own cache, ASCII): most configs set few
# of these fields, and every cold run of the OCI hook imports this module.
_DNS_SUBDOMAIN = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
_NAMESPACE_GLOB = r"[a-z0-9*?\[\]!-]{1,63}"


def _fullmatch(pattern: str, text: str) -> re.Match[str] | None:
    return re.fullmatch(pattern, text, re.ASCII)


def _prefix(value: object) -> str:
    if not isinstance(value, str) or len(value) > 253 or not _fullmatch(_DNS_SUBDOMAIN, value):
        raise FieldProblem(f"must be a DNS subdomain like sla.nri.io (lowercase, no '/'), "
                      f"got {show(value)}")
    return value


def _namespaces(value: object) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise FieldProblem(f"must be a list of namespace names or globs like [kube-system, "
                      f"'team-*'], got {show(value)}")
    for index, item in enumerate(value):
        if not isinstance(item, str) or not _fullmatch(_NAMESPACE_GLOB, item):
            raise FieldProblem(f"must be a namespace name or glob (lowercase letters, digits, '-',"
                          f" and * ? [ ]), got {show(item)}", f"[{index}]")
    return tuple(value)


def _cap(value: object) -> Cap:
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 65536:
        return Cap(value)
    if isinstance(value, str) and value.endswith("%"):
        number = value[:-1]
        if number.isascii() and number.replace(".", "", 1).isdigit() \
                and 0 <= float(number) <= 100:
            return Cap(float(number), percent=True)
    raise FieldProblem(f"must be a count like 4 or a percentage of the node like \"50%\", got "
                  f"{show(value)}")


def _share(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) \
            or not math.isfinite(value) or not 0 <= value <= 1:
        raise FieldProblem(f"must be a fraction from 0 to 1 (e.g. 0.25), got {show(value)}")
    return float(value)


def _cpu_list(value: object) -> tuple[int, ...]:
    if value == "" or value == []:
        return ()
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        value = str(value)
    if isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool)
                                       and v >= 0 for v in value):
        value = ",".join(str(v) for v in value)
    if not isinstance(value, str):
        raise FieldProblem(f"must be a CPU list like \"0-1\" or \"0,2\", got {show(value)}")
    return parse_id_list(value, "a CPU list", 65535)


def _inventory(value: object) -> str:
    if isinstance(value, str) and value in GPU_INVENTORIES:
        return value
    if isinstance(value, str) and value.startswith("/"):
        return _abs_path(value)
    raise FieldProblem(f"must be one of {', '.join(GPU_INVENTORIES)} or an absolute path to an "
                  f"inventory snapshot, got {show(value)}")


_RESOURCE_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"


def _resource_name(value: object) -> str:
    # An extended resource the kubelet accepts from a device plugin: <domain>/<name>,
    # outside the kubernetes.io domains Kubernetes keeps for itself.
    domain, _, name = value.partition("/") if isinstance(value, str) else ("", "", "")
    if not (len(domain) <= 253 and _fullmatch(_DNS_SUBDOMAIN, domain)
            and _fullmatch(_RESOURCE_NAME, name)) \
            or domain == "kubernetes.io" or domain.endswith(".kubernetes.io"):
        raise FieldProblem(f"must be an extended resource name like nvidia.com/gpu (a DNS "
                      f"domain outside kubernetes.io, '/', a name of up to 63 letters, "
                      f"digits, '-', '_', '.'), got {show(value)}")
    return value


def _cgroup_version(value: object) -> int | None:
    if value == "auto":
        return None
    if type(value) in (int, str) and value in (1, 2, "1", "2"):
        return int(value)
    raise FieldProblem(f"must be one of auto, 1, 2, got {show(value)}")


_PLUGIN_NAME = r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}"


def _plugin_name(value: object) -> str:
    if not isinstance(value, str) or not _fullmatch(_PLUGIN_NAME, value):
        raise FieldProblem(f"must be a name of letters, digits, '.', '_' and '-', got "
                      f"{show(value)}")
    return value


def _plugin_index(value: object) -> str:
    # NRI takes the index as a two-digit string; YAML may have read 50 as a number.
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 99:
        return f"{value:02d}"
    if isinstance(value, str) and re.fullmatch(r"[0-9]{2}", value, re.ASCII):
        return value
    raise FieldProblem(f"must be two digits from \"00\" to \"99\", got {show(value)}")


def _rescan(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) \
            or not math.isfinite(value) or not (value == 0 or 1 <= value <= 86400):
        raise FieldProblem(f"must be 0 (never) or a number of seconds from 1 to 86400, got "
                      f"{show(value)}")
    return float(value)


def _reconnect(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) \
            or not math.isfinite(value) or not 0 < value <= 3600:
        raise FieldProblem(f"must be a number of seconds above 0 and at most 3600, got "
                      f"{show(value)}")
    return float(value)


_HOST_PORT = r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]*):([0-9]{1,5})"


def _address(value: object) -> str:
    if value == "":
        return ""
    m = _fullmatch(_HOST_PORT, value) if isinstance(value, str) else None
    if m is None or not 1 <= int(m.group(2)) <= 65535:
        raise FieldProblem(f"must be host:port like 127.0.0.1:9810 or [::1]:9810 (port 1..65535),"
                      f" or \"\" to disable, got {show(value)}")
    return value


def _interval(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) \
            or not math.isfinite(value) or not (value == 0 or 1 <= value <= 3600):
        raise FieldProblem(f"must be 0 (off) or a number of seconds from 1 to 3600, got "
                      f"{show(value)}")
    return float(value)


def _backoff(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) \
            or not math.isfinite(value) or not 1 <= value <= 86400:
        raise FieldProblem(f"must be a number of seconds from 1 to 86400, got {show(value)}")
    return float(value)


def _series_containers(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 100_000:
        raise FieldProblem(f"must be a count of containers from 0 to 100000, got {show(value)}")
    return value


def _socket(value: object) -> str:
    return "" if value == "" else _abs_path(value)


_CDI_KIND = (r"[A-Za-z0-9]([A-Za-z0-9.-]{0,62}[A-Za-z0-9])?"
             r"/[A-Za-z0-9]([A-Za-z0-9_.-]{0,62}[A-Za-z0-9])?")
_RESOURCE = (r"[A-Za-z0-9]([A-Za-z0-9.-]{0,62}[A-Za-z0-9])?"
             r"/[A-Za-z0-9]([A-Za-z0-9_.-]{0,62}[A-Za-z0-9*])?")


def _names(pattern: str, what: str, example: str) -> Callable[[object],
                                                                          tuple[str, ...]]:
    def check(value: object) -> tuple[str, ...]:
        if not isinstance(value, list) or len(value) > MAX_LISTED:
            raise FieldProblem(f"must be a list of at most {MAX_LISTED} {what} like [{example}], "
                          f"got {show(value)}")
        for index, item in enumerate(value):
            if not isinstance(item, str) or not _fullmatch(pattern, item):
                raise FieldProblem(f"must be a {what} like {example}, got {show(item)}",
                              f"[{index}]")
        return tuple(value)
    return check


_cdi_kinds = _names(_CDI_KIND, "CDI kind (vendor/class)", "nvidia.com/gpu")
_resources = _names(_RESOURCE, "resource name (domain/name, a trailing * for any suffix)",
                    "nvidia.com/mig-*")


# section -> field -> (dataclass attribute, converter); "" section = top level
_Schema = dict[str, tuple[str, Callable[[object], object]]]
_TOP: _Schema = {
    "enforcement": ("enforcement", choice(ENFORCEMENT_MODES)),
    "annotation-prefix": ("annotation_prefix", _prefix),
    "rt-budget": ("rt_budget", _share),
    "reserved-cpus": ("reserved_cpus", _cpu_list),
    "state-dir": ("state_dir", _abs_path),
}
_SECTIONS: dict[str, tuple[type, _Schema]] = {
    "permissions": (Permissions, {
        "realtime": ("realtime", _namespaces),
        "exclusive-cpus": ("exclusive_cpus", _namespaces),
        "gpus": ("gpus", _namespaces),
        "io-max": ("io_max", _namespaces),
        "exceed-runtime-limits": ("exceed_runtime_limits", _namespaces),
    }),
    "pod-caps": (PodCaps, {
        "exclusive-cpus": ("exclusive_cpus", _cap),
        "rt-share": ("rt_share", _share),
    }),
    "gpu": (GpuConfig, {
        "injection": ("injection", choice(GPU_INJECTIONS)),
        "inventory": ("inventory", _inventory),
        "rescan-interval": ("rescan_interval", _rescan),
        "health-interval": ("health_interval", _rescan),
        "grant-cdi-kinds": ("grant_cdi_kinds", _cdi_kinds),
        "podresources-socket": ("podresources_socket", _socket),
        "grant-resources": ("grant_resources", _resources),
    }),
    "device-plugin": (DevicePluginConfig, {
        "resource-name": ("resource_name", _resource_name),
        "socket-dir": ("socket_dir", _abs_path),
    }),
    "cgroup": (CgroupConfig, {
        "root": ("root", _abs_path),
        "driver": ("driver", choice(CGROUP_DRIVERS)),
        "version": ("version", _cgroup_version),
    }),
    "nri": (NriConfig, {
        "socket": ("socket", _abs_path),
        "plugin-name": ("plugin_name", _plugin_name),
        "plugin-index": ("plugin_index", _plugin_index),
        "reconnect-max-seconds": ("reconnect_max_seconds", _reconnect),
    }),
    "hook": (HookConfig, {"inject": ("inject", _bool)}),
    "metrics": (MetricsConfig, {"address": ("address", _address),
                                "health-address": ("health_address", _address)}),
    "watch": (WatchConfig, {
        "interval-seconds": ("interval", _interval),
        "repair-backoff-max-seconds": ("repair_backoff_max", _backoff),
        "metrics-containers": ("metrics_containers", _series_containers),
    }),
    "status": (StatusConfig, {"socket": ("socket", _socket)}),
    "log": (LogConfig, {
        "format": ("format", choice(LOG_FORMATS)),
        "level": ("level", choice(LOG_LEVELS)),
    }),
}
TOP_KEYS: tuple[str, ...] = (*_TOP, *_SECTIONS)
# Every dotted key as written in the file -> its attributes on NodeConfig.
KEY_ATTRIBUTES: dict[str, tuple[str, ...]] = {
    **{key: (attribute,) for key, (attribute, _) in _TOP.items()},
    **{f"{section}.{key}": (section.replace("-", "_"), attribute)
       for section, (_, schema) in _SECTIONS.items() for key, (attribute, _) in schema.items()},
}


def _fields(source: str, data: Mapping, schema: _Schema, parent: str,
            errors: list[ConfigError]) -> dict[str, object]:
    values: dict[str, object] = {}
    for key, raw in data.items():
        path = f"{parent}.{key_text(key)}" if parent else key_text(key)
        if key in _SECTIONS and not parent:
            continue
        if path in REMOVED_KEYS:
            errors.append(ConfigError(source, path, REMOVED_KEYS[path]))
            continue
        if key not in schema:
            errors.append(ConfigError(source, path, unknown_key_message(
                key, tuple(schema) if parent else TOP_KEYS, parent)))
            continue
        if raw is None:  # "key:" with no value keeps the default
            continue
        attribute, convert = schema[key]
        try:
            values[attribute] = convert(raw)
        except FieldProblem as exc:
            errors.append(ConfigError(source, path + exc.sub, exc.message))
    return values


def check_config(text: str, source: str = "<config>") -> tuple[NodeConfig | None,
                                                               list[ConfigError]]:
    """The config in the text and every problem found, each with its field path (the
    config is None when there is a problem). Empty text gives all defaults."""
    try:
        data = load(text, max_bytes=MAX_CONFIG_BYTES, max_depth=8)
    except YamlProblem as exc:
        return None, [ConfigError(source, exc.path, exc.message)]
    if data is None:
        return NodeConfig(source=source), []
    if not isinstance(data, Mapping):
        return None, [ConfigError(source, "", f"must be a YAML mapping of settings, got "
                                              f"{show(data)}")]
    errors: list[ConfigError] = []
    top = _fields(source, data, _TOP, "", errors)
    for name, (cls, schema) in _SECTIONS.items():
        section = data.get(name)
        if section is None:
            continue
        if not isinstance(section, Mapping):
            errors.append(ConfigError(source, name, f"must be a mapping with keys "
                                                    f"{', '.join(schema)}, got {show(section)}"))
            continue
        top[name.replace("-", "_")] = cls(**_fields(source, section, schema, name, errors))
    return (None, errors) if errors else (NodeConfig(source=source, **top), [])


def parse_config(text: str, source: str = "<config>") -> NodeConfig:
    """Parse the text of a node config file. Empty text gives all defaults."""
    config, errors = check_config(text, source)
    if len(errors) == 1:
        raise errors[0]
    if errors:  # one error carrying every problem, each with its field path
        rest = "; ".join(str(e).removeprefix(f"{source}: ") for e in errors[1:])
        raise ConfigError(source, errors[0].field, f"{errors[0].message}; {rest}")
    assert config is not None
    return config


def read_config_text(path: str) -> str:
    """The text of a config file that must exist (at most MAX_CONFIG_BYTES + 1 read)."""
    try:
        with open(path, encoding="utf-8") as f:
            return f.read(MAX_CONFIG_BYTES + 1)
    except FileNotFoundError:
        raise ConfigError(path, "", "does not exist (give an existing file, or no "
                                    "--config for the defaults)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(path, "", f"cannot be read: {exc}") from None


def load_config(path: str | None = None) -> NodeConfig:
    """Read the node config. ``None`` reads DEFAULT_PATH when it exists, else defaults;
    an explicitly given path must exist."""
    if path is None:
        if not os.path.exists(DEFAULT_PATH):
            return NodeConfig()
        path = DEFAULT_PATH
    return parse_config(read_config_text(path), path)
