"""decide(node, ContainerRequest) -> a frozen Decision; it never raises."""

from __future__ import annotations

import logging

import pytest

from nri_plugin.config.values import NodeConfig
from nri_plugin.core.decision import Decision, decide
from nri_plugin.core.node import OneShotNode
from nri_plugin.core.request import ContainerRequest
from nri_plugin.errors import INTERNAL
from nri_plugin.granted import GrantedResources
from nri_plugin.value import FrozenValueError, replace

IO_SLA = {"sla.nri.io/pod": "io:\n  max:\n    - {device: /dev/sda, read-bps: 1Mi}\n"}


def broken_resolver(device: str) -> tuple[int, int]:
    """A device resolver with a bug: not the OSError/SlaFailure the planner expects."""
    raise KeyError(device)


def test_a_bug_becomes_an_internal_failure_logged_once_with_its_traceback(caplog):
    node = OneShotNode(NodeConfig(), 2, resolve_device=broken_resolver)
    with caplog.at_level(logging.ERROR, logger="nri_sla"):
        decision = decide(node, ContainerRequest(IO_SLA, "app", namespace="prod", owner="ctr-1"))
    assert decision.outcome == "refused" and decision.plan is None
    assert decision.error is not None and decision.error.kind == INTERNAL
    assert decision.reason == "internal"
    assert decision.error_text == ("internal error while deciding the SLA: KeyError: '/dev/sda'")
    [record] = caplog.records
    assert record.levelno == logging.ERROR and "ctr-1" in record.getMessage()
    assert record.exc_info is not None and record.exc_info[0] is KeyError


def test_a_reusable_decision_is_frozen_and_shared():
    node = OneShotNode(NodeConfig(), 2)
    request = ContainerRequest(
        {"sla.nri.io/pod": "cpu: {limit: 1}"},
        "app",
        namespace="prod",
        owner="a",
        granted=GrantedResources(cpu_quota=100_000),
    )
    first = decide(node, request)
    replica = decide(node, replace(request, owner="b"))
    assert first.outcome == "enforced" and first.reusable
    assert replica is first  # nothing in it can change: every replica may hold it
    with pytest.raises(FrozenValueError):
        first.plan = None  # type: ignore[misc]
    with pytest.raises(FrozenValueError):
        request.name = "other"  # type: ignore[misc]


def test_no_sla_is_skipped_and_a_bad_one_refused_naming_the_key():
    node = OneShotNode(NodeConfig(), 2)
    assert decide(node, ContainerRequest({}, "app")) == Decision("skipped")
    bad = decide(node, ContainerRequest({"sla.nri.io/pod": "cpu: {limits: 2}"}, "app"))
    assert bad.outcome == "refused" and bad.error is not None
    assert bad.error.kind == "invalid" and "sla.nri.io/pod" in bad.error_text


def test_the_reuse_key_sees_every_field_of_the_grant():
    """A replica with another grant is another decision: the grant's key (spelled out for
    speed) must change with each of its fields, and equal grants give equal keys."""
    base = dict(
        cpu_quota=1,
        cpu_period=2,
        cpu_shares=3,
        memory_limit=4,
        cdi_devices=("a",),
        gpu_devices=((195, 0),),
        device_mounts=("m",),
        env_gpus="0",
        caps_minors=(21, 22),
        all_devices=False,
    )
    other = dict(
        cpu_quota=5,
        cpu_period=6,
        cpu_shares=7,
        memory_limit=8,
        cdi_devices=("b",),
        gpu_devices=((195, 1),),
        device_mounts=("n",),
        env_gpus="1",
        caps_minors=(30, 31),
        all_devices=True,
    )
    key = GrantedResources(**base).key()
    assert key == GrantedResources(**base).key()
    assert len(key) == len(GrantedResources.__slots__) == len(base)
    for name in base:
        assert GrantedResources(**{**base, name: other[name]}).key() != key, name


def test_the_pods_protobuf_map_decides_as_a_dict_does():
    """The plugin hands decide the request's protobuf map itself (no copy): the same
    decision as from a dict of the same annotations, shared with it as a replica's, and a
    map with other nri-sla keys is another decision."""
    from nri_plugin.nri.pb import nri_pb2 as pb

    node = OneShotNode(NodeConfig(), 2)
    annotations = {"sla.nri.io/pod": "cpu: {limit: 1}", "io.kubernetes.cri.sandbox-id": "x"}
    from_dict = decide(node, ContainerRequest(annotations, "app", owner="a"))
    pod = pb.PodSandbox(annotations=annotations)
    assert decide(node, ContainerRequest(pod.annotations, "app", owner="b")) is from_dict
    pod.annotations["sla.nri.io/container.app"] = "memory: {max: 64Mi}"
    other = decide(node, ContainerRequest(pod.annotations, "app", owner="c"))
    assert other is not from_dict and other.plan is not None
    assert other.plan.memory_max == 64 << 20


def test_a_programming_error_is_a_bug_logged_with_its_traceback(caplog, monkeypatch):
    """ProgrammingError is typed, but a bug all the same: no failure handler takes it for a
    refusal, and the operator gets its traceback, as for an untyped one."""
    from nri_plugin.core import decision as decision_module
    from nri_plugin.errors import ProgrammingError

    def planner_with_a_broken_contract(sla, ctx):
        raise ProgrammingError("topology 'ring' is not one of any, numa, nvlink")

    monkeypatch.setattr(decision_module, "plan_container", planner_with_a_broken_contract)
    node = OneShotNode(NodeConfig(), 2)
    with caplog.at_level(logging.ERROR, logger="nri_sla"):
        decision = decide(
            node,
            ContainerRequest(
                {"sla.nri.io/pod": "cpu: {limit: 1}"}, "app", namespace="prod", owner="ctr-1"
            ),
        )
    assert decision.outcome == "refused" and decision.error.kind == INTERNAL
    assert decision.error_text == (
        "internal error while deciding the SLA: ProgrammingError: "
        "topology 'ring' is not one of any, numa, nvlink"
    )
    [record] = caplog.records
    assert record.exc_info is not None and record.exc_info[0] is ProgrammingError
