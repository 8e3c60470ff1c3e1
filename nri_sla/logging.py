"""Structured logs: one line per event, as logfmt-style text or as JSON.

`setup_logging(format, level)` configures the `nri_sla` logger tree once at start-up;
`log_decision(...)` writes the one line per container decision that operators grep
for (see docs/operations.md). Extra key/values ride on a record as `extra={"fields":
{...}}` (or via `log_event`) and are rendered by both formatters.

Under systemd the output goes to journald, which stamps every line itself: when
$JOURNAL_STREAM names our stderr, text lines carry no timestamp and start with a
syslog priority prefix (`<4>`), so `journalctl -p warning` filters by level.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

LOGGER_NAME = "nri_sla"
FORMATS = ("text", "json")
LEVELS = ("debug", "info", "warning", "error", "critical")
PATHS = ("nri", "hook")
OUTCOMES = ("enforced", "refused", "warned")

# Python level -> syslog priority (what journald's prefix parsing understands).
_SYSLOG_PRIORITY = {logging.DEBUG: 7, logging.INFO: 6, logging.WARNING: 4,
                    logging.ERROR: 3, logging.CRITICAL: 2}


class LoggingSetupError(ValueError):
    """An unknown log format, level, decision path or outcome."""


def journald_stream(stream: TextIO) -> bool:
    """True when `stream` is the journald stream systemd gave us: $JOURNAL_STREAM is
    "DEV:INODE" of that stream (a child that inherits the variable but writes
    elsewhere must not drop its timestamps)."""
    value = os.environ.get("JOURNAL_STREAM", "")
    if not value:
        return False
    try:
        dev, ino = (int(part) for part in value.split(":", 1))
        st = os.fstat(stream.fileno())
    except (ValueError, OSError, AttributeError):
        return False
    return (st.st_dev, st.st_ino) == (dev, ino)


# -- rendering ----------------------------------------------------------------------------
def _flatten(prefix: str, value: Any, out: dict[str, Any]) -> None:
    """{"cpu": {"quota": 1}} under "applied" -> applied.cpu.quota=1 (for text lines)."""
    if isinstance(value, Mapping) and value:
        for key, sub in value.items():
            _flatten(f"{prefix}.{key}", sub, out)
    else:
        out[prefix] = value


_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(c: str) -> str:
    if c in _ESCAPES:
        return _ESCAPES[c]
    # Other control and separator characters (ESC, NUL, U+2028, ...) could split the
    # line or drive a terminal when an annotation smuggles them in: spell them out.
    if c.isprintable():
        return c
    return f"\\u{ord(c):04x}" if ord(c) <= 0xFFFF else f"\\U{ord(c):08x}"


def logfmt_value(value: Any) -> str:
    """Render one value: bare when safe, else double-quoted with escapes. Lists join with
    "; " and None is empty, so every line stays one line whatever the input holds."""
    if value is None:
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
    if text and not any(c in text for c in ' ="\\\n\r\t') and text.isprintable():
        return text
    return '"' + "".join(_escape(c) for c in text) + '"'


class TextFormatter(logging.Formatter):
    """`ts=... level=info logger=nri_sla.plugin msg="..." key=value ...`"""

    def __init__(self, journald: bool = False) -> None:
        super().__init__()
        self.journald = journald

    def format(self, record: logging.LogRecord) -> str:
        pairs: dict[str, Any] = {}
        if not self.journald:
            pairs["ts"] = _iso_time(record.created)
        pairs["level"] = record.levelname.lower()
        pairs["logger"] = record.name
        pairs["msg"] = record.getMessage()
        for key, value in getattr(record, "fields", {}).items():
            _flatten(key, value, pairs)
        if record.exc_info:
            pairs["exc"] = self.formatException(record.exc_info)
        line = " ".join(f"{k}={logfmt_value(v)}" for k, v in pairs.items())
        if self.journald:
            line = f"<{_SYSLOG_PRIORITY.get(record.levelno, 6)}>{line}"
        return line


class JsonFormatter(logging.Formatter):
    """One JSON object per line; nested values (applied, warnings) stay structured."""

    def format(self, record: logging.LogRecord) -> str:
        obj: dict[str, Any] = {
            "ts": _iso_time(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        obj.update(getattr(record, "fields", {}))
        if record.exc_info:
            obj["exc"] = self.formatException(record.exc_info)
        return json.dumps(obj, default=str, separators=(",", ":"), sort_keys=False)


def _iso_time(created: float) -> str:
    millis = int((created % 1) * 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created)) + f".{millis:03d}Z"


# -- set-up ---------------------------------------------------------------------------------
_HANDLER_MARK = "_nri_sla_handler"


def setup_logging(format: str = "text", level: str | int = "info",
                  stream: TextIO | None = None) -> logging.Logger:
    """Send the `nri_sla` logger tree to `stream` (stderr) in `format`. Calling it again
    replaces the previous handler instead of duplicating lines."""
    if format not in FORMATS:
        raise LoggingSetupError(f"log format {format!r} is not one of {', '.join(FORMATS)}")
    levelno = _level(level)
    stream = stream if stream is not None else sys.stderr
    formatter: logging.Formatter = (JsonFormatter() if format == "json"
                                    else TextFormatter(journald=journald_stream(stream)))
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatter)
    setattr(handler, _HANDLER_MARK, True)
    logger = logging.getLogger(LOGGER_NAME)
    for old in [h for h in logger.handlers if getattr(h, _HANDLER_MARK, False)]:
        logger.removeHandler(old)
    logger.addHandler(handler)
    logger.setLevel(levelno)
    logger.propagate = False  # no second copy through a root handler someone else set
    return logger


def _level(level: str | int) -> int:
    if isinstance(level, int) and not isinstance(level, bool):
        return level
    if isinstance(level, str) and level.lower() in LEVELS:
        return int(getattr(logging, level.upper()))
    raise LoggingSetupError(f"log level {level!r} is not one of {', '.join(LEVELS)}")


def log_event(logger: logging.Logger, level: int, msg: str, **fields: Any) -> None:
    """Log `msg` with structured key/values."""
    logger.log(level, msg, extra={"fields": fields})


def log_decision(pod_ns: str, pod_name: str, container: str, path: str, outcome: str,
                 applied: Mapping[str, Any] | None = None,
                 warnings: Sequence[str] = (), error: str | None = None,
                 logger: logging.Logger | None = None) -> None:
    """One line per container decision: who, by which path, what happened, what was set.

    enforced -> info, warned (soft SLA, something not applied) -> warning,
    refused (the container was not created) -> error.
    """
    if path not in PATHS:
        raise LoggingSetupError(f"decision path {path!r} is not one of {', '.join(PATHS)}")
    if outcome not in OUTCOMES:
        raise LoggingSetupError(
            f"decision outcome {outcome!r} is not one of {', '.join(OUTCOMES)}")
    level = {"enforced": logging.INFO, "warned": logging.WARNING,
             "refused": logging.ERROR}[outcome]
    fields: dict[str, Any] = {
        "pod": f"{pod_ns}/{pod_name}",
        "container": container,
        "path": path,
        "outcome": outcome,
        "applied": dict(applied or {}),
        "warnings": list(warnings),
    }
    if error is not None:
        fields["error"] = error
    log_event(logger or logging.getLogger(f"{LOGGER_NAME}.decision"), level, "sla decision",
              **fields)
