"""Property tests: whatever the annotations hold, the answer is an Sla or an SlaError (with
a bounded message); whatever a manifest file holds, `load_pods` gives pods or one
ManifestError line."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nri_plugin.commands.manifests import ManifestError, PodSpec, load_pods
from nri_plugin.sla import Sla, SlaError, parse_sla_document, sla_for_container
from nri_plugin.sla.errors import MAX_REPORTED_ERRORS
from nri_plugin.sla.schema import SECTIONS
from nri_plugin.text.errors import FieldProblem
from nri_plugin.text.quantities import (
    parse_count,
    parse_cpu,
    parse_duration,
    parse_size,
)
from nri_plugin.value import replace

# SLA_FUZZ_EXAMPLES=5000 for a long soak; the suite default stays quick
FUZZ = settings(
    max_examples=int(os.environ.get("SLA_FUZZ_EXAMPLES", "150")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
POD = "sla.nri.io/pod"

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30),
    st.sampled_from(
        [
            "auto",
            "100ms",
            "1s",
            "5us",
            "8Gi",
            "10Gi",
            "500Mi",
            "2500m",
            "1e3",
            "1e999",
            "0-1",
            "0,2",
            "/dev/sda",
            "8:0",
            "1g.10gb",
            "hard",
            "soft",
            "bind",
            "none",
            "nvlink",
            "runtime",
            "GPU-1",
            "-1",
            "",
            "٣",
            "1,",
            "x",
        ]
    ),
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.sampled_from(["device", "read-bps", "write-iops", "limit", "x"]), inner, max_size=4
        )
    ),
    max_leaves=12,
)


@st.composite
def documents(draw):
    """Mostly-schema-shaped documents with hostile values in random places."""
    doc: dict[str, object] = {}
    for section, fields in SECTIONS.items():
        if draw(st.booleans()):
            keys = draw(
                st.lists(st.sampled_from([*fields, "bogus", "rt_runtime"]), max_size=5, unique=True)
            )
            doc[section] = {k: draw(values) for k in keys}
    if draw(st.booleans()):
        doc["enforcement"] = draw(scalars)
    return doc


# Longest listed problem: a key cut to 317 characters, a field path of 8 segments of at
# most 42, a message with a value cut to 40 and the allowed fields: about 1 KB.
MAX_MESSAGE_CHARS = (MAX_REPORTED_ERRORS + 1) * 1200


def _outcome(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except SlaError as exc:
        assert str(exc).startswith(exc.key + ": ")
        assert len(exc.errors) <= MAX_REPORTED_ERRORS
        assert len(str(exc)) <= MAX_MESSAGE_CHARS
        return exc


@FUZZ
@given(st.text(max_size=300))
def test_random_text_is_sla_or_error(text):
    result = _outcome(parse_sla_document, POD, text)
    assert isinstance(result, Sla | SlaError)


@FUZZ
@given(documents())
def test_hostile_documents_are_sla_or_error(doc):
    text = yaml.safe_dump(doc, allow_unicode=True)
    result = _outcome(parse_sla_document, POD, text)
    assert isinstance(result, Sla | SlaError)
    if isinstance(result, Sla):
        # the canonical form parses back to the same SLA
        again = parse_sla_document(POD, yaml.safe_dump(result.to_document()))
        assert again == result


@FUZZ
@given(
    st.dictionaries(
        st.one_of(
            st.sampled_from(
                [
                    POD,
                    "sla.nri.io/container.web",
                    "sla.nri.io/enforcement",
                    "io.kubernetes.sla/enforcement-mode",
                    "sla.nri.io/applied",
                ]
            ),
            st.text(max_size=20).map(lambda s: "sla.nri.io/" + s),
        ),
        st.one_of(st.text(max_size=60), documents().map(yaml.safe_dump)),
        max_size=4,
    ),
    st.sampled_from(["web", "db"]),
)
def test_random_annotations(annotations, name):
    result = _outcome(sla_for_container, annotations, name)
    assert result is None or isinstance(result, Sla | SlaError)
    if isinstance(result, Sla):
        assert result.enforcement in ("hard", "soft")
        assert all(k in annotations for k in result.keys)


@FUZZ
@given(
    st.one_of(
        scalars,
        st.from_regex(
            r"[+-]?[0-9]{0,25}(\.[0-9]{0,5})?"
            r"([eE][+-]?[0-9]{1,12}|Ki|Mi|Gi|Ei|m|k|E|ms|us|s)?",
            fullmatch=True,
        ),
    )
)
def test_quantity_parsers_raise_only_field_problems(value):
    for parser in (parse_size, parse_count, parse_cpu, parse_duration):
        try:
            result = parser(value)
        except FieldProblem:
            continue
        assert isinstance(result, int | float)
        if parser is not parse_cpu:
            assert 0 <= result <= 2**63 - 1


@FUZZ
@given(
    st.builds(
        lambda high, extra, limit, milli: (high, high + extra, limit, milli),
        st.integers(2**20, 2**50),
        st.integers(1, 2**40),
        st.integers(1, 64),
        st.integers(1, 999),
    )
)
def test_valid_values_round_trip(sample):
    high, hard, limit, milli = sample
    text = f"memory: {{high: {high}, max: {hard}}}\ncpu: {{limit: {limit}.{milli:03d}}}\n"
    sla = parse_sla_document(POD, text)
    assert sla.memory.high == high and sla.memory.max == hard
    assert round(sla.cpu.limit * 1000) == limit * 1000 + milli
    canon = yaml.safe_dump(sla.to_document())
    assert replace(parse_sla_document(POD, canon)) == sla


@FUZZ
@given(
    st.dictionaries(
        st.text(max_size=40).map(lambda s: "sla.nri.io/" + s),
        st.text(max_size=80),
        min_size=5,
        max_size=60,
    ),
    st.one_of(st.none(), documents().map(yaml.safe_dump)),
)
def test_many_annotations_give_a_bounded_answer(annotations, pod_document):
    if pod_document is not None:
        annotations[POD] = pod_document
    result = _outcome(sla_for_container, annotations, "web")  # checks the message bound
    assert result is None or isinstance(result, Sla | SlaError)


manifest_values = st.recursive(
    st.one_of(
        scalars,
        st.sampled_from(
            [
                "Pod",
                "List",
                "PodList",
                "Deployment",
                "CronJob",
                "Job",
                "cpu: {limit: 2}",
                "&a x",
                "*a",
                "!!str x",
            ]
        ),
    ),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                [
                    "kind",
                    "metadata",
                    "spec",
                    "template",
                    "jobTemplate",
                    "items",
                    "containers",
                    "name",
                    "namespace",
                    "annotations",
                    "env",
                    "value",
                    "sla.nri.io/pod",
                    "sla.nri.io/container.c",
                    "x",
                ]
            ),
            inner,
            max_size=5,
        )
    ),
    max_leaves=25,
)


@st.composite
def manifests(draw) -> str:
    """Kubernetes-shaped documents with junk in random places, or hostile YAML text."""
    kind = draw(st.sampled_from(["Pod", "List", "Deployment", "CronJob", "Service"]))
    pod = {
        "metadata": {
            "name": draw(manifest_values),
            "annotations": draw(
                st.one_of(
                    manifest_values,
                    st.dictionaries(
                        st.sampled_from(
                            [
                                "sla.nri.io/pod",
                                "sla.nri.io/container.c",
                                "sla.nri.io/enforcement",
                                "other",
                            ]
                        ),
                        st.one_of(st.text(max_size=40), documents().map(yaml.safe_dump)),
                        max_size=3,
                    ),
                )
            ),
        },
        "spec": {
            "containers": draw(
                st.one_of(
                    manifest_values,
                    st.lists(
                        st.fixed_dictionaries(
                            {"name": st.sampled_from(["c", "d"]), "env": manifest_values}
                        ),
                        max_size=3,
                    ),
                )
            )
        },
    }
    if kind in ("Pod", "Service"):
        doc: object = {"kind": kind, **pod}
    elif kind == "List":
        doc = {
            "kind": "List",
            "items": draw(
                st.one_of(manifest_values, st.lists(st.just({"kind": "Pod", **pod}), max_size=2))
            ),
        }
    elif kind == "CronJob":
        doc = {"kind": kind, "spec": {"jobTemplate": {"spec": {"template": pod}}}}
    else:
        doc = {"kind": kind, "spec": {"template": draw(st.one_of(st.just(pod), manifest_values))}}
    text = yaml.safe_dump_all(
        draw(st.lists(st.one_of(st.just(doc), manifest_values), min_size=1, max_size=3))
    )
    return draw(
        st.one_of(
            st.just(text),
            st.sampled_from(
                [
                    "a: &x [1]\nb: *x\n",
                    "[" * 200,
                    "kind: !!python/name:os.system\n",
                    "kind: Pod\nkind: List\n",
                    "---\n" * 5000,
                    "\t- x",
                    "a: \x00",
                ]
            ),
        )
    )


@FUZZ
@given(st.one_of(manifests(), st.text(max_size=300)))
def test_any_manifest_gives_pods_or_one_error_line(text):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "m.yaml"
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        try:
            pods = load_pods(path)
        except ManifestError as exc:
            message = str(exc)
            assert message.startswith(str(path)) and "\n" not in message  # m.yaml[1]: ...
            return
    for pod in pods:
        assert isinstance(pod, PodSpec)
        for name in pod.containers:
            result = _outcome(sla_for_container, pod.annotations, name)
            assert result is None or isinstance(result, Sla | SlaError)
