"""The OCI hook's node keeps no books: it builds an allocator only for an SLA asking for
placement, knows no other container, and deciding on it holds nothing anywhere."""

from __future__ import annotations

from pathlib import Path

from nri_plugin.config.values import NodeConfig, Permissions
from nri_plugin.core.decision import decide
from nri_plugin.core.node import OneShotNode
from nri_plugin.core.request import ContainerRequest
from nri_plugin.granted import GrantedResources
from nri_plugin.plan.allocator import Allocator
from nri_plugin.plan.context import PodUsage
from nri_plugin.topology.snapshot import load_snapshot

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
KEY = "sla.nri.io/pod"


def node_with_factory(built: list[Allocator]) -> OneShotNode:
    snap = load_snapshot(EXAMPLES / "dgx-like.yaml")

    def factory(gpus: bool) -> Allocator:
        built.append(Allocator(snap.topology, snap.inventory))
        return built[-1]

    return OneShotNode(
        NodeConfig(permissions=Permissions(realtime=("*",))), 1, allocator_factory=factory
    )


def test_only_a_placement_sla_builds_an_allocator_and_nothing_is_held():
    built: list[Allocator] = []
    node = node_with_factory(built)
    plain = decide(node, ContainerRequest({KEY: "cpu: {limit: 1}"}, "c", namespace="ml"))
    assert plain.outcome == "enforced" and built == []
    placed = decide(
        node,
        ContainerRequest(
            {KEY: "cpu: {exclusive: 2}"},
            "c",
            namespace="ml",
            owner="a",
            granted=GrantedResources(cpu_shares=2048),
        ),
    )
    assert placed.outcome == "enforced", placed.error_text
    assert placed.plan.placement_record["exclusive"]  # chosen on the node's topology
    (allocator,) = built
    assert allocator.owners() == () and not allocator.exclusive_cpus_in_use()


def test_rt_time_is_granted_within_the_caps_alone():
    node = node_with_factory([])
    assert node.rt_budget is None
    decision = decide(
        node, ContainerRequest({KEY: "cpu: {rt-runtime: 5ms}"}, "c", namespace="rt", owner="a")
    )
    assert decision.plan is not None and decision.plan.rt_runtime == 5000


def test_it_knows_no_other_container():
    node = OneShotNode(NodeConfig(), 2)
    assert node.pod_usage("pod", "a") == PodUsage() and node.cpu_floors("a") == ()
    placed = decide(node, ContainerRequest({KEY: "numa: {nodes: '0'}"}, "c", namespace="ml"))
    assert placed.outcome == "refused" and "no node topology" in placed.error_text
