"""The hardened YAML reader on its own (the annotation cases are in tests/sla)."""

from __future__ import annotations

import pytest

from nri_plugin.text.errors import YamlProblem
from nri_plugin.text.safeyaml import load


def test_yaml_12_scalars_no_norway_problem():
    assert load("a: no\nb: on\nc: 017\nd: 1:30\ne: ~\nf: TRUE\n", max_bytes=100) == {
        "a": "no",
        "b": "on",
        "c": 17,
        "d": "1:30",
        "e": None,
        "f": True,
    }


def test_loader_limits_directly():
    with pytest.raises(YamlProblem, match="more than 10 values"):
        load("[" + ",".join(["1"] * 20) + "]", max_bytes=1000, max_nodes=10)
    with pytest.raises(YamlProblem, match="must be text"):
        load(b"a: 1", max_bytes=100)  # type: ignore[arg-type]
