"""The decision event both front-ends log, and nri-sla's structured lines, without `logging`.

One container decision is one `DecisionEvent` (who, by which path, what happened, what
was applied), filled the same way by the plugin and the OCI hook (`applied_fields` of the
container's record), and rendered by one function, `render_event`: the plugin's
`logsetup.log_decision` writes it to the configured handlers, the hook to
NRI_SLA_HOOK_LOG. `logsetup`'s formatters render every other line with `text_line` and
`json_line`. The hook runs for every container start, so this module imports neither
`logging` nor `typing`/`collections.abc` (together they would triple a cached hook run's
time), nor `os` (with `_collections_abc` ~5.6 M instructions, a seventh of a cached run:
nri_plugin.posixfs says why), and `json` only when a JSON line is asked for.

Text: `ts=... level=info logger=nri_sla.decision msg="sla decision" key=value ...`;
nested mappings flatten to dotted keys (applied.cpu.quota=1). Under journald the line has
no `ts` (journald stamps it) and starts with a syslog priority prefix (`<4>`).
"""

import posix
import time

from nri_plugin.errors import InvalidInput
from nri_plugin.posixfs import getenv
from nri_plugin.value import Value

TYPE_CHECKING = False  # typing itself costs start-up time; only checkers need it
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Literal, TypeAlias, TypeGuard

    LogFormat: TypeAlias = Literal["text", "json"]  # a log line's, decision lines' too

LOGGER = "nri_sla.decision"
MESSAGE = "sla decision"
PATHS = ("nri", "hook")
OUTCOMES = ("enforced", "refused", "warned")
# Decision outcome -> level: refused means the container was not created.
OUTCOME_LEVELS = {"enforced": "info", "warned": "warning", "refused": "error"}
# Level -> syslog priority (what journald's prefix parsing understands).
PRIORITY = {"debug": 7, "info": 6, "warning": 4, "error": 3, "critical": 2}
_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_QUOTED = str.maketrans({"\\": "\\\\", '"': '\\"'})  # printable text needs only these


class LoggingSetupError(InvalidInput, ValueError):
    """An unknown log format, level (the node config's or the command line's: exit status
    2), decision path or outcome."""


_second: list = [None, ""]  # the last whole second rendered, and its text


def iso_time(created: float) -> str:
    """UTC, millisecond precision: 2026-11-29T08:45:38.312Z."""
    whole = int(created)
    if _second[0] != whole:  # a busy plugin logs many lines per second: format it once
        _second[0], _second[1] = whole, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole))
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
    if type(value) is str:  # most values: exact type checks first, the ABC checks are slow
        text = value
    elif type(value) is int:
        text = str(value)
    elif value is None:
        text = ""
    elif isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, str):
        text = value
    elif _is_mapping(value):
        text = ",".join(f"{k}:{v}" for k, v in value.items())
    elif _is_sequence(value):
        # "; " and not ",": warning messages contain commas themselves.
        text = "; ".join(str(v) for v in value)
    else:
        text = str(value)
    if text.isprintable():  # the common case: no control characters at all
        # The printable characters that need a quoted value, each looked for by a C
        # substring search: a third of the time of one set lookup per character.
        if text and not (" " in text or "=" in text or '"' in text or "\\" in text):
            return text
        return '"' + text.translate(_QUOTED) + '"'
    return '"' + "".join(_escape(c) for c in text) + '"'


# Mappings and sequences other than dict, list and tuple (a protobuf map or repeated
# field, a MappingProxyType) are told by collections.abc's ABCs, imported at first need
# and not at the top: the hook renders only dicts, lists and strings, and
# `_collections_abc` would cost its cached run ~4 M instructions, while every other
# process has it loaded already (`os` imports it at start-up): there the import is a lookup.
def _is_mapping(value: object) -> "TypeGuard[Mapping]":
    if isinstance(value, dict):
        return True
    if isinstance(value, (str, int, float, list, tuple)):
        return False
    from _collections_abc import Mapping

    return isinstance(value, Mapping)


def _is_sequence(value: object) -> "TypeGuard[Sequence]":
    if isinstance(value, (list, tuple)):
        return True
    if isinstance(value, (str, int, float, dict)):
        return False
    from _collections_abc import Sequence

    return isinstance(value, Sequence)


def flatten(prefix: str, value: object, out: list) -> None:
    """{"cpu": {"quota": 1}} under "applied" -> "applied.cpu.quota=1" (for text lines)."""
    if value and _is_mapping(value):
        for key, sub in value.items():
            flatten(f"{prefix}.{key}", sub, out)
    else:
        out.append(f"{prefix}={logfmt_value(value)}")


def text_line(
    created: float,
    level: str,
    logger: str,
    msg: str,
    fields: "Mapping",
    exc: str | None = None,
    journal: bool = False,
) -> str:
    """One logfmt line (no newline). `journal`: no ts, a `<priority>` prefix instead."""
    pairs = [] if journal else [f"ts={iso_time(created)}"]
    pairs += (
        f"level={logfmt_value(level)}",
        f"logger={logfmt_value(logger)}",
        f"msg={logfmt_value(msg)}",
    )
    for key, value in fields.items():
        flatten(key, value, pairs)
    if exc:
        pairs.append(f"exc={logfmt_value(exc)}")
    line = " ".join(pairs)
    return f"<{PRIORITY.get(level, 6)}>{line}" if journal else line


def json_line(
    created: float, level: str, logger: str, msg: str, fields: "Mapping", exc: str | None = None
) -> str:
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
    value = getenv("JOURNAL_STREAM")
    if not value:
        return False
    try:
        dev, ino = (int(part) for part in value.split(":", 1))
        st = posix.fstat(fd)
    except (ValueError, OSError):
        return False
    return (st.st_dev, st.st_ino) == (dev, ino)


RECORD_FRAMING = ("v", "path")  # the record's own fields, not what was applied


def applied_fields(record: "Mapping") -> dict:
    """What was applied, as the event shows it: the container's record (plan.record's
    body) without its version and path, as its JSON text holds it (keys sorted at every
    level, tuples as lists). Both front-ends fill `applied` with this, so one decision
    logs the same fields whichever path enforced it (the hook's cache keeps it as JSON)."""
    return {key: _as_json(record[key]) for key in sorted(record) if key not in RECORD_FRAMING}


def _as_json(value: object) -> object:
    if type(value) is dict:
        return {key: _as_json(value[key]) for key in sorted(value)}
    if type(value) is list or type(value) is tuple:
        return [_as_json(item) for item in value]
    return value


class DecisionEvent(Value):
    """One container decision as the log shows it: enforced -> info, warned (soft SLA,
    something not applied) -> warning, refused (the container was not created) -> error."""

    __slots__ = ("applied", "container", "error", "namespace", "outcome", "path", "pod", "warnings")

    def __init__(
        self,
        namespace: str,
        pod: str,
        container: str,
        path: str,
        outcome: str,
        applied: "Mapping | None" = None,
        warnings: "Sequence[str]" = (),
        error: str | None = None,
    ) -> None:
        if path not in PATHS:
            raise LoggingSetupError(f"decision path {path!r} is not one of {', '.join(PATHS)}")
        if outcome not in OUTCOMES:
            raise LoggingSetupError(
                f"decision outcome {outcome!r} is not one of {', '.join(OUTCOMES)}"
            )
        self.namespace = namespace
        self.pod = pod
        self.container = container
        self.path = path  # nri | hook
        self.outcome = outcome  # enforced | warned | refused
        self.applied = applied or {}  # applied_fields of the container's record
        self.warnings = warnings
        self.error = error

    @property
    def level(self) -> str:
        return OUTCOME_LEVELS[self.outcome]

    def fields(self) -> dict:
        """The event's key/values, in the order the line shows them."""
        fields: dict = {
            "pod": f"{self.namespace}/{self.pod}",
            "container": self.container,
            "path": self.path,
            "outcome": self.outcome,
            "applied": dict(self.applied),
            "warnings": list(self.warnings),
        }
        if self.error is not None:
            fields["error"] = self.error
        return fields


def render_event(
    event: DecisionEvent, fmt: "LogFormat", created: float, journal: bool = False
) -> str:
    """The decision line (no newline) in `fmt` ("text" | "json") as of time `created`:
    what `text_line`/`json_line` make of the event's fields, the bytes
    `logsetup.log_decision` writes through a handler in that format."""
    if fmt == "json":
        return json_line(created, event.level, LOGGER, MESSAGE, event.fields())
    level = event.level
    # text_line's rendering, with the parts that repeat computed once: the head, and the
    # flattened `applied` of a plan every replica shares (the plugin keeps that mapping);
    # the warnings joined as logfmt_value joins a list.
    warnings = event.warnings
    line = (
        f"{_HEADS[level]} pod={logfmt_value(f'{event.namespace}/{event.pod}')} "
        f"container={logfmt_value(event.container)} path={event.path} "
        f"outcome={event.outcome} {_applied_text(event.applied)} warnings="
        f"{logfmt_value('; '.join(map(str, warnings))) if warnings else _NO_WARNINGS}"
    )
    if event.error is not None:
        line = f"{line} error={logfmt_value(event.error)}"
    return f"<{PRIORITY[level]}>{line}" if journal else f"ts={iso_time(created)} {line}"


_NO_WARNINGS = logfmt_value("")  # most decisions
_HEADS = {
    level: f"level={level} logger={LOGGER} msg={logfmt_value(MESSAGE)}"
    for level in OUTCOME_LEVELS.values()
}
APPLIED_TEXT_LIMIT = 512  # remembered renderings of `applied` mappings
# id(applied) -> (that mapping, kept so that its id stays its own; its text).
_applied_texts: dict = {}


def _applied_text(applied: "Mapping") -> str:
    """`applied` flattened (applied.cpu_quota=1 ...), once per mapping: the plugin hands
    every replica of a reusable plan the same one, unchanged (applied_fields' values are
    never changed once made)."""
    known = _applied_texts.get(id(applied))
    if known is not None and known[0] is applied:
        return known[1]
    pairs: list = []
    flatten("applied", applied, pairs)
    text = " ".join(pairs)
    if len(_applied_texts) >= APPLIED_TEXT_LIMIT:
        _applied_texts.clear()
    _applied_texts[id(applied)] = (applied, text)
    return text
