"""RT budget planning on a fake cpu hierarchy (files only: the arithmetic, not the kernel).

The kernel's refusal itself is exercised in test_real_cgroups.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nri_plugin.enforce.cgpaths import CgroupPaths
from nri_plugin.enforce.errors import CgroupFactsError, RtBudgetError
from nri_plugin.enforce.rt import (
    BW_SHIFT,
    make_rt_room,
    plan_rt_ancestors,
    raise_rt_ancestors,
    release_rt_ancestors,
    runtime_for_ratio,
    to_ratio,
)


def _group(path: Path, runtime: int, period: int = 1_000_000) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "cpu.rt_runtime_us").write_text(f"{runtime}\n")
    (path / "cpu.rt_period_us").write_text(f"{period}\n")
    return path


@pytest.fixture
def cpu_root(tmp_path: Path) -> Path:
    root = _group(tmp_path / "cpu", 950_000)
    _group(root / "kubepods", 0)
    _group(root / "kubepods" / "burstable", 0)
    _group(root / "kubepods" / "burstable" / "pod1", 0)
    _group(root / "system.slice", 100_000)
    return root


def test_raises_every_ancestor_top_down(cpu_root: Path) -> None:
    pod = cpu_root / "kubepods" / "burstable" / "pod1"
    _group(pod / "other", 20_000)  # a sibling container already holds 2%
    changes = raise_rt_ancestors(pod / "ctr", 5_000, 1_000_000, cpu_root)
    assert [c.path for c in changes] == [
        cpu_root / "kubepods",
        cpu_root / "kubepods" / "burstable",
        pod,
    ]
    assert [(c.old_us, c.new_us) for c in changes] == [(0, 25_000)] * 3
    assert (pod / "cpu.rt_runtime_us").read_text().strip() == "25000"
    # Already enough: nothing to do.
    assert raise_rt_ancestors(pod / "other2", 0, 1_000_000, cpu_root) == []
    # Undo restores bottom-up.
    restored = release_rt_ancestors(changes)
    assert [c.path for c in restored] == [c.path for c in reversed(changes)]
    assert (cpu_root / "kubepods" / "cpu.rt_runtime_us").read_text().strip() == "0"


def test_make_rt_room_for_container_paths(cpu_root: Path) -> None:
    """What both front-ends call: the container's cpu dir, under its hierarchy root."""
    pod = cpu_root / "kubepods" / "burstable" / "pod1"
    paths = CgroupPaths(
        "/kubepods/burstable/pod1/ctr",
        1,
        {"cpu": str(pod / "ctr"), "memory": "/elsewhere"},
        {"cpu": str(cpu_root), "memory": "/"},
    )
    changes = make_rt_room(paths, 5_000, 1_000_000)
    assert [c.path for c in changes] == [
        cpu_root / "kubepods",
        cpu_root / "kubepods" / "burstable",
        pod,
    ]
    assert (pod / "cpu.rt_runtime_us").read_text().strip() == "5000"
    release_rt_ancestors(changes)
    with pytest.raises(RtBudgetError, match="budget exhausted"):
        make_rt_room(paths, 900_000, 1_000_000)
    no_cpu = CgroupPaths("/x", 1, {"memory": "/m/x"}, {"memory": "/m"})
    with pytest.raises(CgroupFactsError, match="no 'cpu' hierarchy"):
        make_rt_room(no_cpu, 5_000, 1_000_000)


def test_container_dir_that_exists_is_not_double_counted(cpu_root: Path) -> None:
    pod = cpu_root / "kubepods" / "burstable" / "pod1"
    _group(pod / "ctr", 900_000)  # stale value in the container's own dir: replaced, not added
    changes = raise_rt_ancestors(pod / "ctr", 10_000, 1_000_000, cpu_root)
    assert changes[-1].new_us == 10_000


def test_different_periods_use_shares(cpu_root: Path) -> None:
    pod = _group(cpu_root / "kubepods" / "burstable" / "pod1", 0, period=100_000)
    changes = raise_rt_ancestors(pod / "ctr", 5_000, 1_000_000, cpu_root)  # 0.5%
    assert changes[-1].path == pod and changes[-1].new_us == 500  # 0.5% of 100ms


def test_root_budget_exhausted(cpu_root: Path) -> None:
    pod = cpu_root / "kubepods" / "burstable" / "pod1"
    # system.slice holds 10%, root allows 95%: 90% more does not fit.
    with pytest.raises(
        RtBudgetError, match=r"budget exhausted.*\(95\.00% of CPU time in all\)"
    ) as caught:
        plan_rt_ancestors(pod / "ctr", 900_000, 1_000_000, cpu_root)
    # What the other groups take is the operator's: not in the message, in the note.
    assert "100.00%" not in str(caught.value) and "system.slice" not in str(caught.value)
    assert "brings the groups under" in caught.value.operator_note
    assert "100.00%" in caught.value.operator_note
    assert (cpu_root / "kubepods" / "cpu.rt_runtime_us").read_text().strip() == "0"
    assert plan_rt_ancestors(pod / "ctr", 850_000, 1_000_000, cpu_root)


@pytest.mark.parametrize(
    ("runtime", "period", "match"),
    [(2_000, 1_000, "runtime <= period"), (-1, 1_000, "runtime <= period"), (0, 0, "period")],
)
def test_bad_budget(cpu_root: Path, runtime: int, period: int, match: str) -> None:
    with pytest.raises(RtBudgetError, match=match):
        plan_rt_ancestors(cpu_root / "kubepods" / "c", runtime, period, cpu_root)


def test_paths_outside_or_missing(cpu_root: Path, tmp_path: Path) -> None:
    with pytest.raises(RtBudgetError, match="not a cgroup below"):
        plan_rt_ancestors(tmp_path / "elsewhere" / "c", 1, 10, cpu_root)
    with pytest.raises(RtBudgetError, match="not a cgroup below"):
        plan_rt_ancestors(cpu_root, 1, 10, cpu_root)
    with pytest.raises(RtBudgetError, match="missing cgroup"):
        plan_rt_ancestors(cpu_root / "kubepods" / "nope" / "c", 1, 10, cpu_root)


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 2_000_000), st.integers(0, 1 << BW_SHIFT))
def test_runtime_for_ratio_is_minimal(period: int, ratio: int) -> None:
    r = runtime_for_ratio(period, ratio)
    assert to_ratio(period, r) >= ratio
    assert r == 0 or to_ratio(period, r - 1) < ratio
