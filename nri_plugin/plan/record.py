"""The `sla.nri.io/applied` record: what was enforced on a container, and by which path.

The runtime's own state is the record: the plugin rebuilds GPU, exclusive-CPU and RT
allocations from it after a restart (Synchronize), and the hook reads it to decide that
the plugin already enforced a container and only verification is left.
"""

from __future__ import annotations

import json
from dataclasses import asdict, fields

from nri_plugin.errors import InvalidInput
from nri_plugin.plan.model import ContainerPlan, IoLimit, MemoryPolicy

TYPE_CHECKING = False  # `typing` costs the OCI hook start-up time; only checkers need it
if TYPE_CHECKING:
    from typing import Any

RECORD_VERSION = 1
MAX_RECORD_BYTES = 64 * 1024

_SKIP = {"warnings", "reasons", "gpu_devices", "key"}
_RECORDED = tuple(f.name for f in fields(ContainerPlan) if f.name not in _SKIP)


class RecordError(InvalidInput, ValueError):
    pass


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
        elif name == "gpu_env":
            value = dict(value)
        body[name] = value
    return body


def encode_record(plan: ContainerPlan, path: str, body: dict[str, Any] | None = None) -> str:
    """Compact JSON of the record (`body`: record_body's result, when already built)."""
    return json.dumps(body or record_body(plan, path), separators=(",", ":"), sort_keys=True)


def decode_record(text: str) -> tuple[str, ContainerPlan]:
    """The enforcing path and the plan from a record. Raises RecordError when malformed."""
    if len(text) > MAX_RECORD_BYTES:
        raise RecordError(f"record larger than {MAX_RECORD_BYTES} bytes")
    try:
        body = json.loads(text)
        if not isinstance(body, dict) or body.get("v") != RECORD_VERSION:
            raise RecordError(f"unknown record version {body.get('v')!r}")
        path = str(body.pop("path"))
        body.pop("v")
        if "io_max" in body:
            body["io_max"] = tuple(IoLimit(**limit) for limit in body["io_max"])
        if "memory_policy" in body:
            body["memory_policy"] = MemoryPolicy(**body["memory_policy"])
        if "gpu_env" in body:
            body["gpu_env"] = tuple(sorted(body["gpu_env"].items()))
        for key in ("gpu_cdi",):
            if key in body:
                body[key] = tuple(body[key])
        return path, ContainerPlan(**body)
    except RecordError:
        raise
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise RecordError(f"malformed record: {exc}") from exc
