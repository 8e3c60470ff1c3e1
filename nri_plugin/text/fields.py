"""Field problems: what the SLA schema, the node config and manifests say about one value.

A converter raises :class:`FieldProblem` with a sentence that says what was expected
(``must be one of hard, soft, got x``); the reader that knows where the value came from
(annotation key, config file, manifest) puts the field path in front. Values and keys are
shown cut to 40 printable characters, so hostile input cannot flood a log line or a CRI
error.
"""

from __future__ import annotations

import re

from nri_plugin.text.errors import FieldProblem
from nri_plugin.topology.cpulist import parse_cpulist
from nri_plugin.topology.errors import CpuListError

TYPE_CHECKING = False  # `typing` costs the OCI hook start-up time; only checkers need it
if TYPE_CHECKING:
    from collections.abc import Callable


def show(value: object) -> str:
    """The value as the user wrote it, for messages: plain when short and printable, else
    quoted and cut to 40 characters so hostile input cannot flood a log line."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    text = getattr(value, "text", None) or (value if isinstance(value, str) else repr(value))
    if 0 < len(text) <= 40 and text.isprintable() and " " not in text and "'" not in text:
        return text
    return repr(text[:40] + "...") if len(text) > 40 else repr(text)


def key_text(key: str) -> str:
    """A mapping key as it may appear in a field path: printable, at most 40 characters
    (keys are user input and end up in log lines and CRI error messages)."""
    if len(key) <= 40 and key.isprintable() and key.strip() == key and key:
        return key
    return repr(key[:40] + "..." if len(key) > 40 else key)


_CAMEL = re.compile(r"(?<=[a-z0-9])([A-Z])")


def suggest(name: str, valid: list[str] | tuple[str, ...]) -> str | None:
    """Closest valid key: same key in kebab-case (rt_runtime, rtRuntime), else difflib."""
    kebab = (
        name
        if name.islower() and "_" not in name
        else _CAMEL.sub(r"-\1", name).replace("_", "-").lower()
    )
    if kebab in valid:
        return kebab
    import difflib  # only on the error path: keeps the hook's import time down

    close = difflib.get_close_matches(kebab, valid, n=1, cutoff=0.6)
    return close[0] if close else None


def unknown_key_message(name: str, valid: tuple[str, ...], parent: str) -> str:
    """The message for an unknown key `name` among `valid` (`parent`: the section)."""
    guess = suggest(name[:64], valid)
    hint = f"; did you mean {guess}?" if guess else ""
    where = f"{parent} fields" if parent else "top-level fields"
    return f"is not a known field{hint} ({where}: {', '.join(valid)})"


def choice(allowed: tuple[str, ...]) -> Callable[[object], str]:
    """A converter that accepts exactly one of `allowed`."""

    def convert(value: object) -> str:
        if not isinstance(value, str) or value not in allowed:
            raise FieldProblem(f"must be one of {', '.join(allowed)}, got {show(value)}")
        return value

    return convert


_ID_LIST = re.compile(r"[0-9]+(-[0-9]+)?(,[0-9]+(-[0-9]+)?)*", re.ASCII)


def parse_id_list(text: str, what: str, hi: int) -> tuple[int, ...]:
    """Kernel list syntax "0", "0-3", "0,2,4-5" -> sorted ids (topology.cpulist's parser,
    bounded by `hi` before any range is expanded); refuses duplicates."""
    if len(text) > 256 or not _ID_LIST.fullmatch(text):
        raise FieldProblem(f"must be {what} like 0, 0-1 or 0,2, got {show(text)}")
    try:
        ids = parse_cpulist(text, limit=hi, distinct=True)
    except CpuListError as exc:
        raise FieldProblem(f"{exc.detail} in {show(text)}") from None
    return check_ids(list(ids), text, hi)


def check_ids(ids: list[int], value: object, hi: int) -> tuple[int, ...]:
    """`ids` sorted, when there is at least one, none above `hi` and none twice."""
    if not ids:
        raise FieldProblem(f"must name at least one id, got {show(value)}")
    if max(ids) > hi:
        raise FieldProblem(f"ids must be from 0 to {hi}, got {show(value)}")
    if len(set(ids)) != len(ids):
        raise FieldProblem(f"names an id twice in {show(value)}")
    return tuple(sorted(ids))
