"""The decision line for NRI_SLA_HOOK_LOG, rendered without the `logging` package.

The same line `nri_sla.logging.log_decision` writes through its Text/Json formatters
(docs/operations.md; tests/hook/test_decision_log.py compares the two byte for byte), but
importing logging, typing and collections.abc would triple a cached hook run's time.
Values come from JSON (dict, list, str, int, float, bool, None), so plain type checks
stand in for the Mapping/Sequence checks of the shared renderer.
"""

from __future__ import annotations

import os
import time

LEVELS = {"enforced": "info", "warned": "warning", "refused": "error"}
PRIORITY = {"info": 6, "warning": 4, "error": 3}  # syslog priorities (journald prefix)
LOGGER = "nri_sla.decision"
_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def iso_time(created: float) -> str:
    millis = int((created % 1) * 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created)) + f".{millis:03d}Z"


def _escape(c: str) -> str:
    if c in _ESCAPES:
        return _ESCAPES[c]
    if c.isprintable():
        return c
    return f"\\u{ord(c):04x}" if ord(c) <= 0xFFFF else f"\\U{ord(c):08x}"


def logfmt_value(value: object) -> str:
    if value is None:
        text = ""
    elif isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, str):
        text = value
    elif isinstance(value, dict):
        text = ",".join(f"{k}:{v}" for k, v in value.items())
    elif isinstance(value, (list, tuple)):
        text = "; ".join(str(v) for v in value)
    else:
        text = str(value)
    if text and not any(c in text for c in ' ="\\\n\r\t') and text.isprintable():
        return text
    return '"' + "".join(_escape(c) for c in text) + '"'


def _flatten(prefix: str, value: object, out: dict) -> None:
    if isinstance(value, dict) and value:
        for key, sub in value.items():
            _flatten(f"{prefix}.{key}", sub, out)
    else:
        out[prefix] = value


def journald(fd: int) -> bool:
    """The file is the journald stream systemd named in $JOURNAL_STREAM (DEV:INODE)."""
    value = os.environ.get("JOURNAL_STREAM", "")
    if not value:
        return False
    try:
        dev, ino = (int(part) for part in value.split(":", 1))
        st = os.fstat(fd)
    except (ValueError, OSError):
        return False
    return (st.st_dev, st.st_ino) == (dev, ino)


def decision_line(fmt: str, pod_ns: str, pod_name: str, container: str, outcome: str,
                  applied: dict, warnings: list[str], error: str | None,
                  created: float, journal: bool = False) -> str:
    """One decision line (no newline) with path "hook", as of time `created`."""
    level = LEVELS[outcome]
    fields: dict = {"pod": f"{pod_ns}/{pod_name}", "container": container, "path": "hook",
                    "outcome": outcome, "applied": dict(applied), "warnings": list(warnings)}
    if error is not None:
        fields["error"] = error
    if fmt == "json":
        import json

        obj = {"ts": iso_time(created), "level": level, "logger": LOGGER,
               "msg": "sla decision", **fields}
        return json.dumps(obj, default=str, separators=(",", ":"), sort_keys=False)
    pairs: dict = {} if journal else {"ts": iso_time(created)}
    pairs.update(level=level, logger=LOGGER, msg="sla decision")
    for key, value in fields.items():
        _flatten(key, value, pairs)
    line = " ".join(f"{k}={logfmt_value(v)}" for k, v in pairs.items())
    return f"<{PRIORITY[level]}>{line}" if journal else line
