"""The `applied` record: only what nri-sla wrote for this container decodes, and every
field is checked before use, in bounded time whatever a pod put there."""

from __future__ import annotations

import json
import time

import pytest

from nri_plugin.plan import record as record_module
from nri_plugin.plan.errors import RecordError, UnauthenticatedRecord
from nri_plugin.plan.model import ContainerPlan, IoLimit, MemoryPolicy
from nri_plugin.plan.record import (
    MAX_RECORD_BYTES,
    decode_record,
    encode_record,
    granted_permissions,
    record_text,
    sign_record,
)
from nri_plugin.value import fields, replace
from tests.support.record_helpers import KEY, NODE, OWNER, SNAPSHOT, signed_text

GPU0, GPU1 = (g.uuid for g in SNAPSHOT.inventory.gpus[:2])
BASE = {"v": 2, "path": "nri", "enforcement": "hard", "cgroup_version": 2}

# Every recorded field set, as the planner would (warnings, reasons and key are not
# recorded).
FULL = ContainerPlan(
    "soft",
    1,
    cpu_quota=250_000,
    cpu_period=100_000,
    cpus="0-3,32-35",
    mems="0",
    rt_runtime=5000,
    rt_period=1_000_000,
    memory_max=10 << 30,
    memory_high=8 << 30,
    memory_soft_limit=8 << 30,
    memory_policy=MemoryPolicy("bind", "0"),
    io_weight=500,
    io_max=(IoLimit(259, 0, read_bps=500 << 20, write_iops=10000),),
    placement_record={
        "gpus": [GPU0, GPU1],
        "exclusive": "2-3,34-35",
        "cpus": "0-3,32-35",
        "mems": "0",
        "aligned": True,
    },
)


def signed(body: object, owner: str = OWNER, key: bytes = KEY) -> str:
    """`body` authenticated as nri-sla would (as if the key had leaked to the author)."""
    return sign_record(record_text(body), owner, key)


def test_every_field_round_trips():
    text = encode_record(FULL, "nri", OWNER, KEY)
    assert json.loads(text)["mac"] and text.isascii() and len(text) < 2048
    assert decode_record(text, OWNER, KEY, NODE) == ("nri", FULL)
    assert signed(BASE) == signed_text(json.dumps(BASE, separators=(",", ":"), sort_keys=True))
    # A plan field that is recorded but not checked (or the reverse) would fail restore.
    recorded = {f.name for f in fields(ContainerPlan)} - record_module._SKIP
    assert set(record_module._FIELDS) - set(record_module._INJECTED) == recorded


def test_the_mac_is_hmac_sha256_for_any_key_and_after_a_key_change():
    """sign_record keeps the last key's HMAC start: it must stay the documented MAC for
    keys shorter than, as long as and longer than SHA-256's block, and when keys
    alternate (a test's key, then the node's)."""
    text = record_text(BASE)
    for key in (KEY, b"", b"k", bytes(64), bytes(range(65)), KEY, b"\xff" * 200, KEY):
        for owner in (OWNER, "other"):
            assert signed(BASE, owner, key) == signed_text(text, owner, key)
            assert decode_record(signed(BASE, owner, key), owner, key)[0] == "nri"
    assert signed(BASE, OWNER, KEY) != signed(BASE, OWNER, KEY[::-1])


def test_a_record_from_before_issue_18_still_restores():
    """nri-sla chose and injected GPUs then: the record's injection is checked and left
    out of the plan (the runtime applied it at creation), its GPUs are still held."""
    old = {
        **BASE,
        "gpu_env": {"NVIDIA_VISIBLE_DEVICES": f"{GPU0},{GPU1}"},
        "gpu_cdi": [f"nvidia.com/gpu={GPU0}", f"nvidia.com/gpu={GPU1}"],
        "placement_record": {"gpus": [GPU0, GPU1], "shared": True, "runtime": True},
    }
    _, plan = decode_record(signed(old), OWNER, KEY, NODE)
    assert plan == ContainerPlan(
        "hard", 2, placement_record={"gpus": [GPU0, GPU1], "shared": True, "runtime": True}
    )
    mig = SNAPSHOT.inventory.gpus[0].mig_instances
    if mig:  # the snapshot's first GPU in MIG mode: the old one-device form
        _, plan = decode_record(
            signed({**BASE, "placement_record": {"mig": mig[0].uuid}}), OWNER, KEY, NODE
        )
        assert plan.placement_record == {"mig": mig[0].uuid}


def test_a_plain_plan_round_trips_without_node_facts():
    plan = ContainerPlan("hard", 2, cpu_quota=50_000, cpu_period=100_000, memory_max=256 << 20)
    assert decode_record(encode_record(plan, "hook", OWNER, KEY), OWNER, KEY) == ("hook", plan)


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("what a pod writes", json.dumps({**BASE, "placement_record": {"gpus": [GPU0]}})),
        ("a MAC made with another key", signed(BASE, key=bytes(32))),
        ("another container's record", signed(BASE, owner="victim")),
        ("a version 1 record", '{"cgroup_version":2,"enforcement":"hard","path":"nri","v":1}'),
        ("an uppercase MAC", signed(BASE)[:-66] + signed(BASE)[-66:-2].upper() + '"}'),
        ("non-ASCII text", signed(BASE).replace("hard", "härd")),
        ("empty", ""),
        ("just a tail", ',"mac":"' + "0" * 64 + '"}'),
    ],
)
def test_records_nri_sla_did_not_write_for_this_container(name, text):
    with pytest.raises(UnauthenticatedRecord) as caught:
        decode_record(text, OWNER, KEY, NODE)
    assert caught.value.problem == "unauthenticated" and "not written by nri-sla" in str(
        caught.value
    )


@pytest.mark.parametrize(
    "mac", ["0" * 31 + "g" + "0" * 32, "A" * 64, "0" * 63 + " ", "-" + "0" * 63]
)
def test_a_mac_that_is_not_lowercase_hex_is_no_mac(mac):
    """Told apart before any HMAC is computed: a character outside 0-9a-f anywhere in the
    64 (the check strips hex digits from both ends and must see what is left)."""
    text = signed(BASE)[:-66] + mac + '"}'
    with pytest.raises(UnauthenticatedRecord, match=r"\(no record MAC\)"):
        decode_record(text, OWNER, KEY, NODE)


def test_any_edit_of_a_record_is_caught():
    text = encode_record(FULL, "nri", OWNER, KEY)
    for i in range(len(text)):
        for replacement in {"0", "9", "}"} - {text[i]}:
            edited = text[:i] + replacement + text[i + 1 :]
            with pytest.raises(RecordError):
                decode_record(edited, OWNER, KEY, NODE)
    with pytest.raises(RecordError):  # more GPUs claimed by hand: the MAC no longer fits
        decode_record(text.replace(f'"{GPU1}"]', f'"{GPU1}","GPU-x"]', 1), OWNER, KEY, NODE)


def test_huge_records_are_refused_by_size_before_anything_else():
    huge = '{"v":2,"placement_record":{"exclusive":"0-' + "9" * (16 << 20) + '"}}'
    started = time.perf_counter()
    with pytest.raises(RecordError, match=f"larger than {MAX_RECORD_BYTES} bytes"):
        decode_record(huge, OWNER, KEY, NODE)
    assert time.perf_counter() - started < 0.05  # measured: ~1 us (a length check)
    with pytest.raises(RecordError, match="larger than"):
        decode_record(signed({**BASE, "pad": "x" * MAX_RECORD_BYTES}), OWNER, KEY, NODE)


def test_deep_nesting_is_refused_before_json_parses_it():
    # 5,000 levels fit in 16 KiB; json.loads would hit the recursion limit.
    deep = json.dumps(BASE)[:-1] + ',"placement_record":' + "[" * 5000 + "]" * 5000 + "}"
    text = signed_text(deep)
    assert len(text) < MAX_RECORD_BYTES
    started = time.perf_counter()
    with pytest.raises(RecordError, match="nested deeper than 3 levels"):
        decode_record(text, OWNER, KEY, NODE)
    with pytest.raises(UnauthenticatedRecord):  # the usual case: a pod has no key
        decode_record(deep, OWNER, KEY, NODE)
    assert time.perf_counter() - started < 0.5  # measured: ~2 ms for both
    # Brackets inside strings are text, not nesting.
    with pytest.raises(RecordError, match="enforcement: must be one of"):
        decode_record(signed({**BASE, "enforcement": "[[[[{{{{"}), OWNER, KEY, NODE)


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"enforcement": "strict"}, "enforcement: must be one of hard, soft"),
        ({"cgroup_version": True}, "cgroup_version: must be one of 1, 2, got True"),
        ({"cgroup_version": "2"}, "cgroup_version: must be one of 1, 2"),
        ({"cpu_quota": -1}, "cpu_quota: must be a whole number from 1"),
        ({"cpu_quota": 2.5}, "cpu_quota: must be a whole number"),
        ({"cpu_quota": 1 << 64}, "cpu_quota: must be a whole number"),
        ({"cpu_period": 10}, "cpu_period: must be a whole number from 1000 to 1000000"),
        ({"memory_max": "10Gi"}, "memory_max: must be a whole number"),
        ({"memory_max": None}, "memory_max: must be a whole number"),
        ({"io_weight": 0}, "io_weight: must be a whole number from 1 to 10000"),
        ({"cpus": [0, 1]}, "cpus: must be an id list"),
        ({"cpus": "0-999999999"}, "cpus: ids must be from 0 to 63"),
        ({"mems": "2"}, "mems: ids must be from 0 to 1"),
        ({"mems": ""}, "mems: must name at least one id"),
        ({"memory_policy": {"mode": "bind", "nodes": "0", "flags": 1}}, "'flags' is not one of"),
        ({"memory_policy": {"mode": "spread", "nodes": "0"}}, "must be one of bind, preferred"),
        ({"io_max": [{"major": 8, "minor": -1}]}, "io_max: must be a whole number from 0"),
        ({"io_max": [{"major": 8, "minor": 0, "read_bps": 0}]}, "io_max: must be a whole number"),
        ({"io_max": [{"major": 8, "minor": 0}] * 65}, "io_max: must be a list of 1 to 64"),
        ({"io_max": {"major": 8}}, "io_max: must be a list"),
        ({"gpu_env": {"LD_PRELOAD": "/x.so"}}, "'LD_PRELOAD' is not one of NVIDIA_VISIBLE_DEVICES"),
        ({"gpu_cdi": ["x" * 300]}, "gpu_cdi: must be a name of 1 to 256 characters"),
        ({"placement_record": []}, "placement_record: must be an object"),
        ({"placement_record": {"gpus": "0"}}, "gpus must be a list of 1 to 256 GPUs"),
        ({"placement_record": {"gpus": [0]}}, "must be a name of 1 to 256 characters, got 0"),
        (
            {"placement_record": {"gpus": ["GPU-not-here"]}},
            "GPU 'GPU-not-here' is not on this node",
        ),
        ({"placement_record": {"gpus": ["8"]}}, "GPU '8' is not on this node"),
        ({"placement_record": {"mig": "MIG-none"}}, "MIG device 'MIG-none' is not on this node"),
        ({"placement_record": {"migs": ["MIG-none"]}}, "MIG device 'MIG-none' is not on this node"),
        ({"placement_record": {"migs": []}}, "migs must be a list of 1 to"),
        ({"placement_record": {"exclusive": "0-4294967295"}}, "names an id too large"),
        ({"placement_record": {"shared": 1}}, "shared must be true when present, got 1"),
        ({"placement_record": {"owner": "x"}}, "'owner' is not one of"),
        ({"rt_runtime": 5000}, "rt_runtime and rt_period come together"),
        ({"rt_period": 1_000_000}, "rt_runtime and rt_period come together"),
        ({"rt_runtime": 5000, "rt_period": -1_000_000}, "rt_period: must be a whole number from"),
        ({"rt_runtime": -5000, "rt_period": 1_000_000}, "rt_runtime: must be a whole number from"),
        ({"rt_runtime": 900_000, "rt_period": 100_000}, "rt_runtime (900000) is above rt_period"),
        ({"path": "kubelet"}, "path must be one of nri, hook"),
        ({"gpus_all": True}, "'gpus_all' is not a record field"),
        ({"v": 3}, "unknown record version 3"),
    ],
)
def test_every_field_is_checked_before_use(change, says):
    with pytest.raises(RecordError) as caught:
        decode_record(signed({**BASE, **change}), OWNER, KEY, NODE)
    assert says in str(caught.value)
    assert caught.value.problem == "invalid"
    assert len(str(caught.value)) < 200  # the message never repeats a hostile value


@pytest.mark.parametrize("missing", ["enforcement", "cgroup_version"])
def test_required_fields(missing):
    body = {k: v for k, v in BASE.items() if k != missing}
    with pytest.raises(RecordError, match=f"{missing} is missing"):
        decode_record(signed(body), OWNER, KEY, NODE)


def test_a_huge_range_costs_nothing():
    started = time.perf_counter()
    for text in ("0-999999999", "0-65535," * 30):
        with pytest.raises(RecordError):
            decode_record(signed({**BASE, "cpus": text.rstrip(",")}), OWNER, KEY, NODE)
    assert time.perf_counter() - started < 0.1  # bounded before any range is expanded


def test_the_hook_checks_gpu_names_for_form_only():
    plan = replace(FULL, placement_record={"gpus": ["GPU-elsewhere"]})
    text = encode_record(plan, "nri", OWNER, KEY)
    assert decode_record(text, OWNER, KEY)[1].placement_record == {"gpus": ["GPU-elsewhere"]}
    with pytest.raises(RecordError, match="not on this node"):
        decode_record(text, OWNER, KEY, NODE)


@pytest.mark.parametrize(
    ("plan", "needs"),
    [
        (ContainerPlan("hard", 2, cpu_quota=1000), ()),
        (FULL, ("realtime", "gpus", "exclusive-cpus", "io-max")),
        (ContainerPlan("hard", 1, placement_record={"gpus": [GPU0], "runtime": True}), ("gpus",)),
        (ContainerPlan("hard", 1, placement_record={"mig": "MIG-1"}), ("gpus",)),
        (ContainerPlan("hard", 1, placement_record={"migs": ["MIG-1"]}), ("gpus",)),
        (ContainerPlan("hard", 1, placement_record={"cpus": "0-3", "mems": "0"}), ()),
    ],
)
def test_granted_permissions(plan, needs):
    assert granted_permissions(plan) == needs
