"""Rendering nri-sla's structured log lines (logfmt-style text or JSON), without `logging`.

One renderer for every line nri-sla writes: `nri_plugin.ops.logsetup`'s formatters call it for
each record, and the OCI hook calls `decision_line` directly for NRI_SLA_HOOK_LOG.
The hook runs for every container start, so this module imports neither `logging` nor
`typing`/`collections.abc` (together they would triple a cached hook run's time), and
`json` only when a JSON line is asked for.

Text: `ts=... level=info logger=nri_sla.decision msg="sla decision" key=value ...`;
nested mappings flatten to dotted keys (applied.cpu.quota=1). Under journald the line has
no `ts` (journald stamps it) and starts with a syslog priority prefix (`<4>`).
"""

from __future__ import annotations

import os
import time

# The ABCs themselves, without importing the `collections` package (~2 ms): os has already
# imported this module, which collections.abc only re-exports.
from _collections_abc import Mapping, Sequence

LOGGER = "nri_sla.decision"
PATHS = ("nri", "hook")
OUTCOMES = ("enforced", "refused", "warned")
# Decision outcome -> level: refused means the container was not created.
OUTCOME_LEVELS = {"enforced": "info", "warned": "warning", "refused": "error"}
# Level -> syslog priority (what journald's prefix parsing understands).
PRIORITY = {"debug": 7, "info": 6, "warning": 4, "error": 3, "critical": 2}
_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_QUOTE_IF = frozenset(' ="\\')  # printable characters that need a quoted value
_QUOTED = str.maketrans({"\\": "\\\\", '"': '\\"'})  # printable text needs only these


class LoggingSetupError(ValueError):
    """An unknown log format, level, decision path or outcome."""


_second: list = [None, ""]  # the last whole second rendered, and its text


def iso_time(created: float) -> str:
    """UTC, millisecond precision: 2026-11-29T08:45:38.312Z."""
    whole = int(created)
    if _second[0] != whole:  # a busy plugin logs many lines per second: format it once
        _second[0], _second[1] = whole, time.strftime("%Y-%m-%dT%H:%M:%S",
                                                       time.gmtime(whole))
    return f"{_second[1]}.{int((created - whole) * 1000):03d}Z"


def _escape(c: str) -> str:
    if c in _ESCAPES:
        return _ESCAPES[c]
    # Other control and separator characters (ESC, NUL, U+2028, ...) could split the
    # line or drive a terminal when an annotation smuggles them in: spell them out.
    if c.isprintable():
        return c
    return f"\\u{ord(c):04x}" if ord(c) <= 0xFFFF else f"\\U{ord(c):08x}"


def logfmt_value(value: object) -> str:
    """Render one value: bare when safe, else double-quoted with escapes. Lists join with
    "; " and None is empty, so every line stays one line whatever the input holds."""
    kind = type(value)
    if kind is str:  # most values: exact type checks first, the ABC checks are slow
        text = value
    elif kind is int:
        text = str(value)
    elif value is None:
        text = ""
    elif isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, str):
        text = value
    elif isinstance(value, Mapping):
        text = ",".join(f"{k}:{v}" for k, v in value.items())
    elif isinstance(value, Sequence):
        # "; " and not ",": warning messages contain commas themselves.
        text = "; ".join(str(v) for v in value)
    else:
        text = str(value)
    if text.isprintable():  # the common case: no control characters at all
        if text and _QUOTE_IF.isdisjoint(text):
            return text
        return '"' + text.translate(_QUOTED) + '"'
    return '"' + "".join(_escape(c) for c in text) + '"'


def flatten(prefix: str, value: object, out: list) -> None:
    """{"cpu": {"quota": 1}} under "applied" -> "applied.cpu.quota=1" (for text lines)."""
    if value and (type(value) is dict or isinstance(value, Mapping)):
        for key, sub in value.items():
            flatten(f"{prefix}.{key}", sub, out)
    else:
        out.append(f"{prefix}={logfmt_value(value)}")


def text_line(created: float, level: str, logger: str, msg: str, fields: Mapping,
              exc: str | None = None, journal: bool = False) -> str:
    """One logfmt line (no newline). `journal`: no ts, a `<priority>` prefix instead."""
    pairs = [] if journal else [f"ts={iso_time(created)}"]
    pairs += (f"level={logfmt_value(level)}", f"logger={logfmt_value(logger)}",
              f"msg={logfmt_value(msg)}")
    for key, value in fields.items():
        flatten(key, value, pairs)
    if exc:
        pairs.append(f"exc={logfmt_value(exc)}")
    line = " ".join(pairs)
    return f"<{PRIORITY.get(level, 6)}>{line}" if journal else line


def json_line(created: float, level: str, logger: str, msg: str, fields: Mapping,
              exc: str | None = None) -> str:
    """One JSON object (no newline); nested values (applied, warnings) stay structured."""
    import json  # only JSON lines pay for it (the hook's default is text)

    obj: dict = {"ts": iso_time(created), "level": level, "logger": logger, "msg": msg}
    obj.update(fields)
    if exc:
        obj["exc"] = exc
    return json.dumps(obj, default=str, separators=(",", ":"), sort_keys=False)


def journald_fd(fd: int) -> bool:
    """True when `fd` is the journald stream systemd gave us: $JOURNAL_STREAM is
    "DEV:INODE" of that stream (a child that inherits the variable but writes
    elsewhere must not drop its timestamps)."""
    value = os.environ.get("JOURNAL_STREAM", "")
    if not value:
        return False
    try:
        dev, ino = (int(part) for part in value.split(":", 1))
        st = os.fstat(fd)
    except (ValueError, OSError):
        return False
    return (st.st_dev, st.st_ino) == (dev, ino)


def decision_fields(pod_ns: str, pod_name: str, container: str, path: str, outcome: str,
                    applied: Mapping | None = None, warnings: Sequence[str] = (),
                    error: str | None = None) -> tuple[str, dict]:
    """(level, fields) of one container decision: who, by which path, what happened, what
    was set. enforced -> info, warned (soft SLA, something not applied) -> warning,
    refused (the container was not created) -> error."""
    if path not in PATHS:
        raise LoggingSetupError(f"decision path {path!r} is not one of {', '.join(PATHS)}")
    if outcome not in OUTCOMES:
        raise LoggingSetupError(
            f"decision outcome {outcome!r} is not one of {', '.join(OUTCOMES)}")
    fields: dict = {"pod": f"{pod_ns}/{pod_name}", "container": container, "path": path,
                    "outcome": outcome, "applied": dict(applied or {}),
                    "warnings": list(warnings)}
    if error is not None:
        fields["error"] = error
    return OUTCOME_LEVELS[outcome], fields


def decision_line(fmt: str, pod_ns: str, pod_name: str, container: str, path: str,
                  outcome: str, applied: Mapping | None, warnings: Sequence[str],
                  error: str | None, created: float, journal: bool = False) -> str:
    """The decision line (no newline) as `nri_plugin.ops.logsetup.log_decision` writes it through
    a handler in `fmt` ("text" | "json"), as of time `created`."""
    level, fields = decision_fields(pod_ns, pod_name, container, path, outcome, applied,
                                    warnings, error)
    if fmt == "json":
        return json_line(created, level, LOGGER, "sla decision", fields)
    return text_line(created, level, LOGGER, "sla decision", fields, journal=journal)
