"""The hook's JSON reader agrees with the json module, and fails as cleanly."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nri_plugin.hook.inputs import JsonError, loads

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner, max_size=5)
    ),
    max_leaves=30,
)


@settings(max_examples=150, deadline=None)
@given(JSON, st.sampled_from(["", " ", "\n\t "]), st.booleans())
def test_same_result_as_json(value, pad, ascii_only):
    text = pad + json.dumps(value, ensure_ascii=ascii_only) + pad
    assert loads(text) == json.loads(text)


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=40))
def test_garbage_either_parses_like_json_or_raises_json_error(text):
    try:
        expected = json.loads(text)
    except ValueError:
        with pytest.raises(JsonError):
            loads(text)
    else:
        if "NaN" in text or "Infinity" in text:
            return  # we refuse the non-standard constants json accepts
        assert loads(text) == expected


@pytest.mark.parametrize("text", ["", "{", "[1,]", "{} x", "NaN", "[-Infinity]", '"\x01"'])
def test_invalid(text):
    with pytest.raises(JsonError):
        loads(text)


def test_deep_nesting_is_an_error_not_a_crash():
    with pytest.raises((JsonError, RecursionError)):
        loads("[" * 100_000 + "]" * 100_000)


def test_deep_nesting_in_state_is_bad_input(h):
    out = h.run_inproc(b"[" * 100_000 + b"]" * 100_000)
    assert out.exit_code == 2 and "not valid JSON" in out.lines[0]
