"""What each key of the node config file accepts: one converter per kind of value, each
refusing with a `FieldProblem` that says what is allowed, and `key`, which declares a
dataclass field of `values` a config key (its converter, whether a SIGHUP applies it, its
row in docs/config.md).
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable

from nri_plugin.config.cap import Cap
from nri_plugin.text.errors import FieldProblem
from nri_plugin.text.fields import parse_id_list, show

TYPE_CHECKING = False  # `typing` costs the OCI hook's cold run; only checkers need it
if TYPE_CHECKING:
    from typing import Literal, TypeAlias

    from nri_plugin.ops.event import LogFormat

    # The enumerated settings, as the code passes them on; each tuple below lists its
    # alias's values at run time (the errors and docs/config.md name them).
    GpuInjectionMode: TypeAlias = Literal["cdi", "env", "devices"]
    MigStrategy: TypeAlias = Literal["none", "single", "mixed"]
    CgroupDriverSetting: TypeAlias = Literal["auto", "cgroupfs", "systemd"]
    LogLevel: TypeAlias = Literal["debug", "info", "warning", "error"]

GPU_INJECTIONS: tuple[GpuInjectionMode, ...] = ("cdi", "env", "devices")
MIG_STRATEGIES: tuple[MigStrategy, ...] = ("none", "single", "mixed")  # NVIDIA's plugin's
GPU_INVENTORIES = ("auto", "nvml", "sysfs")  # or an absolute path to a snapshot file
CGROUP_DRIVERS: tuple[CgroupDriverSetting, ...] = ("auto", "cgroupfs", "systemd")
MAX_LISTED = 32  # entries in a list of CDI kinds or resource names
LOG_FORMATS: tuple[LogFormat, ...] = ("text", "json")
LOG_LEVELS: tuple[LogLevel, ...] = ("debug", "info", "warning", "error")


# -- converters ----------------------------------------------------------------------------


def flag(value: object) -> bool:
    if not isinstance(value, bool):
        raise FieldProblem(f"must be true or false, got {show(value)}")
    return value


def abs_path(value: object) -> str:
    if not isinstance(value, str) or not value.startswith("/") or "\x00" in value:
        raise FieldProblem(f"must be an absolute path, got {show(value)}")
    return os.path.normpath(value)


# Field patterns are compiled on first use (`re`'s own cache, ASCII): most configs set few
# of these fields, and every cold run of the OCI hook imports this module.
_DNS_SUBDOMAIN = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
_NAMESPACE_GLOB = r"[a-z0-9*?\[\]!-]{1,63}"


def _fullmatch(pattern: str, text: str) -> re.Match[str] | None:
    return re.fullmatch(pattern, text, re.ASCII)


def prefix(value: object) -> str:
    if not isinstance(value, str) or len(value) > 253 or not _fullmatch(_DNS_SUBDOMAIN, value):
        raise FieldProblem(
            f"must be a DNS subdomain like sla.nri.io (lowercase, no '/'), got {show(value)}"
        )
    return value


def namespaces(value: object) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise FieldProblem(
            f"must be a list of namespace names or globs like [kube-system, "
            f"'team-*'], got {show(value)}"
        )
    for index, item in enumerate(value):
        if not isinstance(item, str) or not _fullmatch(_NAMESPACE_GLOB, item):
            raise FieldProblem(
                f"must be a namespace name or glob (lowercase letters, digits, '-',"
                f" and * ? [ ]), got {show(item)}",
                f"[{index}]",
            )
    return tuple(value)


def cap(value: object) -> Cap:
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 65536:
        return Cap(value)
    if isinstance(value, str) and value.endswith("%"):
        number = value[:-1]
        if number.isascii() and number.replace(".", "", 1).isdigit() and 0 <= float(number) <= 100:
            return Cap(float(number), percent=True)
    raise FieldProblem(
        f'must be a count like 4 or a percentage of the node like "50%", got {show(value)}'
    )


def share(value: object) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or not 0 <= value <= 1
    ):
        raise FieldProblem(f"must be a fraction from 0 to 1 (e.g. 0.25), got {show(value)}")
    return float(value)


def cpu_list(value: object) -> tuple[int, ...]:
    if value == "" or value == []:
        return ()
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        value = str(value)
    if isinstance(value, list) and all(
        isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value
    ):
        value = ",".join(str(v) for v in value)
    if not isinstance(value, str):
        raise FieldProblem(f'must be a CPU list like "0-1" or "0,2", got {show(value)}')
    return parse_id_list(value, "a CPU list", 65535)


def inventory(value: object) -> str:
    if isinstance(value, str) and value in GPU_INVENTORIES:
        return value
    if isinstance(value, str) and value.startswith("/"):
        return abs_path(value)
    raise FieldProblem(
        f"must be one of {', '.join(GPU_INVENTORIES)} or an absolute path to an "
        f"inventory snapshot, got {show(value)}"
    )


_RESOURCE_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"


def resource_name(value: object) -> str:
    # An extended resource the kubelet accepts from a device plugin: <domain>/<name>,
    # outside the kubernetes.io domains Kubernetes keeps for itself.
    domain, _, name = value.partition("/") if isinstance(value, str) else ("", "", "")
    if (
        not isinstance(value, str)
        or len(domain) > 253
        or not _fullmatch(_DNS_SUBDOMAIN, domain)
        or not _fullmatch(_RESOURCE_NAME, name)
        or domain == "kubernetes.io"
        or domain.endswith(".kubernetes.io")
    ):
        raise FieldProblem(
            f"must be an extended resource name like nvidia.com/gpu (a DNS "
            f"domain outside kubernetes.io, '/', a name of up to 63 letters, "
            f"digits, '-', '_', '.'), got {show(value)}"
        )
    return value


def cgroup_version(value: object) -> int | None:
    if value == "auto":
        return None
    if type(value) in (int, str) and value in (1, 2, "1", "2"):
        return int(value)
    raise FieldProblem(f"must be one of auto, 1, 2, got {show(value)}")


_PLUGIN_NAME = r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}"


def plugin_name(value: object) -> str:
    if not isinstance(value, str) or not _fullmatch(_PLUGIN_NAME, value):
        raise FieldProblem(
            f"must be a name of letters, digits, '.', '_' and '-', got {show(value)}"
        )
    return value


def plugin_index(value: object) -> str:
    # containerd takes exactly two digits and pads nothing; YAML reads 50 as a number,
    # and 07 as 7, which is not two digits: quoted, it is.
    if isinstance(value, int) and not isinstance(value, bool) and 10 <= value <= 99:
        return str(value)
    if isinstance(value, str) and re.fullmatch(r"[0-9]{2}", value, re.ASCII):
        return value
    quote = (
        '; an index below 10 must be quoted, e.g. "07"'
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 10
        else ""
    )
    raise FieldProblem(f'must be two digits from "00" to "99", got {show(value)}{quote}')


def rescan(value: object) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or not (value == 0 or 1 <= value <= 86400)
    ):
        raise FieldProblem(
            f"must be 0 (never) or a number of seconds from 1 to 86400, got {show(value)}"
        )
    return float(value)


def reconnect(value: object) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or not 0 < value <= 3600
    ):
        raise FieldProblem(
            f"must be a number of seconds above 0 and at most 3600, got {show(value)}"
        )
    return float(value)


_HOST_PORT = r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]*):([0-9]{1,5})"


def address(value: object) -> str:
    if value == "":
        return ""
    m = _fullmatch(_HOST_PORT, value) if isinstance(value, str) else None
    if not isinstance(value, str) or m is None or not 1 <= int(m.group(2)) <= 65535:
        raise FieldProblem(
            f"must be host:port like 127.0.0.1:9810 or [::1]:9810 (port 1..65535),"
            f' or "" to disable, got {show(value)}'
        )
    return value


def interval(value: object) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or not (value == 0 or 1 <= value <= 3600)
    ):
        raise FieldProblem(
            f"must be 0 (off) or a number of seconds from 1 to 3600, got {show(value)}"
        )
    return float(value)


def backoff(value: object) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or not 1 <= value <= 86400
    ):
        raise FieldProblem(f"must be a number of seconds from 1 to 86400, got {show(value)}")
    return float(value)


def series_containers(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 100_000:
        raise FieldProblem(f"must be a count of containers from 0 to 100000, got {show(value)}")
    return value


def auto_flag(value: object) -> bool | None:
    if value == "auto":
        return None
    if not isinstance(value, bool):
        raise FieldProblem(f"must be auto, true or false, got {show(value)}")
    return value


def queue_size(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 100_000:
        raise FieldProblem(f"must be a count of events from 1 to 100000, got {show(value)}")
    return value


def qps(value: object) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or not 0.01 <= value <= 1000
    ):
        raise FieldProblem(
            f"must be a number of requests per second from 0.01 to 1000, got {show(value)}"
        )
    return float(value)


def burst(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 10_000:
        raise FieldProblem(f"must be a count of requests from 1 to 10000, got {show(value)}")
    return value


def socket_path(value: object) -> str:
    return "" if value == "" else abs_path(value)


_CDI_KIND = (
    r"[A-Za-z0-9]([A-Za-z0-9.-]{0,62}[A-Za-z0-9])?"
    r"/[A-Za-z0-9]([A-Za-z0-9_.-]{0,62}[A-Za-z0-9])?"
)
_RESOURCE = (
    r"[A-Za-z0-9]([A-Za-z0-9.-]{0,62}[A-Za-z0-9])?"
    r"/[A-Za-z0-9]([A-Za-z0-9_.-]{0,62}[A-Za-z0-9*])?"
)


def _names(pattern: str, what: str, example: str) -> Callable[[object], tuple[str, ...]]:
    def check(value: object) -> tuple[str, ...]:
        if not isinstance(value, list) or len(value) > MAX_LISTED:
            raise FieldProblem(
                f"must be a list of at most {MAX_LISTED} {what} like [{example}], got {show(value)}"
            )
        for index, item in enumerate(value):
            if not isinstance(item, str) or not _fullmatch(pattern, item):
                raise FieldProblem(
                    f"must be a {what} like {example}, got {show(item)}", f"[{index}]"
                )
        return tuple(value)

    return check


cdi_kinds = _names(_CDI_KIND, "CDI kind (vendor/class)", "nvidia.com/gpu")
resource_names = _names(
    _RESOURCE, "resource name (domain/name, a trailing * for any suffix)", "nvidia.com/mig-*"
)


# -- declaring a key -----------------------------------------------------------------------

Converter = Callable[[object], object]
METADATA = "nri-sla key"  # the field metadata entry that makes a field a config key


class Key:
    """What a dataclass field of `values` declares about its config key (see `key`). A
    plain frozen class: the OCI hook's cold run reads the config, and a `typing.NamedTuple`
    here (typing imported for it) made that load 13 M instructions dearer."""

    __slots__ = ("accepts", "convert", "doc", "live", "name", "note")
    name: str  # as written in the file; "" is the attribute's name with '-' for '_'
    convert: Converter
    live: bool
    accepts: str
    doc: str
    note: str

    def __init__(
        self, name: str, convert: Converter, live: bool, accepts: str, doc: str, note: str
    ) -> None:
        for attribute, value in (
            ("name", name),
            ("convert", convert),
            ("live", live),
            ("accepts", accepts),
            ("doc", doc),
            ("note", note),
        ):
            object.__setattr__(self, attribute, value)

    def __setattr__(self, attribute: str, value: object) -> None:
        raise AttributeError(f"a config key's declaration is frozen ({attribute})")

    def __repr__(self) -> str:
        return f"Key({self.name!r}, {self.convert.__name__}, live={self.live})"


def key(
    convert: Converter,
    *,
    accepts: str,
    doc: str,
    live: bool = False,
    name: str = "",
    note: str = "",
) -> dict[str, Key]:
    """The metadata of a field that is a config key: ``convert`` checks and converts what
    the file gives; ``live``: a SIGHUP applies it to the running plugin, otherwise it needs
    a restart; ``accepts``, ``doc`` and a ``note`` shown after the default are its row in
    docs/config.md (generated by nri_plugin.config.doctable); ``name`` when the key is not
    the attribute's name with '-' for '_'."""
    return {METADATA: Key(name, convert, live, accepts, doc, note)}


def one_of(names: tuple[str, ...]) -> str:
    """The `accepts` of a key that takes one of `names` (a `choice`)."""
    return " | ".join(f"`{name}`" for name in names)
