"""DecisionInputs: one frozen value for what a decision depends on, hashed by the plugin's
reuse and digested by the hook's cache; the code part taken from what was imported."""

from __future__ import annotations

import sys
import time

import pytest
import yaml

import nri_plugin.core.inputs as inputs_module
from nri_plugin.config.values import NodeConfig
from nri_plugin.core.decision import decide, node_inputs
from nri_plugin.core.inputs import (
    ENFORCEMENT_ALIAS,
    DecisionInputs,
    NodeInputs,
    code_unchanged,
    inputs_for,
    loaded_code,
    sla_text,
)
from nri_plugin.core.node import OneShotNode
from nri_plugin.core.request import ContainerRequest
from nri_plugin.granted import GrantedResources
from nri_plugin.value import replace

NODE = NodeInputs("config", ("facts", "/sys"), "code")
BASE = dict(
    sla=(("sla.nri.io/pod", "cpu: {limit: 1}"),),
    name="app",
    namespace="prod",
    granted=GrantedResources(cpu_quota=100_000).key(),
    node=NODE,
    nri_version="0.9",
    distrust="",
)
OTHER = dict(
    sla=(("sla.nri.io/pod", "cpu: {limit: 2}"),),
    name="side",
    namespace="dev",
    granted=GrantedResources(cpu_quota=50_000).key(),
    node=NodeInputs("config", ("facts", "/sys"), "other code"),
    nri_version=None,
    distrust="namespace key without its pod keys",
)


def test_equal_inputs_are_one_key_and_every_field_counts():
    """Equal, equal hash, equal digest; a change of any one field changes all three."""
    first, second = DecisionInputs(**BASE), DecisionInputs(**BASE)
    assert first == second and hash(first) == hash(second)
    assert first.digest() == second.digest()
    assert len(BASE) == len(DecisionInputs.__slots__)
    for name in BASE:
        changed = DecisionInputs(**{**BASE, name: OTHER[name]})
        assert changed != first, name
        assert changed.digest() != first.digest(), name
    for part in ("config", "facts", "code"):
        node = NodeInputs(
            **{
                "config": NODE.config,
                "facts": NODE.facts,
                "code": NODE.code,
                part: ("x",) if part == "facts" else "x",
            }
        )
        assert node != NODE and DecisionInputs(**{**BASE, "node": node}) != first, part


def test_inputs_are_frozen_values():
    inputs = DecisionInputs(**BASE)
    with pytest.raises(AttributeError, match="frozen"):
        inputs.name = "other"  # type: ignore[misc]
    with pytest.raises(AttributeError, match="frozen"):
        NODE.code = "other"  # type: ignore[misc]
    assert repr(inputs).startswith("DecisionInputs(distrust='', granted=(")
    assert {inputs: 1}[DecisionInputs(**BASE)] == 1


def test_the_sla_text_is_every_key_under_the_prefix_and_the_alias_sorted():
    annotations = {
        "sla.nri.io/pod": "b",
        "sla.nri.io/container.app": "a",
        ENFORCEMENT_ALIAS: "soft",
        "sla.nri.io.other/x": "no",
        "io.kubernetes.pod.name": "web-1",
    }
    assert sla_text(annotations, "sla.nri.io") == (
        (ENFORCEMENT_ALIAS, "soft"),
        ("sla.nri.io/container.app", "a"),
        ("sla.nri.io/pod", "b"),
    )
    per_replica = {**annotations, "io.kubernetes.pod.name": "web-2"}
    assert inputs_for(annotations, "sla.nri.io", "app", "prod", (), NODE) == inputs_for(
        per_replica, "sla.nri.io", "app", "prod", (), NODE
    )


def test_more_sla_keys_than_a_pod_may_have_are_no_inputs():
    """Past MAX_SLA_KEYS the selection stops before reading a value: no inputs, so the
    decision (a refusal) is neither reused by the plugin nor cached by the hook."""
    from nri_plugin.core.inputs import MAX_SLA_KEYS

    class Counting(dict):
        reads = 0

        def __getitem__(self, key):
            Counting.reads += 1
            return super().__getitem__(key)

    fits = Counting({f"sla.nri.io/k{i}": "v" for i in range(MAX_SLA_KEYS)})
    assert len(sla_text(fits, "sla.nri.io")) == MAX_SLA_KEYS
    over = Counting({**fits, "sla.nri.io/one-more": "v", "io.kubernetes.pod.name": "x"})
    Counting.reads = 0
    assert sla_text(over, "sla.nri.io") is None and Counting.reads == MAX_SLA_KEYS
    assert inputs_for(over, "sla.nri.io", "app", "prod", (), NODE) is None
    node = OneShotNode(NodeConfig(), 2)
    refused = decide(node, ContainerRequest(dict(over), "app"))
    assert refused.outcome == "refused" and refused.inputs is None and not node.reusable


def test_a_new_config_object_is_another_decision_without_a_reload():
    """The node config is in the inputs: a node whose config object is replaced (as the
    demo does, without NodeState.reconfigure) never hands out a decision made under the
    old one. The SLA names no enforcement, so the config's default decides it."""
    node = OneShotNode(NodeConfig(enforcement="hard"), 2)
    request = ContainerRequest(
        {"sla.nri.io/pod": "cpu: {limit: 1}"}, "app", namespace="prod", owner="a"
    )
    hard = decide(node, request)
    assert hard.reusable and hard.plan.enforcement == "hard"
    assert decide(node, replace(request, owner="b")) is hard
    node.config = replace(node.config, enforcement="soft")
    soft = decide(node, replace(request, owner="c"))
    assert soft.plan.enforcement == "soft" and soft.inputs != hard.inputs
    assert soft.inputs.node == node_inputs(node) != hard.inputs.node


def test_the_code_is_what_this_process_imported():
    """loaded_code lists the files of the nri_plugin and PyYAML modules in sys.modules
    (and their directories); a hit needs every one unchanged."""
    code = loaded_code(time.time_ns())
    assert code is not None
    listed = {f"{d}/{name}" for d, _ino, _ctime, files in code["dirs"] for name, *_ in files}
    assert inputs_module.__file__ in listed and yaml.__file__ in listed
    assert sys.modules["nri_plugin.config.values"].__file__ in listed
    assert code_unchanged(code) == code["digest"]
    directory, ino, ctime, files = code["dirs"][0]
    name, file_ino, file_ctime = files[0]
    moved = [
        [directory, ino, ctime, [[name, file_ino + 1, file_ctime], *files[1:]]],
        *code["dirs"][1:],
    ]
    assert code_unchanged({**code, "dirs": moved}) is None  # a new inode: an upgrade
    touched = [[directory, ino, ctime + 1, files], *code["dirs"][1:]]
    assert code_unchanged({**code, "dirs": touched}) is None  # a module added or removed
    assert code_unchanged({"dirs": [["x"]]}) is None and code_unchanged(None) is None


def test_code_that_changed_after_the_run_began_is_not_trusted():
    """A module whose file changed after the run began may not be what was loaded: no
    identity is taken (the hook then stores nothing). A run that began at the epoch began
    before every file's last change."""
    assert loaded_code(0) is None
    assert loaded_code(time.time_ns()) is not None
