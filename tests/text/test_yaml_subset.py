"""The subset reader against PyYAML: whatever text it reads, the full reader reads the same.

safeyaml.load reads the YAML SLA annotations and node configs are written in without
PyYAML (nri_plugin.text.yamlsubset) and hands every other text to PyYAML's parser. Random
texts built from the subset's pieces and from what borders on them (quotes, indicators,
comments, odd indentation, long numbers, tight bounds) must give equal values, of equal
types, wherever the subset reader answers at all.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nri_plugin.text import safeyaml
from nri_plugin.text.errors import YamlProblem
from nri_plugin.text.yamlevents import compose
from nri_plugin.text.yamlscalars import YamlFloat
from nri_plugin.text.yamlsubset import read_subset

KEYS = [
    "a",
    "b",
    "cpu",
    "limit",
    "io.max",
    "x/y",
    "_k",
    "1",
    "null",
    "on",
    "-a",
    "a b",
    "a:b",
    "'q'",
    "?",
    "a#",
    "<<",
    "é",
]
VALUES = [
    "1",
    "-1",
    "+7",
    "017",
    "0x1F",
    "1_000",
    "2.5",
    "-.5",
    "1e3",
    "1.1e10",
    ".inf",
    "-.inf",
    ".NaN",
    "-.",
    "+",
    ".",
    "~",
    "null",
    "NULL",
    "true",
    "False",
    "yes",
    "no",
    "100ms",
    "8Gi",
    "a b",
    "a  b",
    "/dev/sda",
    "x-y_z",
    "'x'",
    "'a''b'",
    "'a\"b'",
    '"q"',
    '"a\\nb"',
    '"a\'b"',
    "''",
    '""',
    "'",
    '"',
    "a #c",
    "a: b",
    "a:b",
    "-",
    "- x",
    "[1, 2]",
    "{a: 1}",
    "&x 1",
    "*x",
    "!t x",
    "1:30",
    "|",
    ">",
    "%x",
    "@x",
    "`x",
    "?",
    ":",
    "#",
    "9" * 41,
    "x" * 45,
    "1." + "0" * 40,
    "- 1",
    "é",
    "a\tb",
]
INDENTS = ["", " ", "  ", "   ", "    "]


def _line() -> st.SearchStrategy[str]:
    key = st.sampled_from(KEYS)
    value = st.sampled_from(VALUES)
    indent = st.sampled_from(INDENTS)
    return st.one_of(
        st.tuples(indent, key, value).map(lambda t: f"{t[0]}{t[1]}: {t[2]}"),
        st.tuples(indent, key).map(lambda t: f"{t[0]}{t[1]}:"),
        st.tuples(indent, value).map(lambda t: f"{t[0]}- {t[1]}"),
        st.sampled_from(["", "# note", "  # note", "---", "...", "-", "a", "  ", "%YAML 1.2"]),
    )


LINES = st.tuples(st.lists(_line(), min_size=1, max_size=12), st.sampled_from(["", "\n"])).map(
    lambda t: "\n".join(t[0]) + t[1]
)
# Documents the subset mostly reads: trees of mostly its own keys and values (the first
# of each list above), rendered with a drawn indentation step.
TREE_KEYS = st.sampled_from(KEYS[:9] * 20 + KEYS)
TREE_VALUES = st.sampled_from(VALUES[:35] * 20 + VALUES)
TREES = st.recursive(
    TREE_VALUES,
    lambda inner: st.one_of(
        st.lists(TREE_VALUES, min_size=1, max_size=4),
        st.dictionaries(TREE_KEYS, inner, min_size=1, max_size=4),
    ),
    max_leaves=12,
)


def render(value: object, step: int, indent: int = 0) -> list[str]:
    pad = " " * indent
    if isinstance(value, list):
        return [f"{pad}- {item}" for item in value]
    lines = []
    for key, inner in value.items():
        if isinstance(inner, str):
            lines.append(f"{pad}{key}: {inner}")
        else:
            lines += [f"{pad}{key}:", *render(inner, step, indent + step)]
    return lines


DOCUMENTS = st.tuples(
    st.dictionaries(TREE_KEYS, TREES, min_size=1, max_size=5), st.integers(1, 4)
).map(lambda t: "\n".join(render(*t)) + "\n")
TEXTS = st.one_of(LINES, DOCUMENTS)


def typed(value: object) -> object:
    """The value with every scalar's type (a YamlFloat's text: NaN equals no NaN)."""
    if isinstance(value, dict):
        return {k: typed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [typed(v) for v in value]
    if isinstance(value, YamlFloat):
        return ("YamlFloat", value.text)
    return (type(value).__name__, value)


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(TEXTS, st.integers(1, 6), st.integers(1, 40))
def test_the_subset_reads_what_pyyaml_reads(text, max_depth, max_nodes):
    found = read_subset(text, max_depth, max_nodes)
    if found is not None:
        assert typed(compose(text, max_depth, max_nodes, 1)) == typed(found), text


SLAS = [
    "enforcement: hard\ncpu:\n  limit: 2.5\n  period: 100ms\nnuma:\n  nodes: '0'\n"
    "memory:\n  high: 8Gi\n  max: 10Gi\nio:\n  weight: 500\n",
    "# the web tier\ncpu:\n  exclusive: 2\nmemory:\n  max: 64Mi\n",
    "io:\n  weight: 100\n  max:\n    - /dev/sda\n",
    "enforcement: soft\nstate-dir: /var/lib/nri-sla\nannotation-prefix: sla.example.com\n",
]


@pytest.mark.parametrize("text", SLAS)
def test_the_forms_slas_and_node_configs_use_are_in_the_subset(text):
    found = read_subset(text, 8, 4096)
    assert found is not None
    assert typed(found) == typed(compose(text, 8, 4096, 1))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a: 1\na: 2\n", "a is given twice (line 2, column 1)"),
        ("a:\n  b:\n    c: 1\n", "a.b is nested more than 2 levels deep (line 3, column 5)"),
        ("a: 1\nb: 2\nc: 3\n", "is value 6: the document has more than 5 values"),
        ("a: " + "9" * 41 + "\n", "a is a number with 41 digits: too large"),
        ("a: 1\n b: 2\n", "is not valid YAML: mapping values are not allowed in this context"),
    ],
)
def test_refusals_keep_the_full_readers_words(text, message):
    assert read_subset(text, 2, 5) is None
    with pytest.raises(YamlProblem) as refused:
        safeyaml.load(text, max_bytes=1000, max_depth=2, max_nodes=5)
    assert str(refused.value).startswith(message)
