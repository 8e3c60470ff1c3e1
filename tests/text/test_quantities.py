"""Quantities, CPU amounts and durations: tables of accepted and refused spellings."""

from __future__ import annotations

import pytest

from nri_plugin.text.errors import FieldProblem
from nri_plugin.text.quantities import (
    MAX_INT64,
    format_cpu,
    format_duration,
    format_size,
    parse_count,
    parse_cpu,
    parse_duration,
    parse_size,
)
from nri_plugin.text.safeyaml import YamlFloat

SIZES = [
    ("0", 0),
    (0, 0),
    ("1", 1),
    (4096, 4096),
    ("1k", 1000),
    ("1Ki", 1024),
    ("1M", 10**6),
    ("1Mi", 2**20),
    ("512Mi", 512 * 2**20),
    ("1G", 10**9),
    ("8Gi", 8 * 2**30),
    ("1T", 10**12),
    ("1Ti", 2**40),
    ("1P", 10**15),
    ("1Pi", 2**50),
    ("1E", 10**18),
    ("1Ei", 2**60),
    ("7Ei", 7 * 2**60),
    ("1.5Gi", 3 * 2**29),
    ("0.5Ki", 512),
    (".5Ki", 512),
    ("1.Ki", 1024),
    ("1e3", 1000),
    ("1E3", 1000),
    ("1e+3", 1000),
    ("120e-1", 12),
    ("+1Ki", 1024),
    ("1000m", 1),
    ("2000000u", 2),
    ("3000000000n", 3),
    ("1.5k", 1500),
    (2.0, 2),
    (YamlFloat("1.1e10"), 11_000_000_000),
    (str(MAX_INT64), MAX_INT64),
    ("0e999999", 0),
]


@pytest.mark.parametrize(("text", "expected"), SIZES)
def test_size_accepted(text, expected):
    assert parse_size(text) == expected


SIZE_ERRORS = [
    ("-1", "must not be negative"),
    ("-1Ki", "must not be negative"),
    ("100m", "sizes must be whole bytes (the suffix m means 1/1000; did you mean 100Mi?)"),
    ("1.5", "1.5 bytes"),
    ("1e-3", "whole bytes"),
    ("8Eb", "a size like 512Mi"),
    ("8GB", "a size like 512Mi"),
    ("8 Gi", "a size like 512Mi"),
    ("", "a size like"),
    ("Gi", "a size like"),
    ("1KI", "a size like"),
    ("0x10", "a size like"),
    ("٣Gi", "a size like"),  # Arabic-Indic digit: \d would match, [0-9] must not
    ("8Ei", "too large"),
    (str(MAX_INT64 + 1), "too large"),
    ("1e19", "too large"),
    ("1e999999999", "too large"),
    ("1e-999999999", "whole bytes"),
    (2**70, "too large"),
    (True, "a size like"),
    (None, "a size like"),
    ([1], "a size like"),
    (float("inf"), "a size like"),
    (float("nan"), "a size like"),
    ("9" * 41, "too long"),
]


@pytest.mark.parametrize(("text", "fragment"), SIZE_ERRORS)
def test_size_refused(text, fragment):
    with pytest.raises(FieldProblem) as info:
        parse_size(text)
    assert fragment in str(info.value)


@pytest.mark.parametrize(
    ("text", "expected"), [("20000", 20000), (20000, 20000), ("20k", 20000), ("2e4", 20000)]
)
def test_count(text, expected):
    assert parse_count(text) == expected


@pytest.mark.parametrize("text", ["1.5", "-1", "1Ki0", "lots", "1m"])
def test_count_refused(text):
    with pytest.raises(FieldProblem):
        parse_count(text)


CPUS = [
    (2, 2.0),
    (2.5, 2.5),
    ("2.5", 2.5),
    ("2500m", 2.5),
    ("1m", 0.001),
    ("0.001", 0.001),
    ("250m", 0.25),
    (YamlFloat("0.5"), 0.5),
    ("16", 16.0),
]


@pytest.mark.parametrize(("text", "expected"), CPUS)
def test_cpu_accepted(text, expected):
    assert parse_cpu(text) == expected


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("2.5k", "CPUs like 2.5 or 2500m"),
        ("2 cpus", "CPUs like"),
        ("-1", "must not be negative"),
        ("0.0005", "finer than 1m"),
        ("1.5m", "finer than 1m"),
        (True, "CPUs like"),
        ("1e3", "CPUs like"),
        (float("nan"), "CPUs like"),
        ("", "CPUs like"),
    ],
)
def test_cpu_refused(text, fragment):
    with pytest.raises(FieldProblem) as info:
        parse_cpu(text)
    assert fragment in str(info.value)


DURATIONS = [
    ("100ms", 100_000),
    ("1s", 1_000_000),
    ("500us", 500),
    ("500µs", 500),
    ("1.5ms", 1500),
    ("0.5s", 500_000),
    (".25s", 250_000),
    ("0us", 0),
]


@pytest.mark.parametrize(("text", "expected"), DURATIONS)
def test_duration_accepted(text, expected):
    assert parse_duration(text) == expected


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        (100, "needs a unit: us, ms or s, e.g. 100ms"),
        ("100", "a duration with a unit"),
        (1.5, "needs a unit"),
        ("1m", "a duration with a unit"),
        ("1h", "a duration with a unit"),
        ("1 ms", "a duration with a unit"),
        ("-1ms", "must not be negative"),
        ("0.5us", "whole number of microseconds"),
        ("1.0001ms", "whole number of microseconds"),
        (True, "a duration"),
        ("9" * 41 + "s", "too long"),
        ("1s500ms", "a duration"),
    ],
)
def test_duration_refused(text, fragment):
    with pytest.raises(FieldProblem) as info:
        parse_duration(text)
    assert fragment in str(info.value)


@pytest.mark.parametrize(
    ("n", "text"),
    [
        (0, "0"),
        (1, "1"),
        (1000, "1k"),
        (1024, "1Ki"),
        (12 * 2**30, "12Gi"),
        (10 * 10**9, "10G"),
        (1500, "1500"),
        (3 * 2**29, "1536Mi"),
        (2**60, "1Ei"),
    ],
)
def test_format_size(n, text):
    assert format_size(n) == text
    assert parse_size(text) == n


@pytest.mark.parametrize(
    ("us", "text"),
    [(1_000_000, "1s"), (100_000, "100ms"), (1500, "1500us"), (0, "0us"), (2_500_000, "2500ms")],
)
def test_format_duration(us, text):
    assert format_duration(us) == text
    assert parse_duration(text) == us


@pytest.mark.parametrize(
    ("cpus", "text"), [(2.0, "2"), (2.5, "2.5"), (0.001, "0.001"), (0.25, "0.25")]
)
def test_format_cpu(cpus, text):
    assert format_cpu(cpus) == text
