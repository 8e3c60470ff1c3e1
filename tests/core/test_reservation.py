"""Deciding takes nothing; admitting takes the plan's GPUs, exclusive CPUs and RT time
and the container's place in the CPU pool, as one reservation that commit keeps and
rollback (or leaving it uncommitted) gives back, every book at once."""

from __future__ import annotations

from pathlib import Path

import pytest

from nri_plugin.config.values import NodeConfig, Permissions
from nri_plugin.core.decision import decide
from nri_plugin.core.errors import ReservationClosed
from nri_plugin.core.nodestate import NodeState
from nri_plugin.core.request import ContainerRequest
from nri_plugin.core.reservation import nothing_taken
from nri_plugin.errors import InternalFailure
from nri_plugin.granted import GrantedResources
from nri_plugin.plan.allocator import Allocator
from nri_plugin.plan.errors import PlacementError, RtBudgetExceeded
from nri_plugin.plan.rt_budget import RtBudget, RtGrant
from nri_plugin.topology.snapshot import load_snapshot

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
KEY = "sla.nri.io/pod"
SLA = "cpu: {exclusive: 2, rt-runtime: 100ms, rt-period: 1s}\ngpu: {count: 1}"
GRANTED = GrantedResources(cpu_shares=2048, cdi_devices=("nvidia.com/gpu=0",))


def node() -> NodeState:
    snap = load_snapshot(EXAMPLES / "dgx-like.yaml")
    config = NodeConfig(permissions=Permissions(realtime=("*",)))
    return NodeState(
        config, 1, allocator=Allocator(snap.topology, snap.inventory), rt_budget=RtBudget(0.5)
    )


def decided(n: NodeState, owner: str = "a"):
    decision = decide(
        n, ContainerRequest({KEY: SLA}, "c", namespace="ml", owner=owner, granted=GRANTED)
    )
    assert decision.outcome == "enforced", decision.error_text
    return decision.plan


def admit(n: NodeState, plan, owner: str = "a"):
    return n.admit(owner, plan, n.gpu_grant(GRANTED), GRANTED.cpu_request_millis, "")


def books(n: NodeState, owner: str = "a") -> tuple:
    """What each book holds for `owner`: GPUs, exclusive CPUs, RT share, pool member."""
    placement = n.allocator.placement_of(owner)
    return (
        placement.gpus if placement else (),
        placement.exclusive_cpus if placement else frozenset(),
        n.rt_budget.share_of(owner),
        n.cpu_pool.member(owner) is not None,
    )


NOTHING = ((), frozenset(), 0.0, False)


def test_deciding_takes_nothing_and_admitting_takes_every_book():
    n = node()
    plan = decided(n)
    assert books(n) == NOTHING
    held = admit(n, plan)
    gpus, cpus, rt, pooled = books(n)
    assert len(gpus) == 1 and len(cpus) == 2 and rt == pytest.approx(0.1) and pooled
    held.commit()
    assert books(n) == (gpus, cpus, rt, pooled)


def test_a_failure_after_admission_gives_back_every_book():
    n = node()
    held = admit(n, decided(n))
    with pytest.raises(RuntimeError, match="the answer broke"), held:
        assert books(n) != NOTHING
        raise RuntimeError("the answer broke")
    assert held.state == "rolled back"
    assert books(n) == NOTHING
    assert not n.allocator.gpus_in_use() and not n.allocator.exclusive_cpus_in_use()
    assert n.rt_budget.owners() == ()


def test_leaving_a_reservation_uncommitted_rolls_it_back():
    n = node()
    with admit(n, decided(n)):
        pass
    assert books(n) == NOTHING


def test_commit_is_idempotent_and_a_committed_reservation_cannot_roll_back():
    n = node()
    with admit(n, decided(n)) as held:
        held.commit()
        held.commit()
    kept = books(n)
    assert kept != NOTHING
    with pytest.raises(ReservationClosed, match="committed"):
        held.rollback()
    assert books(n) == kept  # the refused rollback gave nothing back


def test_a_rolled_back_reservation_cannot_commit():
    n = node()
    held = admit(n, decided(n))
    held.rollback()
    held.rollback()  # again: nothing
    with pytest.raises(ReservationClosed, match="rolled back") as caught:
        held.commit()
    assert isinstance(caught.value, InternalFailure)  # a caller's bug, not the container's
    assert books(n) == NOTHING


def test_a_book_that_refuses_at_admission_leaves_the_others_untaken():
    """Another container took the RT time after the plan was made: the placement already
    taken for this one is given back with it."""
    n = node()
    plan = decided(n)
    n.rt_budget.reserve("other", RtGrant(450_000, 1_000_000))
    with pytest.raises(RtBudgetExceeded):
        admit(n, plan)
    assert books(n) == NOTHING


def test_exclusive_cpus_taken_since_the_plan_refuse_the_admission():
    n = node()
    first, second = decided(n, "a"), decided(n, "b")  # both planned on the same free CPUs
    admit(n, first, "a").commit()
    with pytest.raises(PlacementError, match="already held by a"):
        admit(n, second, "b")
    assert books(n, "b") == NOTHING and books(n, "a") != NOTHING


def test_nothing_taken_has_nothing_to_give_back():
    held = nothing_taken("a")
    with held:
        pass
    with pytest.raises(ReservationClosed):
        held.commit()
