"""Property tests: whatever an `applied` annotation holds, decode_record answers a plan or
a RecordError, quickly; nothing else escapes (no TypeError, RecursionError, MemoryError).

The interesting inputs are authenticated ones: a pod cannot make those, but decode_record
must not rely on that (a leaked key, a bug). So most examples are signed with the key
before decoding, which takes them past the MAC into the field checks."""

from __future__ import annotations

import os
import time

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nri_plugin.plan import record as record_module
from nri_plugin.plan.errors import RecordError
from nri_plugin.plan.model import ContainerPlan
from nri_plugin.plan.record import decode_record, record_text, sign_record
from tests.support.record_helpers import NODE, SNAPSHOT, signed_text

# RECORD_FUZZ_EXAMPLES=5000 for a long soak; the suite default stays quick
FUZZ = settings(
    max_examples=int(os.environ.get("RECORD_FUZZ_EXAMPLES", "200")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
KEY = b"k" * 32
OWNER = "ctr"
SLOW = 0.25  # seconds per decode: generous (2 shared cores, GC); a bounded input takes < 1 ms

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.sampled_from(
        [
            "hard",
            "soft",
            "nri",
            "hook",
            "bind",
            "0",
            "0-3",
            "0-999999999",
            "1-0",
            "0,,1",
            SNAPSHOT.inventory.gpus[0].uuid,
            "NVIDIA_VISIBLE_DEVICES",
            "nvidia.com/gpu=0",
            "[[[",
            "\u2028",
            "",
        ]
    ),
)
names = st.sampled_from(
    [
        *record_module._FIELDS,
        "v",
        "path",
        "gpus",
        "mig",
        "exclusive",
        "cpus",
        "mems",
        "shared",
        "runtime",
        "aligned",
        "mode",
        "nodes",
        "major",
        "minor",
        "read_bps",
        "x",
    ]
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(names, inner, max_size=4),
    max_leaves=16,
)
GPU = SNAPSHOT.inventory.gpus[0].uuid
# Values each field may really hold (and its edges), so that examples get past the first
# bad field often enough to reach the cross-field checks and a successful decode.
PLAUSIBLE = {
    "enforcement": ["hard", "soft"],
    "cgroup_version": [1, 2],
    "cpu_quota": [1, 50_000, 2**63 - 1],
    "cpu_period": [1000, 1_000_000],
    "cpus": ["0-3", "63", "0-63"],
    "mems": ["0", "0-1"],
    "rt_runtime": [1, 5000, 1_000_000],
    "rt_period": [1000, 1_000_000],
    "memory_max": [1, 2**30],
    "memory_high": [2**29],
    "memory_soft_limit": [2**29],
    "memory_policy": [{"mode": "bind", "nodes": "0"}],
    "io_weight": [1, 10000],
    "io_max": [
        [
            {
                "major": 8,
                "minor": 0,
                "read_bps": 1,
                "write_bps": None,
                "read_iops": None,
                "write_iops": 5,
            }
        ]
    ],
    "gpu_env": [{"NVIDIA_VISIBLE_DEVICES": GPU}],
    "gpu_cdi": [[f"nvidia.com/gpu={GPU}"]],
    "placement_record": [
        {"gpus": [GPU], "aligned": True},
        {"exclusive": "2-3", "mems": "0"},
        {"gpus": ["0"], "runtime": True},
    ],
}


@st.composite
def bodies(draw):
    """Record-shaped objects: plausible values with hostile ones in random places."""
    body: dict[str, object] = {}
    if draw(st.integers(0, 9)):
        body.update(v=2, path="nri", enforcement="hard", cgroup_version=2)
    for name in draw(st.lists(st.sampled_from([*PLAUSIBLE, "x", "v", "path"]), max_size=6)):
        hostile = name not in PLAUSIBLE or not draw(st.integers(0, 4))
        body[name] = draw(values if hostile else st.sampled_from(PLAUSIBLE[name]))
    return body


def _decode(text: str) -> object:
    started = time.perf_counter()
    try:
        result = decode_record(text, OWNER, KEY, NODE)
    except RecordError as exc:
        assert len(str(exc)) < 400  # bounded message, whatever the input
        result = exc
    assert time.perf_counter() - started < SLOW
    return result


@FUZZ
@given(bodies())
def test_authenticated_bodies_decode_or_raise_record_error(body):
    result = _decode(sign_record(record_text(body), OWNER, KEY))
    if not isinstance(result, RecordError):
        path, plan = result
        assert path in ("nri", "hook") and isinstance(plan, ContainerPlan)


@FUZZ
@given(st.text(max_size=400))
def test_any_text_is_refused(text):
    assert isinstance(_decode(text), RecordError)


@FUZZ
@given(bodies(), st.integers(min_value=0), st.characters())
def test_an_edited_record_never_decodes(body, where, char):
    text = sign_record(record_text(body), OWNER, KEY)
    i = where % len(text)
    if text[i] == char:
        return
    assert isinstance(_decode(text[:i] + char + text[i + 1 :]), RecordError)


@FUZZ
@given(st.integers(min_value=1, max_value=20_000), st.sampled_from(["[", '{"a":']))
def test_nesting_of_any_depth_is_refused_within_the_bound(depth, opener):
    closer = "]" if opener == "[" else "}"
    text = '{"v":2,"x":' + opener * depth + "1" + closer * depth + "}"
    assert isinstance(_decode(text), RecordError)  # a pod's text: never parsed
    assert isinstance(_decode(signed_text(text, OWNER, KEY)), RecordError)
