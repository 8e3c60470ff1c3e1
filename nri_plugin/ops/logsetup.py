"""Structured logs: one line per event, as logfmt-style text or as JSON.

`setup_logging(format, level)` configures the `nri_sla` logger tree (every nri-sla
logger is named under it, whatever the package is called) once at start-up;
`log_decision(event)` writes the one line per container decision that operators grep
for (see docs/operations.md; the event and its rendering: nri_plugin.ops.event).
Extra key/values ride on a record as `extra={"fields": {...}}` (or via `log_event`) and
are rendered by both formatters.

Under systemd the output goes to journald, which stamps every line itself: when
$JOURNAL_STREAM names our stderr, text lines carry no timestamp and start with a
syslog priority prefix (`<4>`), so `journalctl -p warning` filters by level.

`setup_logging(..., defer_decisions=True)` (what `nri-sla run` asks): a decision made
while an event loop runs is rendered and written when the loop's current turn ends, that
is after the answer to the runtime's request has been written (the connection flushes
it at the end of the turn), so the runtime does not wait for the line; any other line
writes the waiting ones first, so the log keeps its order.
"""

from __future__ import annotations

import logging
import sys
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TextIO

from nri_plugin.ops.event import (
    LOGGER,
    MESSAGE,
    OUTCOMES,
    PATHS,
    DecisionEvent,
    LoggingSetupError,
    journald_fd,
    json_line,
    logfmt_value,
    render_event,
    text_line,
)

if TYPE_CHECKING:
    from asyncio import AbstractEventLoop

    from nri_plugin.ops.event import LogFormat

__all__ = [
    "FORMATS",
    "LEVELS",
    "LOGGER_NAME",
    "OUTCOMES",
    "PATHS",
    "JsonFormatter",
    "LoggingSetupError",
    "OwnHandler",
    "TextFormatter",
    "journald_stream",
    "log_decision",
    "log_event",
    "logfmt_value",
    "setup_logging",
]

LOGGER_NAME = "nri_sla"
FORMATS: tuple[LogFormat, ...] = ("text", "json")
LEVELS = ("debug", "info", "warning", "error", "critical")


def journald_stream(stream: TextIO) -> bool:
    """True when `stream` is the journald stream systemd gave us ($JOURNAL_STREAM)."""
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):  # not a real file (StringIO)
        return False
    return journald_fd(fd)


# -- rendering: nri_plugin.ops.event (shared with the OCI hook, which has no `logging`) --
class TextFormatter(logging.Formatter):
    """`ts=... level=info logger=nri_sla.plugin msg="..." key=value ...`"""

    def __init__(self, journald: bool = False) -> None:
        super().__init__()
        self.journald = journald

    def format(self, record: logging.LogRecord) -> str:
        exc = self.formatException(record.exc_info) if record.exc_info else None
        return text_line(
            record.created,
            record.levelname.lower(),
            record.name,
            record.getMessage(),
            getattr(record, "fields", {}),
            exc,
            journal=self.journald,
        )


class JsonFormatter(logging.Formatter):
    """One JSON object per line; nested values (applied, warnings) stay structured."""

    def format(self, record: logging.LogRecord) -> str:
        exc = self.formatException(record.exc_info) if record.exc_info else None
        return json_line(
            record.created,
            record.levelname.lower(),
            record.name,
            record.getMessage(),
            getattr(record, "fields", {}),
            exc,
        )


# -- set-up ---------------------------------------------------------------------------------
class OwnHandler(logging.StreamHandler):
    """setup_logging's handler: decision lines waiting for the end of the loop's turn
    (`defer_decisions`) are written before any other line, and by `flush` (which
    `logging.shutdown` calls at exit), so none is lost or out of order."""

    def emit(self, record: logging.LogRecord) -> None:
        if _waiting:
            _write_waiting()
        super().emit(record)

    def flush(self) -> None:
        if _waiting:
            _write_waiting()
        super().flush()


def setup_logging(
    format: LogFormat = "text",
    level: str | int = "info",
    stream: TextIO | None = None,
    defer_decisions: bool = False,
) -> logging.Logger:
    """Send the `nri_plugin` logger tree to `stream` (stderr) in `format`. Calling it again
    replaces the previous handler instead of duplicating lines. `defer_decisions`: decision
    lines made while an event loop runs are written at the end of its turn (the module's
    docstring says why)."""
    if format not in FORMATS:
        raise LoggingSetupError(f"log format {format!r} is not one of {', '.join(FORMATS)}")
    levelno = _level(level)
    stream = stream if stream is not None else sys.stderr
    formatter: logging.Formatter = (
        JsonFormatter() if format == "json" else TextFormatter(journald=journald_stream(stream))
    )
    handler = OwnHandler(stream)
    handler.setFormatter(formatter)
    _write_waiting()  # lines decided before: where they would have gone
    global _running_loop
    _running_loop = None
    if defer_decisions:  # imported only then: every CLI command imports this module
        import asyncio

        _running_loop = asyncio._get_running_loop
    logger = logging.getLogger(LOGGER_NAME)
    for old in [h for h in logger.handlers if isinstance(h, OwnHandler)]:
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


def log_decision(event: DecisionEvent, logger: logging.Logger | None = None) -> None:
    """One line per container decision (nri_plugin.ops.event says what it holds).

    Written once per CreateContainer, so when the only handlers that would take it are
    setup_logging's own (no filters), the line is rendered by `render_event` and written
    to their streams directly: the same bytes their formatter would make of the record,
    without building one (the largest part of a create's cost otherwise). Any other
    set-up (a handler or filter someone added, propagation to the root) goes through
    `logging` as every other line does. Deferred (setup_logging's `defer_decisions`, in a
    running loop), only the event and its time are kept here: the level, the handlers
    and the line are worked out when the loop's turn ends, after the answer."""
    created = time.time()
    if _running_loop is not None:  # only the time and the event before the answer
        loop = _running_loop()  # (None outside a loop: written now)
        if loop is not None:
            global _waiting_loop
            if not _waiting or _waiting_loop is not loop:
                loop.call_soon(_write_waiting)
                _waiting_loop = loop
            _waiting.append((event, created, logger))
            return
    _write_decision(event, created, logger)


# What tells the loop running now (None outside one) when decision lines wait for the end
# of its turn (setup_logging's `defer_decisions`); None: they are written at once.
_running_loop: Callable[[], AbstractEventLoop | None] | None = None
# The lines waiting, in order (event, its time, logger), and the loop that has a
# _write_waiting scheduled for them.
_waiting: deque[tuple[DecisionEvent, float, logging.Logger | None]] = deque()
_waiting_loop: AbstractEventLoop | None = None


def _write_waiting() -> None:
    """Write the decision lines that wait for the end of the loop's turn. One at a time
    off the queue: another thread's line (OwnHandler.emit) may write them meanwhile, and
    a line queued while they are written is not lost."""
    while _waiting:
        try:
            waiting = _waiting.popleft()
        except IndexError:  # another thread wrote the last one
            return
        _write_decision(*waiting)


def _write_decision(event: DecisionEvent, created: float, logger: logging.Logger | None) -> None:
    logger = logger or _DECISIONS
    level = _LEVELNO[event.level]
    if not logger.isEnabledFor(level):
        return
    handlers = _own_handlers(logger, level)
    if handlers is None:
        log_event(logger, level, MESSAGE, **event.fields())
        return
    for handler in handlers:
        formatter = handler.formatter
        journal = isinstance(formatter, TextFormatter) and formatter.journald
        line = render_event(
            event, "json" if isinstance(formatter, JsonFormatter) else "text", created, journal
        )
        with handler.lock:  # type: ignore[union-attr]  # StreamHandler always has one
            try:
                handler.stream.write(line + handler.terminator)
                handler.stream.flush()
            except Exception:  # as StreamHandler.emit: reported, never raised
                handler.handleError(logger.makeRecord(logger.name, level, "", 0, MESSAGE, (), None))


_LEVELNO = {name: getattr(logging, name.upper()) for name in LEVELS}
_DECISIONS = logging.getLogger(LOGGER)


def _own_handlers(logger: logging.Logger, level: int) -> list[OwnHandler] | None:
    """The handlers `logger.log(level, ...)` would call, when each is setup_logging's own
    and no filter is in the way; else None. Walks the tree as Logger.callHandlers does."""
    found: list[OwnHandler] = []
    current: logging.Logger | None = logger
    while current is not None:
        if current.filters:
            return None
        for handler in current.handlers:
            if not isinstance(handler, OwnHandler) or handler.filters:
                return None
            if level >= handler.level:
                found.append(handler)
        current = current.parent if current.propagate else None
    return found if found else None
