"""The Allocator's Holdings snapshots and the pure placement that reads them."""

import pytest

from nri_plugin.plan.best_fit import choose_placement
from nri_plugin.plan.placement_values import GRANTED, Holdings
from nri_plugin.plan.placement_values import PlacementRequest as Req
from nri_plugin.value import FrozenValueError
from tests.support.grant_helpers import gpu_ids, granted


def test_holdings_name_every_holder(dgx, mig):
    dgx.allocate(granted(dgx, "a", 2))
    dgx.allocate(granted(dgx, "s1", 0, wants_gpu=False))
    dgx.allocate(granted(dgx, "s2", 0))
    c = dgx.allocate(Req("c", exclusive_cpus=2))
    assert dgx.holdings() == Holdings(
        gpus={2: {"a": GRANTED}, 0: {"s1": GRANTED, "s2": GRANTED}},
        migs={},
        exclusive_cpus=c.exclusive_cpus,
    )
    m = mig.allocate(granted(mig, "m", migs=("0:2",)))
    assert mig.holdings() == Holdings(gpus={}, migs={m.migs[0][1].uuid: {"m": GRANTED}})


def test_holdings_are_a_snapshot(dgx):
    dgx.allocate(granted(dgx, "a", 0))
    c = dgx.allocate(Req("c", exclusive_cpus=2))
    snap = dgx.holdings()
    dgx.release("a")
    dgx.release("c")
    dgx.allocate(granted(dgx, "d", 0, 1))
    assert snap.gpus == {0: {"a": GRANTED}}
    assert snap.exclusive_cpus == c.exclusive_cpus
    assert dgx.holdings().exclusive_cpus == frozenset()
    with pytest.raises(FrozenValueError):
        snap.exclusive_cpus = frozenset()  # type: ignore[misc]


def test_placement_reads_the_snapshot_and_changes_nothing(dgx):
    dgx.allocate(granted(dgx, "a", 4, exclusive_cpus=4))
    snap = dgx.holdings()
    request = granted(dgx, "b", 4, 5, gpu_count=2, topology="nvlink", exclusive_cpus=2)
    first = choose_placement(dgx.layout, snap, request, hard=True)
    assert gpu_ids(first) == [4, 5] and first.exclusive_cpus == {13, 29}
    assert choose_placement(dgx.layout, snap, request, hard=True) == first
    assert dgx.holdings() == snap and dgx.placement_of("b") is None
    assert dgx.allocate(request) == first  # the allocator commits the same answer
    # the same request against an empty node: the snapshot, not the allocator, decides
    assert choose_placement(dgx.layout, Holdings(), request, hard=True).exclusive_cpus == {15, 31}
