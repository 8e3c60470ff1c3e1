"""The Allocator's Holdings snapshots and the pure best-fit choice that reads them."""

from dataclasses import FrozenInstanceError

import pytest

from nri_plugin.plan.best_fit import choose_placement
from nri_plugin.plan.placement_values import EXCLUSIVE, SHARED, Holdings
from nri_plugin.plan.placement_values import PlacementRequest as Req


def test_holdings_name_every_holder(dgx, mig):
    a = dgx.allocate(Req("a", gpu_count=1))
    s1 = dgx.allocate(Req("s1", gpu_count=1, shared_gpus=True))
    s2 = dgx.allocate(Req("s2", gpu_count=1, shared_gpus=True))
    c = dgx.allocate(Req("c", exclusive_cpus=2))
    assert s1.gpus == s2.gpus  # shared requests pack onto a shared GPU
    assert dgx.holdings() == Holdings(
        gpus={a.gpus[0].index: {"a": EXCLUSIVE},
              s1.gpus[0].index: {"s1": SHARED, "s2": SHARED}},
        migs={}, exclusive_cpus=c.exclusive_cpus)
    m = mig.allocate(Req("m", mig_profile="1g.10gb"))
    assert mig.holdings() == Holdings(gpus={}, migs={m.mig.uuid: "m"})


def test_holdings_are_a_snapshot(dgx):
    a = dgx.allocate(Req("a", gpu_count=1))
    c = dgx.allocate(Req("c", exclusive_cpus=2))
    snap = dgx.holdings()
    dgx.release("a")
    dgx.release("c")
    dgx.allocate(Req("d", gpu_count=2, shared_gpus=True))
    assert snap.gpus == {a.gpus[0].index: {"a": EXCLUSIVE}}
    assert snap.exclusive_cpus == c.exclusive_cpus
    assert dgx.holdings().exclusive_cpus == frozenset()
    with pytest.raises(FrozenInstanceError):
        snap.exclusive_cpus = frozenset()  # type: ignore[misc]


def test_choice_reads_the_snapshot_and_changes_nothing(dgx, ids):
    dgx.allocate(Req("a", gpu_count=2, topology="nvlink"))
    snap = dgx.holdings()
    request = Req("b", gpu_count=2, topology="nvlink", exclusive_cpus=2)
    first = choose_placement(dgx.layout, snap, request, hard=True)
    assert ids(first) == [2, 3]
    assert choose_placement(dgx.layout, snap, request, hard=True) == first
    assert dgx.holdings() == snap and dgx.placement_of("b") is None
    assert dgx.allocate(request) == first  # the allocator commits the same answer
    # the same request against an empty node: the snapshot, not the allocator, decides
    assert ids(choose_placement(dgx.layout, Holdings(), request, hard=True)) == [0, 1]
