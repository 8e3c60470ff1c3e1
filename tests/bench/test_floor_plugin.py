"""bench/floor_plugin.py, the floor `bench_vs_go.py --floor` compares nri-sla with: it must
answer what nri-sla answers for the bench's SLA (else its figures are of other work), and
refuse a bad SLA as the Go bench plugin does."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

from nri_plugin.core.decision import decide
from nri_plugin.core.request import ContainerRequest
from nri_plugin.plan.record import encode_record
from nri_plugin.simulated.runtime import make_container, make_pod
from nri_plugin.text.errors import FieldProblem
from tests.support.plugin_helpers import RECORD_KEY, make_node

BENCH = Path(__file__).resolve().parents[2] / "bench"
SLA = "cpu: {limit: 0.5}\nmemory: {max: 256Mi}"  # bench_vs_go.py's


@pytest.fixture(scope="module")
def floor():
    spec = importlib.util.spec_from_file_location("floor_plugin", BENCH / "floor_plugin.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["floor_plugin"] = module
    spec.loader.exec_module(module)
    yield module
    del sys.modules["floor_plugin"]


def test_the_floor_answers_what_nri_sla_decides(floor):
    pod = make_pod("bench", annotations={"sla.nri.io/pod": SLA})
    ctr = make_container(pod, "work")
    plugin = floor.FloorPlugin(RECORD_KEY, 2)
    plugin.synchronize([pod], [])
    adj = plugin.create_container(pod, ctr).adjustment
    cpu, memory = adj.linux.resources.cpu, adj.linux.resources.memory
    assert (cpu.quota.value, cpu.period.value, memory.limit.value) == (50_000, 100_000, 256 << 20)
    decision = decide(
        make_node(2), ContainerRequest({"sla.nri.io/pod": SLA}, "work", namespace="default")
    )
    # The same record, byte for byte (the same key signs both): the same work answered.
    assert adj.annotations["sla.nri.io/applied"] == encode_record(
        decision.plan, "nri", ctr.id, RECORD_KEY
    )
    assert ctr.id in plugin.live
    plugin.remove_container(pod, ctr)
    assert ctr.id not in plugin.live


def test_the_floor_parses_an_sla_once_per_text(floor):
    pod = make_pod("bench", annotations={"sla.nri.io/pod": SLA})
    plugin = floor.FloorPlugin(RECORD_KEY, 2)
    plugin.create_container(pod, make_container(pod, "a"))
    plugin.create_container(pod, make_container(pod, "b"))
    assert list(plugin.plans) == [(SLA, "")]


@pytest.mark.parametrize(
    "sla, problem",
    [
        ("cpu: {limit: 0}", "cpu.limit must be in (0, 1024]"),
        ("cpu: {period: 100ms}", "cpu.period needs cpu.limit"),
        ("enforcement: maybe", "enforcement must be hard or soft"),
        ("memory: {max: 0}", "memory.max must be a positive quantity"),
    ],
)
def test_the_floor_refuses_what_the_go_plugin_refuses(floor, sla, problem):
    pod = make_pod("bad", annotations={"sla.nri.io/pod": sla})
    with pytest.raises(ValueError, match=re.escape(problem)):
        floor.FloorPlugin(RECORD_KEY, 2).create_container(pod, make_container(pod, "c"))


def test_a_bad_quantity_is_the_text_toolkits_error(floor):
    pod = make_pod("bad", annotations={"sla.nri.io/pod": "memory: {max: lots}"})
    with pytest.raises(FieldProblem):
        floor.FloorPlugin(RECORD_KEY, 2).create_container(pod, make_container(pod, "c"))
