"""A deliberately small YAML reader for annotation values and the node config file.

Annotations come from anyone who can create a pod, so the reader refuses, before building
any Python object: text over a size limit (checked before parsing), anchors and aliases
(the "billion laughs" expansion), explicit tags (``!!python/object``, ``!!binary``,
custom ``!tags``), nesting deeper than a limit, too many nodes, duplicate mapping keys,
non-string keys and more than one document (``load_all``: more than a given number of
documents, for Kubernetes manifests).

It walks the event stream of PyYAML's parser (the libyaml C parser when available) and
builds plain dicts, lists and scalars itself, resolving plain scalars with the YAML 1.2
core schema: ``yes``/``no``/``on``/``off`` stay strings (no "Norway problem"), ``1:30``
is not sexagesimal, ``017`` is 17. Floats remember their source text so that quantities
such as ``1.1e10`` are read exactly.
"""

from __future__ import annotations

import re

import yaml

from nri_plugin.errors import InvalidInput
from nri_plugin.text.fields import key_text

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

_NULL = frozenset({"", "~", "null", "Null", "NULL"})
_TRUE = frozenset({"true", "True", "TRUE"})
_FALSE = frozenset({"false", "False", "FALSE"})
_INT = re.compile(r"[-+]?[0-9]+", re.ASCII)
_FLOAT = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?", re.ASCII)
_INF = frozenset({".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF"})
_NINF = frozenset({"-.inf", "-.Inf", "-.INF"})
_NAN = frozenset({".nan", ".NaN", ".NAN"})
_MAX_INT_DIGITS = 40


class YamlFloat(float):
    """A float read from YAML, with the exact text it was written as (``.text``)."""

    text: str

    def __new__(cls, text: str) -> YamlFloat:
        obj = super().__new__(cls, text)
        obj.text = text
        return obj


class YamlProblem(InvalidInput, ValueError):
    """Unsafe or malformed YAML. ``path`` is the dotted field path ("" = document)."""

    def __init__(self, path: str, message: str) -> None:
        self.path = path
        self.message = message
        super().__init__(f"{path} {message}" if path else message)


def _join(path: str, segment: str | int) -> str:
    if isinstance(segment, int):
        return f"{path}[{segment}]"
    segment = key_text(segment)
    return f"{path}.{segment}" if path else segment


def _where(event: yaml.Event) -> str:
    mark = getattr(event, "start_mark", None)
    return f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""


def _scalar(event: yaml.ScalarEvent, path: str) -> object:
    value = event.value
    if event.style or not event.implicit[0]:
        return value  # quoted or block scalars are always strings
    if value in _NULL:
        return None
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    if _INT.fullmatch(value):
        if len(value.lstrip("+-")) > _MAX_INT_DIGITS:
            raise YamlProblem(path, f"is a number with {len(value)} digits: too large")
        return int(value)
    if _FLOAT.fullmatch(value) or value in _INF or value in _NINF or value in _NAN:
        if value in _INF:
            return YamlFloat("inf")
        if value in _NINF:
            return YamlFloat("-inf")
        if value in _NAN:
            return YamlFloat("nan")
        if len(value) > _MAX_INT_DIGITS:
            raise YamlProblem(path, f"is a number with {len(value)} characters: too long")
        return YamlFloat(value)
    return value


def _too_big(text: str, max_bytes: int) -> str | None:
    """Reason the text is refused before parsing, or None."""
    if len(text) > max_bytes:  # a str has at most as many characters as UTF-8 bytes
        return f"is {len(text)} characters; at most {max_bytes} bytes are allowed"
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        return "is not valid Unicode text (lone surrogate characters)"
    if size > max_bytes:
        return f"is {size} bytes; at most {max_bytes} bytes are allowed"
    return None


def load(text: str, *, max_bytes: int, max_depth: int = 8, max_nodes: int = 4096) -> object:
    """Parse one YAML document safely (see the module doc). Empty text gives None."""
    documents = _load(text, max_bytes, max_depth, max_nodes, max_documents=1)
    return documents[0] if documents else None


def load_all(text: str, *, max_bytes: int, max_depth: int, max_nodes: int,
             max_documents: int) -> list[object]:
    """Parse a stream of YAML documents safely, with the same refusals as `load`;
    `max_nodes` counts the values of all documents together."""
    return _load(text, max_bytes, max_depth, max_nodes, max_documents)


def _load(text: str, max_bytes: int, max_depth: int, max_nodes: int,
          max_documents: int) -> list[object]:
    if not isinstance(text, str):
        raise YamlProblem("", f"must be text, got {type(text).__name__}")
    reason = _too_big(text, max_bytes)
    if reason:
        raise YamlProblem("", reason)
    if "\x00" in text:
        raise YamlProblem("", "contains a NUL character")
    try:
        return _compose(yaml.parse(text, Loader=_Loader), max_depth, max_nodes,
                        max_documents)
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        mark = getattr(exc, "problem_mark", None)
        at = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        raise YamlProblem("", f"is not valid YAML: {problem}{at}") from None


def _compose(events, max_depth: int, max_nodes: int, max_documents: int) -> list[object]:
    # Stack frames: [container, path, pending key (mappings) or None, key-is-next flag].
    # Events are pulled one at a time, so parsing stops at the first refusal.
    stack: list[list] = []
    root: object = None
    documents: list[object] = []
    nodes = 0

    def attach(value: object, event: yaml.Event) -> None:
        nonlocal root
        if not stack:
            root = value
            return
        frame = stack[-1]
        container = frame[0]
        if isinstance(container, list):
            container.append(value)
        elif frame[3]:  # this scalar is a key (taken as written, always a str)
            if value in container:
                raise YamlProblem(_join(frame[1], value), f"is given twice{_where(event)}")
            frame[2] = value
            frame[3] = False
        else:
            container[frame[2]] = value
            frame[3] = True

    def child_path() -> str:
        if not stack:
            return ""
        frame = stack[-1]
        if isinstance(frame[0], list):
            return _join(frame[1], len(frame[0]))
        return frame[1] if frame[3] else _join(frame[1], frame[2])

    for event in events:
        if isinstance(event, yaml.DocumentStartEvent):
            if len(documents) == max_documents:
                many = "one YAML document" if max_documents == 1 else \
                    f"{max_documents} YAML documents"
                raise YamlProblem("", f"holds more than {many}{_where(event)}")
            continue
        if isinstance(event, yaml.DocumentEndEvent):
            documents.append(root)
            root = None
            continue
        if isinstance(event, yaml.StreamStartEvent | yaml.StreamEndEvent):
            continue
        path = child_path()
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
            raise YamlProblem(path, "uses a YAML anchor or alias (&name / *name); these "
                                    f"are not allowed, write the value out{_where(event)}")
        if isinstance(event, yaml.SequenceEndEvent | yaml.MappingEndEvent):
            container = stack.pop()[0]
            attach(container, event)
            continue
        if getattr(event, "tag", None) is not None:
            raise YamlProblem(path, f"has an explicit YAML tag {event.tag[:40]!r}; tags "
                                    f"are not allowed{_where(event)}")
        nodes += 1
        if nodes > max_nodes:
            raise YamlProblem("", f"has more than {max_nodes} values{_where(event)}")
        if isinstance(event, yaml.ScalarEvent):
            if stack and isinstance(stack[-1][0], dict) and stack[-1][3]:
                attach(event.value, event)  # keys are taken as written
            else:
                attach(_scalar(event, path), event)
        elif isinstance(event, yaml.SequenceStartEvent | yaml.MappingStartEvent):
            if stack and isinstance(stack[-1][0], dict) and stack[-1][3]:
                raise YamlProblem(stack[-1][1], "has a key that is a list or mapping; keys "
                                                f"must be plain strings{_where(event)}")
            if len(stack) >= max_depth:
                raise YamlProblem(path, f"is nested more than {max_depth} levels deep"
                                        f"{_where(event)}")
            container = [] if isinstance(event, yaml.SequenceStartEvent) else {}
            stack.append([container, path, None, True])
    return documents
