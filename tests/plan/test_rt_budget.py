"""The node's RT budget as a ledger by owner: shares counted against the node's, and each
grant's cpu cgroup dir (once known) kept with it until the grant is released."""

from __future__ import annotations

from pathlib import Path

import pytest

from nri_plugin.plan.errors import RtBudgetExceeded
from nri_plugin.plan.rt_budget import RtBudget, RtGrant


def test_a_grant_keeps_its_cgroup_dir_until_released():
    budget = RtBudget(0.5)
    budget.reserve("a", RtGrant(100_000, 1_000_000))  # decided: no dir yet
    budget.reserve("b", RtGrant(50_000, 500_000))
    assert budget.cgroup_dirs() == {}
    budget.hold("a", RtGrant(100_000, 1_000_000, Path("/cpu/kubepods/pod1/a")))
    assert budget.cgroup_dirs() == {Path("/cpu/kubepods/pod1/a"): (100_000, 1_000_000)}
    assert budget.share_of("a") == pytest.approx(0.1)  # the same grant, now located
    with pytest.raises(RtBudgetExceeded):
        budget.reserve("c", RtGrant(350_000, 1_000_000))  # 0.1 + 0.1 held: 0.3 free
    budget.release("a")
    assert budget.cgroup_dirs() == {} and budget.owners() == ("b",)


def test_a_restored_grant_is_held_even_over_the_budget():
    budget = RtBudget(0.1)
    budget.hold("a", RtGrant(300_000, 1_000_000, Path("/cpu/kubepods/pod1/a")))
    assert budget.share_of("a") == pytest.approx(0.3)
    with pytest.raises(RtBudgetExceeded):
        budget.reserve("b", RtGrant(1_000, 1_000_000))
