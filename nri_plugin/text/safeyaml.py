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
    # Events are pulled one at a time, so parsing stops at the first refusal.
    composer = _Composer(max_depth, max_nodes, max_documents)
    for event in events:
        composer.feed(event)
    return composer.documents


class _Frame:
    """A list or mapping being built: its path and, for a mapping, its pending key."""

    __slots__ = ("container", "expects_key", "key", "path")

    def __init__(self, container: list | dict, path: str) -> None:
        self.container = container
        self.path = path
        self.key: str | None = None
        # a mapping's next scalar is a key (taken as written), then that key's value
        self.expects_key = isinstance(container, dict)


class _Composer:
    """Plain documents from one event stream, refusing what the module doc lists: the
    documents (`feed` and `_start_document`), the refusals each value passes (`_value`),
    and the nesting the values are attached in (`_open`, `_attach`, `_child_path`)."""

    def __init__(self, max_depth: int, max_nodes: int, max_documents: int) -> None:
        self.max_depth = max_depth
        self.max_nodes = max_nodes
        self.max_documents = max_documents
        self.stack: list[_Frame] = []
        self.root: object = None
        self.documents: list[object] = []
        self.nodes = 0

    def feed(self, event: yaml.Event) -> None:
        if isinstance(event, yaml.DocumentStartEvent):
            self._start_document(event)
        elif isinstance(event, yaml.DocumentEndEvent):
            self.documents.append(self.root)
            self.root = None
        elif not isinstance(event, yaml.StreamStartEvent | yaml.StreamEndEvent):
            self._value(event)

    def _start_document(self, event: yaml.Event) -> None:
        if len(self.documents) == self.max_documents:
            many = "one YAML document" if self.max_documents == 1 else \
                f"{self.max_documents} YAML documents"
            raise YamlProblem("", f"holds more than {many}{_where(event)}")

    def _value(self, event: yaml.Event) -> None:
        """A scalar, an alias, or a list or mapping starting or ending."""
        path = self._child_path()
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
            raise YamlProblem(path, "uses a YAML anchor or alias (&name / *name); these "
                                    f"are not allowed, write the value out{_where(event)}")
        if isinstance(event, yaml.SequenceEndEvent | yaml.MappingEndEvent):
            self._attach(self.stack.pop().container, event)
            return
        if getattr(event, "tag", None) is not None:
            raise YamlProblem(path, f"has an explicit YAML tag {event.tag[:40]!r}; tags "
                                    f"are not allowed{_where(event)}")
        self.nodes += 1
        if self.nodes > self.max_nodes:
            raise YamlProblem("", f"has more than {self.max_nodes} values{_where(event)}")
        at_key = bool(self.stack) and self.stack[-1].expects_key
        if isinstance(event, yaml.ScalarEvent):
            self._attach(event.value if at_key else _scalar(event, path), event)
        else:  # a list or mapping starts (its end was taken above)
            if at_key:
                raise YamlProblem(self.stack[-1].path, "has a key that is a list or mapping; "
                                  f"keys must be plain strings{_where(event)}")
            self._open(event, path)

    def _open(self, event: yaml.Event, path: str) -> None:
        if len(self.stack) >= self.max_depth:
            raise YamlProblem(path, f"is nested more than {self.max_depth} levels deep"
                                    f"{_where(event)}")
        self.stack.append(_Frame([] if isinstance(event, yaml.SequenceStartEvent) else {},
                                 path))

    def _attach(self, value: object, event: yaml.Event) -> None:
        if not self.stack:
            self.root = value
            return
        frame = self.stack[-1]
        container = frame.container
        if isinstance(container, list):
            container.append(value)
        elif frame.expects_key:
            if value in container:
                raise YamlProblem(_join(frame.path, value), f"is given twice{_where(event)}")
            frame.key = value
            frame.expects_key = False
        else:
            container[frame.key] = value
            frame.expects_key = True

    def _child_path(self) -> str:
        if not self.stack:
            return ""
        frame = self.stack[-1]
        if isinstance(frame.container, list):
            return _join(frame.path, len(frame.container))
        return frame.path if frame.expects_key else _join(frame.path, frame.key)
