"""What a plain YAML scalar means, under the YAML 1.2 core schema: one rule for both
readers (`yamlsubset` and `yamlevents`).

``yes``/``no``/``on``/``off`` stay strings (no "Norway problem"), ``1:30`` is not
sexagesimal, ``017`` is 17. Floats remember their source text so that quantities such as
``1.1e10`` are read exactly.
"""

from __future__ import annotations

import re

from nri_plugin.text.errors import YamlProblem

TYPE_CHECKING = False  # typing costs the hook's cold run; only checkers need it
if TYPE_CHECKING:
    from collections.abc import Callable

_NULL = frozenset({"", "~", "null", "Null", "NULL"})
_TRUE = frozenset({"true", "True", "TRUE"})
_FALSE = frozenset({"false", "False", "FALSE"})
_INT = re.compile(r"[-+]?[0-9]+", re.ASCII)
_FLOAT = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?", re.ASCII)
_INF = frozenset({".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF"})
_NINF = frozenset({"-.inf", "-.Inf", "-.INF"})
_NAN = frozenset({".nan", ".NaN", ".NAN"})
MAX_NUMBER_CHARS = 40


class YamlFloat(float):
    """A float read from YAML, with the exact text it was written as (``.text``)."""

    text: str

    def __new__(cls, text: str) -> YamlFloat:
        obj = super().__new__(cls, text)
        obj.text = text
        return obj


def plain_value(value: str, path: Callable[[], str]) -> object:
    """The value of an unquoted scalar; `path` gives its field path, for a refusal only."""
    if value in _NULL:
        return None
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    if _INT.fullmatch(value):
        if len(value.lstrip("+-")) > MAX_NUMBER_CHARS:
            raise YamlProblem(path(), f"is a number with {len(value)} digits: too large")
        return int(value)
    if _FLOAT.fullmatch(value) or value in _INF or value in _NINF or value in _NAN:
        if value in _INF:
            return YamlFloat("inf")
        if value in _NINF:
            return YamlFloat("-inf")
        if value in _NAN:
            return YamlFloat("nan")
        if len(value) > MAX_NUMBER_CHARS:
            raise YamlProblem(path(), f"is a number with {len(value)} characters: too long")
        return YamlFloat(value)
    return value
