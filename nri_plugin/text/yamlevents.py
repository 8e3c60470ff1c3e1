"""The full YAML reader behind `safeyaml`: PyYAML's event stream, refused as safeyaml says.

It walks the event stream of PyYAML's parser (the libyaml C parser when available) and
builds plain dicts, lists and scalars itself, pulling one event at a time so that reading
stops at the first refusal. Every text outside the subset `yamlsubset` reads comes here,
and so does every text that is refused: its messages are this reader's.
"""

from __future__ import annotations

from collections.abc import Callable

import yaml

from nri_plugin.text.errors import YamlProblem
from nri_plugin.text.fields import key_text
from nri_plugin.text.yamlscalars import plain_value

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def compose(text: str, max_depth: int, max_nodes: int, max_documents: int) -> list[object]:
    """The documents of `text` (at most `max_documents`), refusing what safeyaml lists."""
    loader = _Loader(text)
    try:
        return _compose(loader, max_depth, max_nodes, max_documents)
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        mark = getattr(exc, "problem_mark", None)
        at = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        raise YamlProblem("", f"is not valid YAML: {problem}{at}") from None
    finally:
        loader.dispose()


def _scalar(event: yaml.ScalarEvent, path: Callable[[], str]) -> object:
    """The value of a scalar; `path` gives its field path, for a refusal only."""
    if event.style or not event.implicit[0]:
        return event.value  # quoted or block scalars are always strings
    return plain_value(event.value, path)


def _join(path: str, segment: str | int) -> str:
    if isinstance(segment, int):
        return f"{path}[{segment}]"
    segment = key_text(segment)
    return f"{path}.{segment}" if path else segment


def _where(event: yaml.Event) -> str:
    mark = getattr(event, "start_mark", None)
    return f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""


_SCALAR = yaml.ScalarEvent
_OPENS = (yaml.SequenceStartEvent, yaml.MappingStartEvent)
_CLOSES = (yaml.SequenceEndEvent, yaml.MappingEndEvent)


def _compose(
    loader: yaml.SafeLoader, max_depth: int, max_nodes: int, max_documents: int
) -> list[object]:
    """The documents of the loader's event stream, refusing what the module doc lists.

    One loop over the events, pulled one at a time so that parsing stops at the first
    refusal: a document's price is this loop's body per value (docs/sla.md, "Bounds"),
    so events are told apart by their exact class and a field path is only made for a
    container or a refusal.
    """
    composer = _Composer(max_depth, max_documents)
    stack = composer.stack
    nodes = 0
    get_event = loader.get_event
    while (event := get_event()) is not None:
        kind = type(event)
        if kind in _CLOSES:
            composer.attach(stack.pop().container, event)
            continue
        if kind is not _SCALAR and kind not in _OPENS:
            composer.other(event)  # stream and document marks, aliases
            continue
        if event.anchor is not None:
            raise YamlProblem(composer.child_path(), _ALIASES + _where(event))
        if event.tag is not None:
            raise YamlProblem(
                composer.child_path(),
                f"has an explicit YAML tag {event.tag[:40]!r}; tags are not allowed{_where(event)}",
            )
        nodes += 1
        if nodes > max_nodes:
            raise YamlProblem(
                composer.child_path(),
                f"is value {nodes}: the document has "
                f"more than {max_nodes} values, at most {max_nodes} are "
                f"allowed{_where(event)}",
            )
        at_key = bool(stack) and stack[-1].expects_key
        if kind is _SCALAR and at_key:
            composer.attach_key(event.value, event)
        elif kind is _SCALAR:
            composer.attach(_scalar(event, composer.child_path), event)
        elif at_key:
            raise YamlProblem(
                stack[-1].path,
                f"has a key that is a list or mapping; keys must be plain strings{_where(event)}",
            )
        else:
            composer.open(event)
    return composer.documents


_ALIASES = "uses a YAML anchor or alias (&name / *name); these are not allowed, write the value out"


class _Frame:
    """A list or mapping being built: its path and, for a mapping, its pending key."""

    __slots__ = ("container", "expects_key", "key", "path")

    def __init__(self, container: list | dict, path: str) -> None:
        self.container = container
        self.path = path
        self.key = ""
        # a mapping's next scalar is a key (taken as written), then that key's value
        self.expects_key = isinstance(container, dict)


class _Composer:
    """The documents being built: the stack of open lists and mappings (`open`), the
    values attached to them (`attach`), the marks between documents (`other`)."""

    def __init__(self, max_depth: int, max_documents: int) -> None:
        self.max_depth = max_depth
        self.max_documents = max_documents
        self.stack: list[_Frame] = []
        self.root: object = None
        self.documents: list[object] = []

    def other(self, event: yaml.Event) -> None:
        if isinstance(event, yaml.AliasEvent):
            raise YamlProblem(self.child_path(), _ALIASES + _where(event))
        if isinstance(event, yaml.DocumentStartEvent):
            if len(self.documents) == self.max_documents:
                many = (
                    "one YAML document"
                    if self.max_documents == 1
                    else f"{self.max_documents} YAML documents"
                )
                raise YamlProblem("", f"holds more than {many}{_where(event)}")
        elif isinstance(event, yaml.DocumentEndEvent):
            self.documents.append(self.root)
            self.root = None

    def open(self, event: yaml.Event) -> None:
        path = self.child_path()
        if len(self.stack) >= self.max_depth:
            raise YamlProblem(
                path, f"is nested more than {self.max_depth} levels deep{_where(event)}"
            )
        self.stack.append(_Frame([] if type(event) is yaml.SequenceStartEvent else {}, path))

    def attach(self, value: object, event: yaml.Event) -> None:
        if not self.stack:
            self.root = value
            return
        frame = self.stack[-1]
        container = frame.container
        if isinstance(container, list):
            container.append(value)
        else:
            container[frame.key] = value
            frame.expects_key = True

    def attach_key(self, key: str, event: yaml.Event) -> None:
        """The next key of the innermost mapping (taken as written)."""
        frame = self.stack[-1]
        if key in frame.container:
            raise YamlProblem(_join(frame.path, key), f"is given twice{_where(event)}")
        frame.key = key
        frame.expects_key = False

    def child_path(self) -> str:
        """The field path of the next value."""
        if not self.stack:
            return ""
        frame = self.stack[-1]
        if isinstance(frame.container, list):
            return _join(frame.path, len(frame.container))
        return frame.path if frame.expects_key else _join(frame.path, frame.key)
