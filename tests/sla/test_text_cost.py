"""Hostile SLA text has a bounded price per CreateContainer: documents are bounded in
bytes and values so that a cold parse stays cheap, the reader stops at the first value
past the bound, and every result, refusals included, is cached by its text in caches
bounded in entries and bytes (bench/bench_hostile_text.py measures the price)."""

from __future__ import annotations

import time

import pytest

from nri_plugin.nri.errors import Code, RpcError
from nri_plugin.nri.pb import nri_pb2 as pb
from nri_plugin.plugin import SlaPlugin
from nri_plugin.sla import SlaError, parse_sla_document, sla_for_container
from nri_plugin.sla import parse as sla_parse
from nri_plugin.sla.cache import TextCache, text_bytes
from nri_plugin.sla.parse import (
    MAX_ANNOTATION_BYTES,
    MAX_SLA_KEYS,
    MAX_TOTAL_ANNOTATION_CHARS,
    MAX_VALUES,
    clear_caches,
)
from nri_plugin.text import yamlevents
from tests.support.plugin_helpers import plain_node

POD = "sla.nri.io/pod"
BY_ID = "/dev/disk/by-id/nvme-Samsung_SSD_980_PRO_2TB_S6B0NL0T{:06d}X"


def test_the_bounds_are_what_a_real_sla_needs():
    assert (MAX_ANNOTATION_BYTES, MAX_VALUES, MAX_TOTAL_ANNOTATION_CHARS, MAX_SLA_KEYS) == (
        4096,
        128,
        16384,
        64,
    )
    # Every field of the schema and 16 GPU ids as a list, with 8 io.max rules (the rule
    # bound) of two limits or 6 of four, on by-id device paths: inside both bounds.
    for limits, count in (
        ("read-bps: 500Mi, write-bps: 200Mi", 8),
        ("read-bps: 500Mi, write-bps: 200Mi, read-iops: 20000, write-iops: 10000", 6),
    ):
        sla = parse_sla_document(POD, full_sla(limits, count))
        assert len(sla.io.max) == count and len(sla.gpu.ids) == 16


def full_sla(limits: str, count: int) -> str:
    rules = "".join(f"    - {{device: {BY_ID.format(n)}, {limits}}}\n" for n in range(count))
    text = (
        "enforcement: soft\n"
        "cpu: {limit: 2.5, period: 100ms, rt-runtime: 10ms, rt-period: 1s, exclusive: 4}\n"
        "numa: {nodes: [0, 1], memory-policy: bind}\n"
        "memory: {high: 8Gi, max: 10Gi}\n"
        f"io:\n  weight: 500\n  max:\n{rules}"
        f"gpu: {{ids: [{', '.join(map(str, range(16)))}], topology: nvlink, align: true, "
        "from: plugin}\n"
    )
    assert len(text.encode()) <= MAX_ANNOTATION_BYTES
    return text


def test_a_document_past_the_value_bound_is_one_line_naming_the_field(check):
    nodes = ", ".join(["0"] * 200)
    err = check.error_of(f"numa: {{nodes: [{nodes}]}}\n")
    # the root, numa, its mapping, nodes and the list are the first 5 values
    check.assert_error(
        err,
        POD,
        f"numa.nodes[{MAX_VALUES - 5}]",
        f"is value {MAX_VALUES + 1}: the document has more than "
        f"{MAX_VALUES} values, at most {MAX_VALUES} are allowed",
    )
    assert "\n" not in str(err)


def test_a_document_past_the_size_bound_is_refused_before_parsing(check):
    text = "cpu: {limit: 1}\n#" + "x" * MAX_ANNOTATION_BYTES
    check.assert_error(
        check.error_of(text),
        POD,
        "",
        f"is {len(text)} characters; at most {MAX_ANNOTATION_BYTES} bytes are allowed",
    )


def test_the_pod_total_is_refused_at_the_first_key_past_it(check):
    annotations = {
        f"sla.nri.io/container.c{i}": "cpu: {limit: 1}\n#" + "x" * 3000 for i in range(6)
    }
    err = check.container_error(annotations, "c0")
    check.assert_error(
        err,
        "sla.nri.io/*",
        "",
        f"annotations hold more than "
        f"{MAX_TOTAL_ANNOTATION_CHARS} characters together (keys and values); "
        f"at most {MAX_TOTAL_ANNOTATION_CHARS} are allowed",
    )


def test_the_reader_stops_at_the_first_value_past_the_bound(monkeypatch):
    pulled = []

    class Counted(yamlevents._Loader):
        def get_event(self):
            event = super().get_event()
            pulled.append(event)
            return event

    monkeypatch.setattr(yamlevents, "_Loader", Counted)
    with pytest.raises(SlaError, match="the document has more than"):
        parse_sla_document(POD, "cpu: {limit: [" + ",".join(["0"] * 1500) + "]}\n")
    # the stream's and the document's starts, then one event per value up to the bound
    assert len(pulled) == MAX_VALUES + 3


def test_keys_under_the_prefix_are_refused_at_the_first_past_the_bound():
    """5,000 stray keys (60 KiB, inside Kubernetes' 256 KiB) through the plugin's
    handler: one line, and neither the decision cache's key nor the parser reads them
    all."""
    plugin = SlaPlugin(plain_node())
    strays = {f"sla.nri.io/x{n}": "" for n in range(5000)}
    pod = pb.PodSandbox(id="pod-s", name="s-0", namespace="prod", annotations=strays)
    started = time.process_time()
    with pytest.raises(RpcError) as raised:
        plugin.create_container(pod, pb.Container(id="c1", pod_sandbox_id="pod-s", name="app"))
    elapsed = time.process_time() - started
    assert raised.value.message == (
        f"sla.nri.io/*: more than {MAX_SLA_KEYS} annotations are under sla.nri.io/ (with "
        f"io.kubernetes.sla/enforcement-mode); at most {MAX_SLA_KEYS} are allowed"
    )
    assert elapsed < 0.05, f"{elapsed:.3f}s"  # was 12 ms for 1,000 such keys


def test_a_repeated_hostile_create_is_refused_from_the_cache(monkeypatch):
    """A controller creates a refused pod again and again: its text is read once."""
    clear_caches()
    loads = []
    load = sla_parse.load
    monkeypatch.setattr(sla_parse, "load", lambda *a, **k: loads.append(1) or load(*a, **k))
    plugin = SlaPlugin(plain_node())
    hostile = "".join(f"key-{i}: {i}\n" for i in range(600))  # over both bounds
    pod = pb.PodSandbox(
        id="pod-h",
        name="h-0",
        namespace="prod",
        annotations={POD: hostile, "sla.nri.io/podd": "typo"},
    )
    messages = []
    for n in range(3):
        with pytest.raises(RpcError) as raised:
            plugin.create_container(
                pod, pb.Container(id=f"c{n}", pod_sandbox_id="pod-h", name="app")
            )
        assert raised.value.code == Code.INVALID_ARGUMENT
        messages.append(raised.value.message)
    assert len(loads) == 1
    assert len(set(messages)) == 1
    assert messages[0].startswith(
        "sla.nri.io/podd: is not a known annotation; did you mean sla.nri.io/pod?"
    )
    assert (
        f"; {POD}: is {len(hostile)} characters; at most {MAX_ANNOTATION_BYTES} bytes "
        "are allowed" in messages[0]
    )


def test_every_document_is_cached_up_to_the_size_bound():
    clear_caches()
    text = "cpu: {limit: 1}\n#" + "x" * (MAX_ANNOTATION_BYTES - 20)
    assert sla_for_container({POD: text}, "web").cpu.limit == 1
    misses = (sla_parse._document.misses, sla_parse._resolve.misses)
    assert sla_for_container({POD: text}, "db").cpu.limit == 1
    assert (sla_parse._document.misses, sla_parse._resolve.misses) == misses


def test_the_text_cache_is_bounded_in_entries_and_bytes():
    calls = []
    cache = TextCache(lambda *texts: calls.append(texts) or len(calls), max_entries=4, max_bytes=95)
    for n in range(10):
        cache(f"t{n}", None)
    assert len(cache) == 4 and calls[-1] == ("t9", None)
    assert cache("t9", None) == 10 and cache("t6", None) == 7  # kept: the last four
    cache("t0", None)  # evicted long ago: computed again
    assert len(calls) == 11 and len(cache) == 4
    cache("x" * 60, ("y" * 30,))  # 90 bytes: the least recently used two go
    assert len(cache) == 3 and cache.bytes_held == 90 + 2 + 2
    assert cache("t6", None) == 7 and len(calls) == 12
    cache("z" * 96)  # bigger than the cache: computed, not kept
    assert len(cache) == 3 and cache.bytes_held == 94 and len(calls) == 13
    cache("é" * 20)  # non-ASCII counts 4 bytes a character: t6, just used, stays
    assert text_bytes("é" * 20) == 80 and cache.bytes_held == 80 + 2
    assert len(cache) == 2 and cache("t6", None) == 7


def test_distinct_hostile_documents_cannot_grow_the_caches():
    clear_caches()
    for n in range(1500):
        with pytest.raises(SlaError):
            sla_for_container({POD: f"k{n}: 0\n#" + "x" * (MAX_ANNOTATION_BYTES - 20)}, "web")
    for cache in (sla_parse._document, sla_parse._resolve):
        assert len(cache) <= sla_parse.CACHE_ENTRIES
        assert cache.bytes_held <= sla_parse.CACHE_BYTES
    assert len(sla_parse._document) < 300  # the bytes bound came first
