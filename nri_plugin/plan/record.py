"""The `sla.nri.io/applied` record: what was enforced on a container, and by which path.

The runtime's own state is the record: the plugin rebuilds GPU, exclusive-CPU and RT
allocations from it after a restart (Synchronize), and the hook reads it to decide that
the plugin already enforced a container and only verification is left.

A pod can set any annotation, this one included, so a record is trusted only when nri-sla
can prove it wrote it: the text is compact JSON whose last member is
`"mac":"<HMAC-SHA256 hex>"`, made with the node-local record key
(nri_plugin.core.recordkey) over the container id and the JSON without that member. The id
binds the record to its container: a record copied onto another container does not verify.

decode_record checks, in this order and before any work that grows with the input: the
size (MAX_RECORD_BYTES), the MAC (a forged or edited record is never parsed), the nesting
depth (MAX_RECORD_DEPTH: what the schema needs), then every field's type and range (CPU
and NUMA lists bounded by the node's highest id before they are expanded, GPUs known to
the node's inventory, RT runtime <= period). Every failure is a RecordError.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache

from nri_plugin.plan.errors import RecordError, UnauthenticatedRecord
from nri_plugin.plan.model import ContainerPlan, IoLimit, MemoryPolicy
from nri_plugin.sla.schema import MAX_GPUS, MAX_MAJOR, MAX_MINOR, MAX_NUMA_NODE
from nri_plugin.topology.cpulist import parse_cpulist
from nri_plugin.topology.errors import CpuListError
from nri_plugin.value import Frozen, asdict, fields

TYPE_CHECKING = False  # `typing` costs the OCI hook start-up time; only checkers need it
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from nri_plugin.topology.gpus import GpuInventory

RECORD_VERSION = 2  # 2: authenticated (version 1 records carried no MAC and are refused)
MAX_RECORD_BYTES = 16 * 1024  # a full record (8 GPUs, io.max rules) is well under 2 KiB
# io.max limits a record may hold: what SLA documents allowed before their bound became
# 8 rules (a running container's record outlives the release that wrote it).
MAX_IO_LIMITS = 64
MAX_RECORD_DEPTH = 3  # object > placement_record / io_max > gpus list / one io.max rule
MAX_ID = 65535  # highest CPU or NUMA node id without node facts (the hook)
PATHS = ("nri", "hook")

_SKIP = {"warnings", "reasons", "key"}
_RECORDED = tuple(f.name for f in fields(ContainerPlan) if f.name not in _SKIP)
_MAC_HEAD = ',"mac":"'
_MAC_HEX = 64
_MAC_TAIL = len(_MAC_HEAD) + _MAC_HEX + len('"}')
_HEX = "0123456789abcdef"
_INT64 = (1 << 63) - 1
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_BRACKET = re.compile(r"[\[\]{}]")
_NAME_LIMIT = 256  # a GPU reference, a CDI name or an env value


class RecordLimits(Frozen):
    """What a record may name on this node: the highest CPU and NUMA node ids, and the
    GPU inventory (None: GPU names are checked for form only, as the hook does)."""

    max_cpu: int = MAX_ID
    max_node: int = MAX_NUMA_NODE
    inventory: GpuInventory | None = None


def record_body(plan: ContainerPlan, path: str) -> dict[str, Any]:
    """The record as a dict: the plan's settings (None and empty fields left out)."""
    body: dict[str, Any] = {"v": RECORD_VERSION, "path": path}
    for name in _RECORDED:
        value = getattr(plan, name)
        if value is None or value == () or value == {}:
            continue
        if name == "io_max":
            value = [asdict(limit) for limit in value]
        elif name == "memory_policy":
            value = asdict(value)
        body[name] = value
    return body


def record_text(body: dict[str, Any]) -> str:
    """The record body as the compact, key-sorted JSON that is authenticated."""
    return json.dumps(body, separators=(",", ":"), sort_keys=True)


def sign_record(text: str, owner: str, key: bytes) -> str:
    """`text` (record_text's) authenticated for container `owner`: the MAC added as the
    object's last member, so the record stays one JSON object."""
    return f'{text[:-1]}{_MAC_HEAD}{_mac(text, owner, key)}"}}'


def encode_record(plan: ContainerPlan, path: str, owner: str, key: bytes) -> str:
    """The authenticated record of `plan` for container `owner`."""
    return sign_record(record_text(record_body(plan, path)), owner, key)


def _mac(text: str, owner: str, key: bytes) -> str:
    mac = _keyed_hmac(key).copy()
    mac.update(f"{owner}\0{text}".encode())
    return mac.hexdigest()


@lru_cache(maxsize=1)  # a node has one key
def _keyed_hmac(key: bytes) -> Any:
    """HMAC-SHA256 that has taken in `key` and nothing else; a MAC copies it. hmac.digest
    redoes the key's two blocks, and OpenSSL 3 looks the algorithm up by name again, for
    every MAC: a copy of this one is 4.3 -> 2.9 us in a hot loop, about 2.5 times that
    with the cold caches the plugin runs each CreateContainer with (docs/benchmarks.md,
    "CreateContainer in the plugin"). tests/plan check the MACs against hmac.digest."""
    # Imported here: hmac loads OpenSSL's hashlib, which the OCI hook's cold run (no
    # `applied` record to check) would pay for on every first container of an SLA.
    import hashlib
    import hmac

    return hmac.new(key, digestmod=hashlib.sha256)


def decode_record(
    text: object, owner: str, key: bytes, limits: RecordLimits | None = None
) -> tuple[str, ContainerPlan]:
    """The enforcing path and the plan from `owner`'s record. Raises
    UnauthenticatedRecord when nri-sla did not write it for this container, RecordError
    when it is malformed or names what this node does not have."""
    return parse_record(verified_text(text, owner, key), limits)


def verified_text(text: object, owner: str, key: bytes) -> str:
    """The signed JSON (the record less its MAC member) of `owner`'s record, once its
    size and MAC are checked: what parse_record reads. Replicas' records differ in their
    MAC only, so the plugin parses each signed text once per Synchronize."""
    if not isinstance(text, str):
        raise RecordError(f"must be a string, got {type(text).__name__}")
    if len(text) > MAX_RECORD_BYTES:
        raise RecordError(f"larger than {MAX_RECORD_BYTES} bytes ({len(text)})")
    if not text.isascii():  # nri-sla writes ASCII only, so characters are bytes here
        raise UnauthenticatedRecord("not written by nri-sla (non-ASCII text)")
    mac = text[-_MAC_TAIL + len(_MAC_HEAD) : -2]
    if (
        len(text) <= _MAC_TAIL
        or text[-_MAC_TAIL : -_MAC_TAIL + len(_MAC_HEAD)] != _MAC_HEAD
        or text[-2:] != '"}'
        or mac.strip(_HEX)
    ):  # strip: left only if not all hex
        raise UnauthenticatedRecord("not written by nri-sla (no record MAC)")
    signed = text[:-_MAC_TAIL] + "}"
    import hmac  # as in _mac

    if not hmac.compare_digest(mac, _mac(signed, owner, key)):
        raise UnauthenticatedRecord(
            "not written by nri-sla for this container (MAC does not verify)"
        )
    return signed


def parse_record(signed: str, limits: RecordLimits | None = None) -> tuple[str, ContainerPlan]:
    """The enforcing path and the plan from a record's verified text (verified_text).
    Raises RecordError when it is malformed or names what this node does not have."""
    body = _parsed_json(signed)
    limits = limits or RecordLimits()
    path = body.pop("path", None)
    if path not in PATHS:
        raise RecordError(f"path must be one of {', '.join(PATHS)}")
    del body["v"]
    missing = [name for name in ("enforcement", "cgroup_version") if name not in body]
    if missing:
        raise RecordError(f"{missing[0]} is missing")
    values: dict[str, Any] = {}
    for name, raw in body.items():
        check = _FIELDS.get(name)
        if check is None:
            raise RecordError(f"{_short(name)} is not a record field")
        try:
            values[name] = check(raw, limits)
        except _Bad as exc:
            raise RecordError(f"{name}: {exc}") from None
    for name in _INJECTED:  # checked above; the runtime applied them when it was created
        values.pop(name, None)
    rt_runtime, rt_period = values.get("rt_runtime"), values.get("rt_period")
    if (rt_runtime is None) != (rt_period is None):
        raise RecordError("rt_runtime and rt_period come together")
    if rt_runtime is not None and rt_runtime > rt_period:
        raise RecordError(f"rt_runtime ({rt_runtime}) is above rt_period ({rt_period})")
    return path, ContainerPlan(**values)


def granted_permissions(plan: ContainerPlan) -> tuple[str, ...]:
    """The node config permissions (config.PERMISSIONS) that what `plan` holds needs, as
    the planner checks them when it grants each: a restored record is held to the same."""
    placement = plan.placement_record or {}
    gpus = any(name in placement for name in ("gpus", "mig", "migs"))
    needs = {
        "realtime": plan.rt_runtime is not None,
        "gpus": gpus,
        "exclusive-cpus": "exclusive" in placement,
        "io-max": bool(plan.io_max),
    }
    return tuple(name for name, needed in needs.items() if needed)


def _parsed_json(signed: str) -> dict[str, Any]:
    # Authentic, so this holds for every record nri-sla writes; checked anyway, before
    # parsing, so that a leaked key or a bug cannot make json recurse or expand.
    depth = 0
    for bracket in _BRACKET.finditer(_STRING.sub("", signed)):
        depth += 1 if bracket[0] in "[{" else -1
        if depth > MAX_RECORD_DEPTH:
            raise RecordError(f"nested deeper than {MAX_RECORD_DEPTH} levels")
    try:
        body = json.loads(signed)
    except ValueError as exc:
        raise RecordError(f"not JSON: {exc}") from None
    if not isinstance(body, dict) or body.get("v") != RECORD_VERSION:
        version = body.get("v") if isinstance(body, dict) else None
        raise RecordError(f"unknown record version {_short(version)}")
    return body


# -- field checks ---------------------------------------------------------------------------


class _Bad(Exception):
    """One field's problem; decode_record prefixes the field's name."""


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _int(lo: int, hi: int) -> Callable[[object, RecordLimits], int]:
    def check(value: object, _limits: RecordLimits) -> int:
        if type(value) is not int or not lo <= value <= hi:  # bool is not an int here
            raise _Bad(f"must be a whole number from {lo} to {hi}, got {_short(value)}")
        return value

    return check


_positive = _int(1, _INT64)


def _optional_rate(value: object, limits: RecordLimits) -> int | None:
    return None if value is None else _positive(value, limits)


def _choice(*allowed: object) -> Callable[[object, RecordLimits], object]:
    def check(value: object, _limits: RecordLimits) -> object:
        if type(value) not in (str, int) or value not in allowed:
            raise _Bad(f"must be one of {', '.join(map(str, allowed))}, got {_short(value)}")
        return value

    return check


def _id_list(value: object, hi: int) -> str:
    if not isinstance(value, str) or len(value) > _NAME_LIMIT:
        raise _Bad(f"must be an id list like 0-3,8, got {_short(value)}")
    try:
        if not parse_cpulist(value, limit=hi):
            raise _Bad("must name at least one id")
    except CpuListError as exc:
        raise _Bad(exc.detail) from None
    return value


def _cpus(value: object, limits: RecordLimits) -> str:
    return _id_list(value, limits.max_cpu)


def _nodes(value: object, limits: RecordLimits) -> str:
    return _id_list(value, limits.max_node)


def _name(value: object) -> str:
    if not isinstance(value, str) or not 0 < len(value) <= _NAME_LIMIT:
        raise _Bad(f"must be a name of 1 to {_NAME_LIMIT} characters, got {_short(value)}")
    return value


def _mapping(value: object, allowed: tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _Bad(f"must be an object, got {_short(value)}")
    unknown = [k for k in value if k not in allowed]
    if unknown:
        raise _Bad(f"{_short(unknown[0])} is not one of {', '.join(allowed)}")
    return value


def _memory_policy(value: object, limits: RecordLimits) -> MemoryPolicy:
    doc = _mapping(value, ("mode", "nodes"))
    mode = _choice("bind", "preferred", "interleave")(doc.get("mode"), limits)
    return MemoryPolicy(str(mode), _nodes(doc.get("nodes"), limits))


_IO_RATES = ("read_bps", "write_bps", "read_iops", "write_iops")


def _io_max(value: object, limits: RecordLimits) -> tuple[IoLimit, ...]:
    if not isinstance(value, list) or not 0 < len(value) <= MAX_IO_LIMITS:
        raise _Bad(f"must be a list of 1 to {MAX_IO_LIMITS} limits")
    rules = []
    for item in value:
        doc = _mapping(item, ("major", "minor", *_IO_RATES))
        rules.append(
            IoLimit(
                _int(0, MAX_MAJOR)(doc.get("major"), limits),
                _int(0, MAX_MINOR)(doc.get("minor"), limits),
                *(_optional_rate(doc.get(k), limits) for k in _IO_RATES),
            )
        )
    return tuple(rules)


def _gpu_env(value: object, _limits: RecordLimits) -> tuple[tuple[str, str], ...]:
    doc = _mapping(value, ("NVIDIA_VISIBLE_DEVICES",))  # the only one nri-sla ever set
    return tuple(sorted((k, _name(v)) for k, v in doc.items()))


def _gpu_cdi(value: object, _limits: RecordLimits) -> tuple[str, ...]:
    if not isinstance(value, list) or not 0 < len(value) <= MAX_GPUS:
        raise _Bad(f"must be a list of 1 to {MAX_GPUS} CDI device names")
    return tuple(_name(v) for v in value)


def _gpu_ref(value: object, limits: RecordLimits, mig: bool) -> str:
    ref = _name(value)
    inventory = limits.inventory
    if inventory is not None and (inventory.find_mig(ref) if mig else inventory.find(ref)) is None:
        raise _Bad(f"{'MIG device' if mig else 'GPU'} {_short(ref)} is not on this node")
    return ref


# "shared" and "runtime": flags of records written when nri-sla chose GPUs,
# still read so that those containers keep what they hold; never written any more.
_FLAGS = ("shared", "runtime", "aligned")


def _gpu_refs(doc: dict[str, Any], name: str, limits: RecordLimits, mig: bool) -> list[str]:
    refs = doc[name]
    if not isinstance(refs, list) or not 0 < len(refs) <= MAX_GPUS:
        raise _Bad(f"{name} must be a list of 1 to {MAX_GPUS} {'MIG devices' if mig else 'GPUs'}")
    return [_gpu_ref(g, limits, mig=mig) for g in refs]


def _placement(value: object, limits: RecordLimits) -> dict[str, Any]:
    """Allocator.restore's input (Placement.to_record), checked field by field."""
    doc = _mapping(value, ("gpus", "mig", "migs", "exclusive", "cpus", "mems", *_FLAGS))
    checked: dict[str, Any] = {}
    if "gpus" in doc:
        checked["gpus"] = _gpu_refs(doc, "gpus", limits, mig=False)
    if "migs" in doc:
        checked["migs"] = _gpu_refs(doc, "migs", limits, mig=True)
    if "mig" in doc:  # a record written when nri-sla chose GPUs: one MIG device
        checked["mig"] = _gpu_ref(doc["mig"], limits, mig=True)
    for name in ("exclusive", "cpus"):
        if name in doc:
            checked[name] = _cpus(doc[name], limits)
    if "mems" in doc:
        checked["mems"] = _nodes(doc["mems"], limits)
    for name in _FLAGS:
        if name in doc:
            if doc[name] is not True:  # to_record writes only the flags that are set
                raise _Bad(f"{name} must be true when present, got {_short(doc[name])}")
            checked[name] = True
    return checked


_INJECTED = ("gpu_env", "gpu_cdi")
_FIELDS: dict[str, Callable[[object, RecordLimits], Any]] = {
    "enforcement": _choice("hard", "soft"),
    "cgroup_version": _choice(1, 2),
    "cpu_quota": _positive,
    "cpu_period": _int(1000, 1_000_000),
    "cpus": _cpus,
    "mems": _nodes,
    "rt_runtime": _int(1, 1_000_000),
    "rt_period": _int(1000, 1_000_000),
    "memory_max": _positive,
    "memory_high": _positive,
    "memory_soft_limit": _positive,
    "memory_policy": _memory_policy,
    "io_weight": _int(1, 10000),
    "io_max": _io_max,
    # what nri-sla injected when it chose GPUs: read (and checked) from old records only
    "gpu_env": _gpu_env,
    "gpu_cdi": _gpu_cdi,
    "placement_record": _placement,
}
