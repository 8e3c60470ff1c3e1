import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nri_plugin.topology.cpulist import format_cpulist, parse_cpulist
from nri_plugin.topology.errors import CpuListError


@pytest.mark.parametrize(
    ("text", "cpus"),
    [
        ("0-3,8-11", {0, 1, 2, 3, 8, 9, 10, 11}),
        ("5", {5}),
        ("0,2,4", {0, 2, 4}),
        (" 0-1\n", {0, 1}),
        ("", set()),
    ],
)
def test_parse(text, cpus):
    assert parse_cpulist(text) == frozenset(cpus)


@pytest.mark.parametrize(
    ("cpus", "text"),
    [
        ({0, 1, 2, 3, 8, 9, 10, 11}, "0-3,8-11"),
        ({4, 5}, "4-5"),  # the kernel prints ranges of two as a range too
        ({7, 1, 3}, "1,3,7"),
        (set(), ""),
    ],
)
def test_format(cpus, text):
    assert format_cpulist(cpus) == text


@pytest.mark.parametrize("bad", ["a", "3-1", "1,,2", "-1", "1-", "0-3,x"])
def test_parse_rejects_with_the_text(bad):
    with pytest.raises(CpuListError) as err:
        parse_cpulist(bad)
    assert repr(bad) in str(err.value)
    assert "0-3,8-11" in str(err.value)  # says what is expected


@settings(max_examples=60, deadline=None)
@given(st.frozensets(st.integers(min_value=0, max_value=300), max_size=40))
def test_roundtrip(cpus):
    assert parse_cpulist(format_cpulist(cpus)) == cpus
