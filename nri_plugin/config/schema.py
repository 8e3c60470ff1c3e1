"""What each key of the node config file accepts: one converter per kind of value (each
refuses with a `FieldProblem` naming what is allowed) and the table of keys, section by
section, to the `NodeConfig` attribute each sets. A new key is a field in `values`, a row
here and a row in docs/config.md's tables (tests/docs checks them against `KEY_ATTRIBUTES`).
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable

from nri_plugin.config.values import (
    Cap,
    CgroupConfig,
    CpuConfig,
    DevicePluginConfig,
    EventsConfig,
    GpuConfig,
    HookConfig,
    LogConfig,
    MetricsConfig,
    NriConfig,
    Permissions,
    PodCaps,
    StatusConfig,
    WatchConfig,
)
from nri_plugin.sla import ENFORCEMENT_MODES
from nri_plugin.text.fields import FieldProblem, choice, parse_id_list, show

GPU_INJECTIONS = ("cdi", "env", "devices")
MIG_STRATEGIES = ("none", "single", "mixed")  # NVIDIA's device plugin's names
GPU_INVENTORIES = ("auto", "nvml", "sysfs")  # or an absolute path to a snapshot file
CGROUP_DRIVERS = ("auto", "cgroupfs", "systemd")
MAX_LISTED = 32  # entries in a list of CDI kinds or resource names
LOG_FORMATS = ("text", "json")
LOG_LEVELS = ("debug", "info", "warning", "error")
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
    # containerd takes exactly two digits and pads nothing; YAML reads 50 as a number,
    # and 07 as 7, which is not two digits: quoted, it is.
    if isinstance(value, int) and not isinstance(value, bool) and 10 <= value <= 99:
        return str(value)
    if isinstance(value, str) and re.fullmatch(r"[0-9]{2}", value, re.ASCII):
        return value
    quote = "; an index below 10 must be quoted, e.g. \"07\"" \
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 10 else ""
    raise FieldProblem(f"must be two digits from \"00\" to \"99\", got {show(value)}{quote}")


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


def _auto_bool(value: object) -> bool | None:
    if value == "auto":
        return None
    if not isinstance(value, bool):
        raise FieldProblem(f"must be auto, true or false, got {show(value)}")
    return value


def _queue_size(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 100_000:
        raise FieldProblem(f"must be a count of events from 1 to 100000, got {show(value)}")
    return value


def _qps(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) \
            or not math.isfinite(value) or not 0.01 <= value <= 1000:
        raise FieldProblem(f"must be a number of requests per second from 0.01 to 1000, got "
                           f"{show(value)}")
    return float(value)


def _burst(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 10_000:
        raise FieldProblem(f"must be a count of requests from 1 to 10000, got {show(value)}")
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
Schema = dict[str, tuple[str, Callable[[object], object]]]
TOP: Schema = {
    "enforcement": ("enforcement", choice(ENFORCEMENT_MODES)),
    "annotation-prefix": ("annotation_prefix", _prefix),
    "rt-budget": ("rt_budget", _share),
    "reserved-cpus": ("reserved_cpus", _cpu_list),
    "state-dir": ("state_dir", _abs_path),
}
SECTIONS: dict[str, tuple[type, Schema]] = {
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
    "cpu": (CpuConfig, {"exclusive-full-cores": ("exclusive_full_cores", _bool)}),
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
        "mig-strategy": ("mig_strategy", choice(MIG_STRATEGIES)),
        "metrics-address": ("metrics_address", _address),
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
    "events": (EventsConfig, {
        "enabled": ("enabled", _auto_bool),
        "service-account": ("service_account", _abs_path),
        "queue-size": ("queue_size", _queue_size),
        "qps": ("qps", _qps),
        "burst": ("burst", _burst),
    }),
    "log": (LogConfig, {
        "format": ("format", choice(LOG_FORMATS)),
        "level": ("level", choice(LOG_LEVELS)),
    }),
}
TOP_KEYS: tuple[str, ...] = (*TOP, *SECTIONS)
# Every dotted key as written in the file -> its attributes on NodeConfig.
KEY_ATTRIBUTES: dict[str, tuple[str, ...]] = {
    **{key: (attribute,) for key, (attribute, _) in TOP.items()},
    **{f"{section}.{key}": (section.replace("-", "_"), attribute)
       for section, (_, schema) in SECTIONS.items() for key, (attribute, _) in schema.items()},
}


