"""Structured logs: one line per event, as logfmt-style text or as JSON.

`setup_logging(format, level)` configures the `nri_sla` logger tree (every nri-sla
logger is named under it, whatever the package is called) once at start-up;
`log_decision(...)` writes the one line per container decision that operators grep
for (see docs/operations.md). Extra key/values ride on a record as `extra={"fields":
{...}}` (or via `log_event`) and are rendered by both formatters.

Under systemd the output goes to journald, which stamps every line itself: when
$JOURNAL_STREAM names our stderr, text lines carry no timestamp and start with a
syslog priority prefix (`<4>`), so `journalctl -p warning` filters by level.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

from nri_plugin.decision_line import (
    OUTCOMES,
    PATHS,
    LoggingSetupError,
    decision_fields,
    journald_fd,
    json_line,
    logfmt_value,
    text_line,
)

__all__ = [
    "FORMATS",
    "LEVELS",
    "LOGGER_NAME",
    "OUTCOMES",
    "PATHS",
    "JsonFormatter",
    "LoggingSetupError",
    "TextFormatter",
    "journald_stream",
    "log_decision",
    "log_event",
    "logfmt_value",
    "setup_logging",
]

LOGGER_NAME = "nri_sla"
FORMATS = ("text", "json")
LEVELS = ("debug", "info", "warning", "error", "critical")


def journald_stream(stream: TextIO) -> bool:
    """True when `stream` is the journald stream systemd gave us ($JOURNAL_STREAM)."""
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):  # not a real file (StringIO)
        return False
    return journald_fd(fd)


# -- rendering: nri_plugin.decision_line (shared with the OCI hook, which has no `logging`) --
class TextFormatter(logging.Formatter):
    """`ts=... level=info logger=nri_sla.plugin msg="..." key=value ...`"""

    def __init__(self, journald: bool = False) -> None:
        super().__init__()
        self.journald = journald

    def format(self, record: logging.LogRecord) -> str:
        exc = self.formatException(record.exc_info) if record.exc_info else None
        return text_line(record.created, record.levelname.lower(), record.name,
                         record.getMessage(), getattr(record, "fields", {}), exc,
                         journal=self.journald)


class JsonFormatter(logging.Formatter):
    """One JSON object per line; nested values (applied, warnings) stay structured."""

    def format(self, record: logging.LogRecord) -> str:
        exc = self.formatException(record.exc_info) if record.exc_info else None
        return json_line(record.created, record.levelname.lower(), record.name,
                         record.getMessage(), getattr(record, "fields", {}), exc)


# -- set-up ---------------------------------------------------------------------------------
_HANDLER_MARK = "_nri_sla_handler"


def setup_logging(format: str = "text", level: str | int = "info",
                  stream: TextIO | None = None) -> logging.Logger:
    """Send the `nri_plugin` logger tree to `stream` (stderr) in `format`. Calling it again
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
    # Neither formatter shows the caller, thread or process: skip collecting them for
    # every record (the logging HOWTO's "Optimization"; findCaller walks the stack).
    logging._srcfile = None
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
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
    level, fields = decision_fields(pod_ns, pod_name, container, path, outcome, applied,
                                    warnings, error)
    log_event(logger or logging.getLogger(f"{LOGGER_NAME}.decision"),
              _level(level), "sla decision", **fields)
