"""Hostile annotation values: every one is refused with an SlaError, quickly."""

from __future__ import annotations

import time

import pytest

from nri_plugin.sla import parse_sla_document

BILLION_LAUGHS = """
a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: [*e,*e,*e,*e,*e,*e,*e,*e,*e]
"""


def test_alias_bomb_is_refused(check):
    err = check.error_of(BILLION_LAUGHS)
    check.assert_error(err, check.POD, "a", "anchor or alias", "not allowed")


def test_plain_anchor_and_alias_are_refused(check):
    err = check.error_of("memory: &m {max: 1Gi}\n")
    check.assert_error(err, check.POD, "memory", "anchor or alias")
    err = check.error_of("cpu: {limit: 1}\nmemory: {max: 1Gi, high: *x}\n")
    check.assert_error(err, check.POD, "memory.high", "anchor or alias")


def test_merge_key_is_refused(check):
    err = check.error_of("base: &b {max: 1Gi}\nmemory:\n  <<: *b\n")
    assert "anchor or alias" in str(err)


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("cpu: !!python/object/apply:os.system ['true']\n", "cpu"),
        ("memory: {max: !!binary aGVsbG8=}\n", "memory.max"),
        ("gpu: !custom {count: 1}\n", "gpu"),
        ("cpu: {limit: !!str 2}\n", "cpu.limit"),
        ("!!map {cpu: {limit: 2}}\n", ""),
        ("%TAG !e! tag:example.com,2000:\n---\ncpu: !e!x {limit: 2}\n", "cpu"),
    ],
)
def test_explicit_tags_are_refused(check, text, field):
    err = check.error_of(text)
    check.assert_error(err, check.POD, field, "explicit YAML tag", "not allowed")


def test_one_mebibyte_value_is_refused_before_parsing(check):
    text = "cpu: {limit: 2}\n#" + "x" * (1 << 20)
    start = time.perf_counter()
    err = check.error_of(text)
    elapsed = time.perf_counter() - start
    check.assert_error(err, check.POD, "", "at most 4096 bytes")
    assert elapsed < 0.05, f"size check took {elapsed:.3f}s: it must not parse first"


def test_size_limit_counts_utf8_bytes(check):
    text = "cpu: {limit: 2}\n#" + "é" * 3000  # 3017 characters, 6017 bytes
    assert len(text) < 4096
    check.assert_error(check.error_of(text), check.POD, "", "6017 bytes", "at most 4096")


def test_deep_nesting_is_refused(check):
    text = "cpu: " + "[" * 50 + "]" * 50
    err = check.error_of(text)
    assert "nested more than 8 levels" in str(err)
    assert err.key == check.POD


def test_very_deep_nesting_does_not_recurse(check):
    # deeper than Python's recursion limit: the composer must not recurse
    text = "[" * 2000 + "]" * 2000
    err = check.error_of(text)
    assert "nested more than" in str(err) or "maximum nesting depth" in str(err)


@pytest.mark.parametrize(
    ("text", "field", "fragment"),
    [
        ("", "", "is empty"),
        ("# only a comment\n", "", "is empty"),
        ("[1, 2]", "", "must be a YAML mapping"),
        ("hard", "", "must be a YAML mapping"),
        ("42", "", "must be a YAML mapping"),
        ("cpu: {limit: 2}\n---\ncpu: {limit: 3}\n", "", "more than one YAML document"),
        ("cpu: {limit: 2}\ncpu: {limit: 3}\n", "cpu", "is given twice"),
        ("memory: {max: 1Gi, max: 2Gi}\n", "memory.max", "is given twice"),
        ("cpu: {limit: 2\n", "", "not valid YAML"),
        ("\tcpu: 1", "", "not valid YAML"),
        ("cpu: {limit: 2}\x00", "", "NUL character"),
        ("cpu: {limit: '\ud800'}", "", "lone surrogate"),
        ("? [a]\n: 1\n", "", "keys must be plain strings"),
        ("1: x\n", "1", "not a known field"),
    ],
)
def test_malformed_documents(check, text, field, fragment):
    check.assert_error(check.error_of(text), check.POD, field, fragment)


def test_yaml_12_scalars_no_norway_problem(check):
    err = check.error_of("gpu: {count: 1, align: yes}\n")
    check.assert_error(err, check.POD, "gpu.align", "must be true or false", "yes")


@pytest.mark.parametrize(
    ("text", "field", "fragment"),
    [
        ("gpu: {count: " + "9" * 60 + "}\n", "gpu.count", "too large"),
        ("memory: {max: " + "9" * 39 + "}\n", "memory.max", "too large"),
        ("memory: {max: 1e400}\n", "memory.max", "too large"),
        ("memory: {max: .inf}\n", "memory.max", "a size like"),
        ("cpu: {limit: .nan}\n", "cpu.limit", "CPUs like"),
        ("cpu: {limit: -.inf}\n", "cpu.limit", "CPUs like"),
        ("cpu: {limit: 1e308}\n", "cpu.limit", "between 0.001 and 4096 CPUs"),
    ],
)
def test_hostile_numbers(check, text, field, fragment):
    check.assert_error(check.error_of(text), check.POD, field, fragment)


def test_non_string_annotation_value():
    with pytest.raises(ValueError) as info:
        parse_sla_document("sla.nri.io/pod", b"cpu: {limit: 2}")  # type: ignore[arg-type]
    assert "must be a string" in str(info.value)
