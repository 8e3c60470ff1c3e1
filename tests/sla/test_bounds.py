"""Hostile annotations cost bounded time and memory, and their messages stay small.

Each test measures what it bounds (tracemalloc peak, wall time) with generous limits,
far above what the code needs and far below what the unbounded code paid.
"""

from __future__ import annotations

import time
import tracemalloc
from collections.abc import Callable

import pytest

from nri_plugin.sla import SlaError, SlaErrors, parse_sla_document, sla_for_container
from nri_plugin.sla import parse as sla_parse
from nri_plugin.sla.errors import MAX_REPORTED_ERRORS
from nri_plugin.sla.parse import (
    MAX_ANNOTATION_BYTES,
    MAX_SLA_KEYS,
    MAX_TOTAL_ANNOTATION_CHARS,
    MAX_VALUES,
)

POD = "sla.nri.io/pod"


def measured(fn: Callable[[], object]) -> tuple[SlaError, float, int]:
    """The SlaError fn raises, the seconds it took and the peak bytes it allocated."""
    tracemalloc.start()
    start = time.perf_counter()
    try:
        with pytest.raises(SlaError) as info:
            fn()
    finally:
        elapsed = time.perf_counter() - start
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return info.value, elapsed, peak


@pytest.mark.parametrize(
    "nodes",
    [
        '"' + ",".join(["0-1023"] * 36) + '"',  # every range at the bound, named again
        '"' + ",".join(["0-99999999"] * 22) + '"',  # ranges far past the bound
        '"' + ",".join([f"{i}-1023" for i in range(30)]) + '"',
    ],
)
def test_numa_range_bomb_is_refused_before_expansion(nodes):
    text = f"numa: {{nodes: {nodes}}}\n"
    assert len(text) <= 300
    err, elapsed, peak = measured(lambda: parse_sla_document(POD, text))
    assert err.field == "numa.nodes"
    assert "twice" in err.message or "from 0 to 1023" in err.message
    # Expanded first, 22 ranges of 10^8 ids took GBs; bounded it is a few KiB.
    assert peak < 1 << 20, f"{peak} bytes"
    assert elapsed < 0.5, f"{elapsed:.3f}s"


def test_list_widths_are_checked_before_expansion():
    err, _, peak = measured(lambda: parse_sla_document(POD, 'gpu: {ids: "' + "," * 4000 + '"}\n'))
    assert err.field == "gpu.ids" and "names 4001 GPUs; at most 256" in err.message
    assert peak < 256 << 10  # the text is never split into 4,001 strings
    rules = ", ".join(f"{{device: '8:{i}', read-bps: 1Mi}}" for i in range(9))
    err, _, _ = measured(lambda: parse_sla_document(POD, f"io: {{max: [{rules}]}}\n"))
    assert err.field == "io.max" and "has 9 rules; at most 8" in err.message


def test_reported_errors_are_capped_and_the_rest_counted():
    # Unknown keys up to the value bound: 63 problems, each with a "did you mean" search
    # when listed; only the first are.
    text = "".join(f"key-{i}: 1\n" for i in range(63))
    assert len(text) < MAX_ANNOTATION_BYTES and MAX_VALUES >= 2 * 63 + 1
    err, elapsed, _ = measured(lambda: parse_sla_document(POD, text))
    assert isinstance(err, SlaErrors)
    assert len(err.errors) == MAX_REPORTED_ERRORS
    assert [e.field for e in err.errors] == [f"key-{i}" for i in range(MAX_REPORTED_ERRORS)]
    assert err.omitted == 63 - MAX_REPORTED_ERRORS
    message = str(err)
    assert message.endswith(f"; ... and {63 - MAX_REPORTED_ERRORS} more problems")
    assert len(message) < 2000
    assert elapsed < 0.5


def test_cached_documents_keep_only_the_listed_problems():
    text = "cpu:\n" + "".join(f"  k{i}: 1\n" for i in range(60))
    _, problems, omitted = sla_parse._document(POD, text)
    assert len(problems) == MAX_REPORTED_ERRORS and omitted == 60 - MAX_REPORTED_ERRORS


def test_stray_keys_are_capped_and_their_refusal_cached():
    strays = {f"sla.nri.io/x{i:05d}": "" for i in range(MAX_SLA_KEYS)}
    err, elapsed, _ = measured(lambda: sla_for_container(strays, "web"))
    assert [e.key for e in err.errors] == [f"sla.nri.io/x{i:05d}" for i in range(10)]
    assert err.omitted == MAX_SLA_KEYS - 10
    assert str(err).endswith(f"... and {MAX_SLA_KEYS - 10} more problems")
    assert len(str(err)) < 3000
    # a "did you mean" search for each key: 37 ms and a 369 KB message for 3,000 of them
    assert elapsed < 0.25, f"{elapsed:.3f}s"
    misses = sla_parse._resolve.misses
    again, _, _ = measured(lambda: sla_for_container(dict(strays), "web"))
    assert str(again) == str(err) and sla_parse._resolve.misses == misses


def test_total_annotation_size_is_checked_before_parsing():
    doc = "cpu: {limit: 1}\n#" + "x" * 4000  # each one is valid on its own
    annotations = {f"sla.nri.io/container.c{i}": doc for i in range(5)}
    annotations[POD] = doc
    err, elapsed, peak = measured(lambda: sla_for_container(annotations, "c0"))
    assert err.key == "sla.nri.io/*" and err.field == ""
    assert f"at most {MAX_TOTAL_ANNOTATION_CHARS} are allowed" in err.message
    assert elapsed < 0.05 and peak < 64 << 10
    # other annotations do not count: only the keys under the prefix
    small = {POD: "cpu: {limit: 1}", "big.example.com/blob": "x" * (1 << 20)}
    assert sla_for_container(small, "c0").cpu.limit == 1


def test_echoed_values_and_keys_are_cut():
    err, _, _ = measured(lambda: parse_sla_document(POD, "cpu: {limit: '" + "9x" * 2000 + "'}\n"))
    assert err.field == "cpu.limit" and len(str(err)) < 300
    huge_key = "sla.nri.io/" + "p" * 10_000  # no Kubernetes key; the runtime passes it
    err, _, _ = measured(lambda: sla_for_container({huge_key: "x"}, "web"))
    assert err.key.endswith("...") and len(str(err)) < 1000
    err, _, _ = measured(lambda: sla_for_container({huge_key: 7}, "web"))
    assert "must be a string" in str(err) and len(str(err)) < 1000
