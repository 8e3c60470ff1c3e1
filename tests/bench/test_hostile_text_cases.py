"""bench/bench_hostile_text.py's cases sit where they say: each at its bound of the SLA
parser (or one past it), read as the plugin reads them (else its figures are of other
documents than the bounds allow)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from nri_plugin.sla import SlaError, parse_sla_document, sla_for_container
from nri_plugin.sla.parse import (
    MAX_ANNOTATION_BYTES,
    MAX_DEPTH,
    MAX_SLA_KEYS,
    MAX_VALUES,
)
from nri_plugin.text.errors import YamlProblem
from nri_plugin.text.safeyaml import load

BENCH = Path(__file__).resolve().parents[2] / "bench"
POD = "sla.nri.io/pod"


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(BENCH))  # the bench imports bench_create as a sibling
    spec = importlib.util.spec_from_file_location(
        "bench_hostile_text", BENCH / "bench_hostile_text.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    yield module
    sys.path.remove(str(BENCH))
    sys.modules.pop("bench_create", None)


def values(text: str) -> int:
    """How many values the reader counts in `text`: the bound at which it refuses."""
    for bound in range(1, MAX_VALUES + 1):
        try:
            load(text, max_bytes=MAX_ANNOTATION_BYTES, max_depth=MAX_DEPTH, max_nodes=bound)
            return bound
        except YamlProblem as exc:
            if "values" not in exc.message:
                raise
    return MAX_VALUES + 1


def test_each_document_sits_at_its_bound(bench):
    valid = bench.largest_valid(7)
    sla = parse_sla_document(POD, valid)  # accepted by the parser
    assert len(sla.io.max) == 8 and values(valid) > MAX_VALUES - 8
    assert values(bench.most_values(7)) == MAX_VALUES
    assert values(bench.deepest(7)) == MAX_VALUES
    assert values(bench.over_values(7)) > MAX_VALUES
    keys = bench.unknown_keys(7)
    assert values(keys) > MAX_VALUES - 2 or len(keys.encode()) > MAX_ANNOTATION_BYTES - 12
    assert len(bench.over_bytes(7).encode()) == MAX_ANNOTATION_BYTES + 1
    with pytest.raises(SlaError, match="nested more than"):
        parse_sla_document(POD, "cpu: {limit: [" + bench.deepest(7)[len("cpu: {limit: ") :])


def test_each_pod_is_refused_or_accepted_as_its_case_says(bench):
    for name, make in bench.CASES:
        annotations = make(3)
        if name in ("typical", "other annotations"):
            assert sla_for_container(annotations, "work") is not None
            continue
        if name == "largest valid":
            assert sla_for_container(annotations, "work").io is not None
            continue
        with pytest.raises(SlaError):
            sla_for_container(annotations, "work")
    assert len(bench.stray_keys(3)) == MAX_SLA_KEYS
    assert len(bench.over_keys(3)) > MAX_SLA_KEYS
