"""The field-problem helpers the SLA schema, the node config and manifests share."""

from __future__ import annotations

import pytest

from nri_plugin.errors import INVALID, SlaFailure
from nri_plugin.text.errors import FieldProblem
from nri_plugin.text.fields import choice, key_text, parse_id_list, show, unknown_key_message


def test_a_field_problem_is_invalid_input_with_its_sub_path():
    problem = FieldProblem("must be at least 1, got 0", "[0].read-bps")
    assert isinstance(problem, SlaFailure) and problem.kind == INVALID
    assert (problem.message, problem.sub, str(problem)) == (
        "must be at least 1, got 0",
        "[0].read-bps",
        "must be at least 1, got 0",
    )


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (True, "true"),
        (None, "null"),
        ("8Gi", "8Gi"),
        (3, "3"),
        ("a b", "'a b'"),
        ("x" * 50, repr("x" * 40 + "...")),
        ("\x1b[2J", repr("\x1b[2J")),
    ],
)
def test_show_keeps_values_short_and_printable(value, shown):
    assert show(value) == shown


def test_key_text_quotes_keys_that_are_not_plain():
    assert key_text("limit") == "limit"
    assert key_text(" limit") == repr(" limit")
    assert key_text("k" * 41) == repr("k" * 40 + "...")


def test_choice_names_the_allowed_values():
    convert = choice(("hard", "soft"))
    assert convert("soft") == "soft"
    with pytest.raises(FieldProblem, match="must be one of hard, soft, got Hard"):
        convert("Hard")


def test_unknown_key_suggests_the_kebab_case_spelling():
    assert unknown_key_message("rtRuntime", ("rt-runtime", "limit"), "cpu") == (
        "is not a known field; did you mean rt-runtime? (cpu fields: rt-runtime, limit)"
    )
    assert unknown_key_message("zzz", ("limit",), "") == (
        "is not a known field (top-level fields: limit)"
    )


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "like 0, 0-1 or 0,2"),
        ("0-999999999", "0-999999999"),
        ("1,1", "1,1"),
        ("a", "like 0, 0-1 or 0,2"),
        ("5", "ids must be from 0 to 3"),
    ],
)
def test_id_lists_are_bounded_before_they_are_expanded(text, fragment):
    assert parse_id_list("0,2-3", "a node list", 3) == (0, 2, 3)
    with pytest.raises(FieldProblem) as info:
        parse_id_list(text, "a node list", 3)
    assert fragment in info.value.message
