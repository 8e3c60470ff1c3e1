"""The v1 SLA document schema: one converter per field, checked one document at a time.

A document becomes a *flat* dict keyed by dotted field path (``"cpu.limit"``), with
values already converted (bytes, microseconds, tuples). Flat dicts make the key-by-key
merge of a container document over the pod document a plain ``dict.update`` (nested
mappings merge recursively, lists are replaced whole). ``null`` is kept as :data:`CLEAR`:
in a container document it removes what the pod document set (``gpu: null`` removes the
whole section). Cross-field rules live in ``parse.py``; they need the merged result.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from nri_plugin.sla.errors import MAX_REPORTED_ERRORS
from nri_plugin.sla.model import (
    ENFORCEMENT_MODES,
    GPU_SOURCES,
    GPU_TOPOLOGIES,
    MEMORY_POLICIES,
    IoMaxRule,
)
from nri_plugin.text.errors import FieldProblem
from nri_plugin.text.fields import (
    check_ids,
    choice,
    key_text,
    parse_id_list,
    show,
    unknown_key_message,
)
from nri_plugin.text.quantities import (
    format_size,
    parse_count,
    parse_cpu,
    parse_duration,
    parse_size,
)

TYPE_CHECKING = False  # `typing` costs the OCI hook's cold run; only checkers need it
if TYPE_CHECKING:
    from typing import TypeVarTuple

    Args = TypeVarTuple("Args")

CLEAR = type("Clear", (), {"__repr__": lambda self: "CLEAR", "__slots__": ()})()

MAX_CPUS = 4096
MAX_GPUS = 256
MAX_NUMA_NODE = 1023  # the kernel's MAX_NUMNODES is at most 1024
MAX_IO_RULES = 8  # 7-11 values each: they fit a document's value bound (parse.MAX_VALUES)
MIN_MEMORY = 2**20  # below 1Mi is nearly always a unit mistake ("512" for 512Mi)
MAX_MAJOR = 4095  # Linux dev_t: 12-bit major, 20-bit minor
MAX_MINOR = 2**20 - 1


# -- scalar converters -------------------------------------------------------------------


def _int(value: object, lo: int, hi: int, what: str = "a whole number") -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        quoted = " (remove the quotes)" if isinstance(value, str) and value.isdigit() else ""
        raise FieldProblem(f"must be {what} from {lo} to {hi}, got {show(value)}{quoted}")
    if not lo <= value <= hi:
        raise FieldProblem(f"must be from {lo} to {hi}, got {show(value)}")
    return value


def _cpu_limit(value: object) -> float:
    cpus = parse_cpu(value)
    if not 0 < cpus <= MAX_CPUS:
        raise FieldProblem(
            f"must be between 0.001 and {MAX_CPUS} CPUs (e.g. 2.5 or 2500m), got {show(value)}"
        )
    return cpus


def _duration(lo: int, hi: int, lo_text: str, hi_text: str) -> Callable[[object], int]:
    def convert(value: object) -> int:
        us = parse_duration(value)
        if not lo <= us <= hi:
            raise FieldProblem(f"must be between {lo_text} and {hi_text}, got {show(value)}")
        return us

    return convert


def _exclusive(value: object) -> int:
    return _int(value, 1, MAX_CPUS, "a whole number of CPUs")


def _memory(value: object) -> int:
    size = parse_size(value)
    if size < MIN_MEMORY:
        raise FieldProblem(
            f"must be at least {format_size(MIN_MEMORY)} (a size like 512Mi or "
            f"8Gi), got {show(value)}"
        )
    return size


def _io_weight(value: object) -> int:
    return _int(value, 1, 10000)


def _gpu_count(value: object) -> int:
    return _int(value, 1, MAX_GPUS, "a whole number of GPUs")


def _bool(value: object) -> bool:
    if not isinstance(value, bool):
        raise FieldProblem(f"must be true or false, got {show(value)}")
    return value


def _numa_nodes(value: object) -> object:
    what = "auto, a node list"
    if value == "auto":
        return "auto"
    if isinstance(value, bool):
        raise FieldProblem(
            f"must be {what} like 0, 0-1 or 0,2, or a list like [0, 1]; got {show(value)}"
        )
    if isinstance(value, int):
        if value < 0:
            raise FieldProblem(f"must not be negative, got {show(value)}")
        return check_ids([value], value, MAX_NUMA_NODE)
    if isinstance(value, str):
        return parse_id_list(value, what, MAX_NUMA_NODE)
    if isinstance(value, list):
        if len(value) > MAX_NUMA_NODE + 1:
            raise FieldProblem(f"names {len(value)} nodes; at most {MAX_NUMA_NODE + 1}")
        if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value):
            raise FieldProblem(
                f"must be a list of NUMA node numbers like [0, 1], got {show(str(value))}"
            )
        return check_ids(list(value), str(value), MAX_NUMA_NODE)
    raise FieldProblem(
        f"must be {what} like 0, 0-1 or 0,2, or a list like [0, 1]; got {show(value)}"
    )


_DEVICE_PATH = re.compile(r"/dev/[A-Za-z0-9._+-]+(/[A-Za-z0-9._+-]+)*", re.ASCII)
_MAJ_MIN = re.compile(r"([0-9]{1,7}):([0-9]{1,7})", re.ASCII)


def _device(value: object) -> str:
    expected = "a block device path like /dev/nvme0n1 or MAJ:MIN like 259:0"
    if not isinstance(value, str) or len(value) > 255:
        raise FieldProblem(f"must be {expected}, got {show(value)}")
    m = _MAJ_MIN.fullmatch(value)
    if m:
        major, minor = int(m.group(1)), int(m.group(2))
        if major > MAX_MAJOR or minor > MAX_MINOR:
            raise FieldProblem(
                f"({value}) is out of range: major 0..{MAX_MAJOR}, minor 0..{MAX_MINOR}"
            )
        return f"{major}:{minor}"
    if not _DEVICE_PATH.fullmatch(value) or "/../" in value + "/" or "/./" in value + "/":
        raise FieldProblem(f"must be {expected}, got {show(value)}")
    return value


_RULE_FIELDS = ("device", "read-bps", "write-bps", "read-iops", "write-iops")


def _io_rule(value: object) -> IoMaxRule:
    if not isinstance(value, dict):
        raise FieldProblem(
            f"must be a mapping with device and limits ({', '.join(_RULE_FIELDS)})"
            f", got {show(value)}"
        )
    for name in value:
        if name not in _RULE_FIELDS:
            raise FieldProblem(
                unknown_key_message(name, _RULE_FIELDS, "io.max rule"), f".{key_text(name)}"
            )
    limits: dict[str, int | None] = {}
    for name in _RULE_FIELDS[1:]:
        raw = value.get(name)
        if raw is None:
            limits[name] = None
            continue
        parser = parse_size if name.endswith("bps") else parse_count
        try:
            amount = parser(raw)
        except FieldProblem as exc:
            raise FieldProblem(exc.message, f".{name}") from None
        if amount < 1:
            raise FieldProblem(f"must be at least 1, got {show(raw)}", f".{name}")
        limits[name] = amount
    if value.get("device") is None:
        raise FieldProblem(
            "is required: a block device path like /dev/nvme0n1 or MAJ:MIN", ".device"
        )
    try:
        device = _device(value["device"])
    except FieldProblem as exc:
        raise FieldProblem(exc.message, ".device") from None
    if all(v is None for v in limits.values()):
        raise FieldProblem("needs at least one limit: read-bps, write-bps, read-iops or write-iops")
    return IoMaxRule(
        device, limits["read-bps"], limits["write-bps"], limits["read-iops"], limits["write-iops"]
    )


def _io_max(value: object) -> tuple[IoMaxRule, ...]:
    if not isinstance(value, list):
        raise FieldProblem(
            f"must be a list of rules like [{{device: /dev/nvme0n1, read-bps: "
            f"500Mi}}], got {show(value)}"
        )
    if len(value) > MAX_IO_RULES:
        raise FieldProblem(f"has {len(value)} rules; at most {MAX_IO_RULES} are allowed")
    rules: list[IoMaxRule] = []
    seen: set[str] = set()
    for index, item in enumerate(value):
        try:
            rule = _io_rule(item)
        except FieldProblem as exc:
            raise FieldProblem(exc.message, f"[{index}]{exc.sub}") from None
        if rule.device in seen:
            raise FieldProblem(
                f"names device {rule.device} twice; merge the limits into one rule",
                f"[{index}].device",
            )
        seen.add(rule.device)
        rules.append(rule)
    return tuple(rules)


_GPU_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9:._/-]{0,127}", re.ASCII)
_MIG_PROFILE = re.compile(r"(?:[1-9]c\.)?[1-9]g\.[0-9]{1,4}gb(?:[+-][a-z][a-z.]{0,7})?", re.ASCII)


def _gpu_ids(value: object) -> tuple[str, ...]:
    expected = "a list of GPU indexes, UUIDs or PCI bus ids like [0, 1] or [GPU-8f...]"
    if isinstance(value, str):
        if value.count(",") >= MAX_GPUS:  # counted before the text is split
            raise FieldProblem(f"names {value.count(',') + 1} GPUs; at most {MAX_GPUS}")
        items: list[object] = [part.strip() for part in value.split(",")] if value else []
    elif isinstance(value, list):
        items = list(value)
    else:
        raise FieldProblem(f"must be {expected}, got {show(value)}")
    if len(items) > MAX_GPUS:
        raise FieldProblem(f"names {len(items)} GPUs; at most {MAX_GPUS}")
    ids: list[str] = []
    for index, item in enumerate(items):
        if isinstance(item, int) and not isinstance(item, bool) and 0 <= item <= 9999:
            ids.append(str(item))
        elif isinstance(item, str) and _GPU_ID.fullmatch(item):
            ids.append(item)
        else:
            raise FieldProblem(
                f"must be a GPU index, UUID or PCI bus id, got {show(item)}", f"[{index}]"
            )
    if len(set(ids)) != len(ids):
        raise FieldProblem(f"names a GPU twice: {show(','.join(ids))}")
    return tuple(ids)


def _mig(value: object) -> str:
    if not isinstance(value, str) or not _MIG_PROFILE.fullmatch(value):
        raise FieldProblem(f"must be a MIG profile like 1g.10gb or 3g.40gb, got {show(value)}")
    return value


Converter = Callable[[object], object]

SECTIONS: dict[str, dict[str, Converter]] = {
    "cpu": {
        "limit": _cpu_limit,
        "period": _duration(1000, 1_000_000, "1ms", "1s"),
        "rt-runtime": _duration(1, 1_000_000, "1us", "1s"),
        "rt-period": _duration(1000, 1_000_000, "1ms", "1s"),
        "exclusive": _exclusive,
    },
    "numa": {"nodes": _numa_nodes, "memory-policy": choice(MEMORY_POLICIES)},
    "memory": {"high": _memory, "max": _memory},
    "io": {"weight": _io_weight, "max": _io_max},
    "gpu": {
        "count": _gpu_count,
        "ids": _gpu_ids,
        "mig": _mig,
        "topology": choice(GPU_TOPOLOGIES),
        "align": _bool,
        "from": choice(GPU_SOURCES),
    },
}
TOP_FIELDS: tuple[str, ...] = ("enforcement", *SECTIONS)
convert_enforcement = choice(ENFORCEMENT_MODES)


def flatten(data: object) -> tuple[dict[str, object], list[tuple[str, str]], int]:
    """Check one parsed document field by field.

    Returns the flat document, the first MAX_REPORTED_ERRORS problems found as (field
    path, message) and how many more there were: those are only counted, so a document
    of unknown keys costs no "did you mean" search beyond the listed ones.
    """
    problems = _Problems()
    flat: dict[str, object] = {}
    example = "a YAML mapping such as 'cpu: {limit: 2}'"
    if data is None:
        return flat, [("", f"is empty; write {example}")], 0
    if not isinstance(data, Mapping):
        return flat, [("", f"must be {example}, got {show(data)}")], 0
    for name, value in data.items():
        if name == "enforcement":
            _convert_into(flat, problems, name, value, convert_enforcement)
        elif name in SECTIONS:
            fields = SECTIONS[name]
            if value is None:
                flat[name] = CLEAR
                continue
            if not isinstance(value, Mapping):
                problems.add(name, _not_a_section, fields, value)
                continue
            for field, raw in value.items():
                if field not in fields:
                    problems.add(f"{name}.{key_text(field)}", _unknown_field, field, name)
                else:
                    _convert_into(flat, problems, f"{name}.{field}", raw, fields[field])
        else:
            problems.add(key_text(name), unknown_key_message, name, TOP_FIELDS, "")
    return flat, problems.kept, problems.omitted


class _Problems:
    """The first MAX_REPORTED_ERRORS problems with their messages; the rest counted."""

    __slots__ = ("kept", "omitted")

    def __init__(self) -> None:
        self.kept: list[tuple[str, str]] = []
        self.omitted = 0

    def add(self, path: str, message: Callable[[*Args], str], *args: *Args) -> None:
        """A problem at `path`; its message, message(*args), is only made when kept."""
        if len(self.kept) < MAX_REPORTED_ERRORS:
            self.kept.append((path, message(*args)))
        else:
            self.omitted += 1


def _not_a_section(fields: Mapping[str, Converter], value: object) -> str:
    return f"must be a mapping with fields {', '.join(fields)}, got {show(value)}"


def _unknown_field(field: str, section: str) -> str:
    return unknown_key_message(field, tuple(SECTIONS[section]), section)


def _text(message: str) -> str:
    return message


def _convert_into(
    flat: dict[str, object], problems: _Problems, path: str, raw: object, convert: Converter
) -> None:
    if raw is None:
        flat[path] = CLEAR
        return
    try:
        flat[path] = convert(raw)
    except FieldProblem as exc:
        problems.add(path + exc.sub, _text, exc.message)
