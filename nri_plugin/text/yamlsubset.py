"""The YAML that SLA annotations and node configs are written in, read without PyYAML.

The subset: one document of block mappings and block lists, indented with spaces; keys
that are plain words (letters, digits, ``_ . - /``); values that are plain scalars on one
line (letters, digits, spaces and ``. _ - + / ~``), or quoted on one line without escapes
(``'...'`` without a quote inside, ``"..."`` without a backslash or quote inside); list
items that are such scalars; whole-line comments and blank lines. ASCII only.

`read_subset` returns None for any text outside it, and for any text the full reader
(`yamlevents`) would refuse or might read differently: nested as deep as the limit, as
many values as the limit, a key given twice, a value continued on the next line, a list
at its key's own indentation. safeyaml.load then reads that text with PyYAML, so what a
document means and every message stay PyYAML's; tests/text/test_yaml_subset.py compares
the two readers on random texts.
"""

from __future__ import annotations

from nri_plugin.text.yamlscalars import plain_value

_WORD = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
_KEY_FIRST = frozenset(_WORD + "_")
_KEY = frozenset(_WORD + "_.-/")
_PLAIN_FIRST = frozenset(_WORD + "._+/~")  # "-" too, before a digit or "." (a number)
_PLAIN = frozenset(_WORD + "._-+/~ ")


class _Outside(Exception):
    """The text leaves the subset: PyYAML reads it."""


class _Lines:
    """The document's content lines, as (indentation, text without it), and the running
    count of values against the full reader's bound."""

    __slots__ = ("at", "indents", "max_depth", "max_nodes", "nodes", "texts")

    def __init__(self, text: str, max_depth: int, max_nodes: int) -> None:
        self.indents: list[int] = []
        self.texts: list[str] = []
        for line in text.split("\n"):
            if not line.isprintable():  # tabs, CRs, control characters
                raise _Outside
            content = line.lstrip(" ")
            if not content or content[0] == "#":
                continue
            self.indents.append(len(line) - len(content))
            self.texts.append(content.rstrip(" "))
        self.at = 0
        self.max_depth = max_depth
        self.max_nodes = max_nodes
        self.nodes = 0

    def count(self, values: int = 1) -> None:
        self.nodes += values
        if self.nodes >= self.max_nodes:  # the full reader says where the bound is passed
            raise _Outside

    def indent(self) -> int:
        """The next line's indentation; -1 past the last line."""
        return self.indents[self.at] if self.at < len(self.indents) else -1


def read_subset(text: str, max_depth: int, max_nodes: int) -> list[object] | None:
    """[the document] when `text` is in the subset (module doc), else None."""
    if not text.isascii():
        return None
    try:
        lines = _Lines(text, max_depth, max_nodes)
        if not lines.texts:
            return None  # empty: PyYAML's "no document" stays its own
        value = _block(lines, lines.indents[0], 1)
        if lines.at != len(lines.texts):  # a line less indented than its block's first
            return None
        return [value]
    except _Outside:
        return None


def _block(lines: _Lines, indent: int, depth: int) -> object:
    """The mapping or list whose first line is the next one, at `indent`."""
    if depth >= lines.max_depth:
        raise _Outside
    lines.count()
    if _is_item(lines.texts[lines.at]):
        return _list(lines, indent)
    return _mapping(lines, indent, depth)


def _is_item(text: str) -> bool:
    return text == "-" or text.startswith("- ")


def _list(lines: _Lines, indent: int) -> list[object]:
    items: list[object] = []
    while lines.indent() == indent:
        text = lines.texts[lines.at]
        if not _is_item(text):
            raise _Outside
        items.append(_scalar(text[1:].lstrip(" ")))
        lines.count()
        lines.at += 1
        if lines.indent() > indent:  # a nested block or a continued scalar
            raise _Outside
    return items


def _mapping(lines: _Lines, indent: int, depth: int) -> dict[str, object]:
    mapping: dict[str, object] = {}
    while lines.indent() == indent:
        key, rest = _key(lines.texts[lines.at])
        if key in mapping:
            raise _Outside
        lines.count(2)
        lines.at += 1
        if rest:
            mapping[key] = _scalar(rest)
            if lines.indent() > indent:  # a continued scalar
                raise _Outside
        elif lines.indent() > indent:
            lines.nodes -= 1  # the block counts itself
            mapping[key] = _block(lines, lines.indent(), depth + 1)
        elif lines.indent() == indent and _is_item(lines.texts[lines.at]):
            raise _Outside  # a list at its key's indentation
        else:
            mapping[key] = None
    return mapping


def _key(text: str) -> tuple[str, str]:
    """(key, the value's text) of a `key: value` or `key:` line."""
    colon = text.find(":")
    if colon < 1 or text[0] not in _KEY_FIRST:
        raise _Outside
    key, rest = text[:colon], text[colon + 1 :]
    if (rest and rest[0] != " ") or not all(c in _KEY for c in key):
        raise _Outside
    return key, rest.lstrip(" ")


def _scalar(text: str) -> object:
    """The value of a one-line scalar in the subset."""
    if not text:
        raise _Outside  # "-" alone, or a key's empty value: not here
    first = text[0]
    if first in "'\"":
        if len(text) < 2 or text.find(first, 1) != len(text) - 1 or (first == '"' and "\\" in text):
            raise _Outside
        return text[1:-1]
    if not (first in _PLAIN_FIRST or (first == "-" and len(text) > 1 and text[1] in "0123456789.")):
        raise _Outside
    if not all(c in _PLAIN for c in text):
        raise _Outside
    return plain_value(text, _outside)


def _outside() -> str:
    """plain_value's field path, asked for only to refuse: the full reader refuses it."""
    raise _Outside
