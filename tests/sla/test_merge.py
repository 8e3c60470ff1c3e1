"""sla_for_container: which annotations apply, merging, enforcement precedence."""

from __future__ import annotations

import pytest

from nri_plugin.errors import ProgrammingError
from nri_plugin.sla import GpuSla, IoMaxRule, MemorySla, SlaError, sla_for_container

POD = "sla.nri.io/pod"
WEB = "sla.nri.io/container.web"
SHORT = "sla.nri.io/enforcement"
ALIAS = "io.kubernetes.sla/enforcement-mode"
GI = 2**30

POD_DOC = """
cpu: {limit: 2, period: 50ms}
memory: {high: 1Gi, max: 2Gi}
io:
  weight: 100
  max: [{device: /dev/sda, read-bps: 1Mi}, {device: /dev/sdb, read-bps: 2Mi}]
gpu: {count: 1, topology: numa}
"""


def test_no_sla_annotation_gives_none():
    assert sla_for_container({}, "web") is None
    assert (
        sla_for_container({"app": "x", "sla.nri.io/container.db": "cpu: {limit: 1}"}, "web") is None
    )
    # the enforcement shortcut alone states no requirement
    assert sla_for_container({SHORT: "soft", ALIAS: "hard"}, "web") is None


def test_pod_document_applies_to_every_container():
    ann = {POD: POD_DOC}
    web, db = sla_for_container(ann, "web"), sla_for_container(ann, "db")
    assert web == db and web.keys == (POD,)
    assert web.cpu.limit == 2.0 and web.cpu.period_us == 50_000


def test_containers_without_their_own_document_share_one_parse():
    """A Synchronize asks for thousands of distinct names: without a container document
    the name changes nothing, so every container of the pod (and every replica) gets
    the one cached SLA; a container with its own document gets its own."""
    ann = {POD: POD_DOC, "sla.nri.io/container.db": "memory: {max: 4Gi}"}
    web, api, db = (sla_for_container(ann, name) for name in ("web", "api", "db"))
    assert web is api and web.keys == (POD,)
    assert db is not web and db.memory.max == 4 << 30 and db.cpu == web.cpu


def test_container_document_merges_key_by_key():
    ann = {
        POD: POD_DOC,
        WEB: """
cpu: {limit: 3}                 # period stays 50ms from the pod
memory: {max: 4Gi}              # high stays 1Gi
io: {max: [{device: /dev/nvme0n1, write-iops: 5}]}   # lists are replaced whole
gpu: {topology: nvlink}
""",
    }
    sla = sla_for_container(ann, "web")
    assert sla.keys == (POD, WEB)
    assert sla.cpu.limit == 3.0 and sla.cpu.period_us == 50_000
    assert sla.memory == MemorySla(high=GI, max=4 * GI)
    assert sla.io.weight == 100
    assert sla.io.max == (IoMaxRule("/dev/nvme0n1", None, None, None, 5),)
    assert sla.gpu == GpuSla(count=1, topology="nvlink")
    # the other containers still get the pod document alone
    assert sla_for_container(ann, "db").cpu.limit == 2.0


def test_null_in_container_document_clears():
    ann = {POD: POD_DOC, WEB: "gpu: null\nmemory: {high: null}\ncpu: {period: ~}\n"}
    sla = sla_for_container(ann, "web")
    assert sla.gpu is None
    assert sla.memory == MemorySla(high=None, max=2 * GI)
    assert sla.cpu.period_us == 100_000  # back to the default


def test_container_document_completes_pod_document():
    # neither is complete alone: the cross-field rules run on the merged result
    ann = {
        POD: "gpu: {topology: nvlink}\nmemory: {high: 1Gi}",
        WEB: "gpu: {count: 2}\nmemory: {max: 2Gi}",
    }
    sla = sla_for_container(ann, "web")
    assert sla.gpu.count == 2 and sla.gpu.topology == "nvlink"
    # the pod's section alone asks that whatever db was granted be NVLink-connected
    db = sla_for_container(ann, "db")
    assert db.gpu.count is None and db.gpu.topology == "nvlink"
    ann[POD] = "gpu: {count: 1, ids: [0]}"
    with pytest.raises(SlaError, match="sets count and ids; these are alternatives"):
        sla_for_container(ann, "db")


def test_cross_field_error_names_the_container_document(check):
    ann = {POD: "memory: {max: 10Gi}", WEB: "memory: {high: 12Gi}"}
    err = check.container_error(ann)
    assert (
        str(err) == "sla.nri.io/container.web: memory.high (12Gi) must be below memory.max (10Gi)"
    )
    # both fields from the pod: the pod document is named
    err = check.container_error({POD: "memory: {high: 12Gi, max: 10Gi}", WEB: "cpu: {limit: 1}"})
    check.assert_error(err, POD, "memory.high", "must be below memory.max (10Gi)")


def test_alternatives_across_documents(check):
    ann = {POD: "gpu: {count: 1}", WEB: "gpu: {ids: [3]}"}
    check.assert_error(check.container_error(ann), WEB, "gpu.ids", "alternatives")
    ann[WEB] = "gpu: {count: null, ids: [3]}"
    assert sla_for_container(ann, "web").gpu.ids == ("3",)


@pytest.mark.parametrize(
    ("ann", "default", "expected"),
    [
        ({POD: "{}"}, "hard", "hard"),
        ({POD: "{}"}, "soft", "soft"),
        ({POD: "{}", ALIAS: "soft"}, "hard", "soft"),
        ({POD: "{}", ALIAS: "soft", SHORT: "hard"}, "soft", "hard"),
        ({POD: "enforcement: soft", ALIAS: "hard", SHORT: "hard"}, "hard", "soft"),
        ({POD: "enforcement: hard", WEB: "enforcement: soft", SHORT: "hard"}, "hard", "soft"),
        ({POD: "enforcement: soft", WEB: "enforcement: hard"}, "soft", "hard"),
        ({POD: "enforcement: soft", WEB: "enforcement: null", SHORT: "hard"}, "soft", "hard"),
        ({WEB: "{}", SHORT: " soft\n"}, "hard", "soft"),
    ],
)
def test_enforcement_precedence(ann, default, expected):
    sla = sla_for_container(ann, "web", default_enforcement=default)
    assert sla.enforcement == expected


def test_keys_list_every_source_annotation():
    ann = {POD: "{}", WEB: "{}", SHORT: "soft", ALIAS: "hard", "other": "x"}
    assert sla_for_container(ann, "web").keys == (POD, WEB, SHORT, ALIAS)
    assert sla_for_container(ann, "db").keys == (POD, SHORT, ALIAS)


def test_bad_enforcement_annotations(check):
    err = check.container_error({POD: "{}", SHORT: "strict"})
    check.assert_error(err, SHORT, "", "must be one of hard, soft, got strict")
    err = check.container_error({POD: "{}", ALIAS: "HARD"})
    check.assert_error(err, ALIAS, "", "must be one of hard, soft")
    with pytest.raises(ProgrammingError, match="default_enforcement must be one of hard, soft"):
        sla_for_container({}, "web", default_enforcement="medium")


@pytest.mark.parametrize(
    ("key", "fragment"),
    [
        ("sla.nri.io/pods", "did you mean sla.nri.io/pod?"),
        ("sla.nri.io/enforcment", "did you mean sla.nri.io/enforcement?"),
        ("sla.nri.io/containers.web", "did you mean sla.nri.io/container.<name>?"),
        ("sla.nri.io/container.Web", "not a valid container name"),
        ("sla.nri.io/container.", "not a valid container name"),
        ("sla.nri.io/zzz", "known: sla.nri.io/pod, sla.nri.io/container.<name>"),
    ],
)
def test_unknown_annotations_under_the_prefix(check, key, fragment):
    err = check.container_error({POD: "{}", key: "cpu: {limit: 1}"})
    check.assert_error(err, key, "", fragment)


def test_output_annotations_are_ignored():
    ann = {POD: "{}", "sla.nri.io/applied": "junk", "sla.nri.io/warnings": "junk"}
    assert sla_for_container(ann, "web").keys == (POD,)


def test_custom_prefix():
    ann = {"sla.example.com/pod": "cpu: {limit: 1}", POD: "cpu: {limit: 7}"}
    sla = sla_for_container(ann, "web", prefix="sla.example.com")
    assert sla.cpu.limit == 1.0 and sla.keys == ("sla.example.com/pod",)


def test_errors_from_both_documents_are_collected(check):
    ann = {POD: "cpu: {limit: x}", WEB: "memory: {max: 1}", "sla.nri.io/podd": "x"}
    err = check.container_error(ann)
    assert [(e.key, e.field) for e in err.errors] == [
        ("sla.nri.io/podd", ""),
        (POD, "cpu.limit"),
        (WEB, "memory.max"),
    ]


def test_non_string_value_is_an_sla_error():
    with pytest.raises(SlaError) as info:
        sla_for_container({POD: 5}, "web")  # type: ignore[dict-item]
    assert str(info.value) == "sla.nri.io/pod: must be a string, got int"


def test_cached_results_are_shared_and_errors_fresh():
    ann = {POD: POD_DOC}
    assert sla_for_container(dict(ann), "web") is sla_for_container(dict(ann), "web")
    bad = {POD: "cpu: {limit: x}"}
    errors = []
    for _ in range(3):
        try:
            sla_for_container(bad, "web")
        except SlaError as exc:
            errors.append(exc)
    assert len({id(e) for e in errors}) == 3 and len({str(e) for e in errors}) == 1


def test_hostile_keys_are_cut_short_in_messages(check):
    # a YAML simple key may be up to 1024 characters; "\n" is an escape in double quotes
    err = check.error_of('cpu: {"a\\nb' + "x" * 1000 + '": 1}\n')
    assert err.field == "cpu.'a\\nbxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx...'"
    assert "\n" not in str(err) and len(str(err)) < 300


def test_container_keys_naming_no_container_of_the_pod():
    from nri_plugin.sla.parse import keys_naming_no_container

    annotations = {
        POD: "cpu: {limit: 1}",
        "sla.nri.io/container.ap": "cpu: {limit: 1}",
        WEB: "cpu: {limit: 1}",
        "sla.nri.io/container.Bad_Name": "x",
        "other.io/container.zzz": "x",
    }
    [error] = keys_naming_no_container(annotations, ("app", "web"))
    assert str(error) == (
        "sla.nri.io/container.ap: names container ap, which this pod does "
        "not have (its containers: app, web); did you mean "
        "sla.nri.io/container.app?"
    )
    assert keys_naming_no_container(annotations, ("ap", "app", "web")) == []
    assert keys_naming_no_container({"x.io/container.ap": "c"}, ("app",), prefix="x.io")
    # hostile: many keys, a bounded answer
    many = {f"sla.nri.io/container.c{i}": "cpu: {limit: 1}" for i in range(5000)}
    assert len(keys_naming_no_container(many, ("app",))) == 10
