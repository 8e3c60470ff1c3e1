"""The RT give-back on a fake cpu hierarchy: what nri-sla raised comes back down once the
containers below are gone, never under what it found, never under what the children still
take, and never where someone else changed the value since. The kernel's own refusal is
exercised on real cgroups in test_real_cgroups.py."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest

from nri_plugin.enforce.rt import raise_rt_ancestors, to_ratio
from nri_plugin.enforce.rt_ledger import MAX_BYTES, MAX_ENTRIES, RtLedger


def _group(path: Path, runtime: int, period: int = 1_000_000) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "cpu.rt_runtime_us").write_text(f"{runtime}\n")
    (path / "cpu.rt_period_us").write_text(f"{period}\n")
    return path


def _rt(path: Path) -> int:
    return int((path / "cpu.rt_runtime_us").read_text())


def _kernel_rule_holds(root: Path) -> None:
    """Every group holds at least the sum of its children's shares (what the kernel checks
    on every write)."""
    for group in [root, *(p for p in root.rglob("*") if p.is_dir())]:
        children = [c for c in group.iterdir() if c.is_dir()]
        need = sum(to_ratio(int((c / "cpu.rt_period_us").read_text()), _rt(c)) for c in children)
        have = to_ratio(int((group / "cpu.rt_period_us").read_text()), _rt(group))
        assert have >= need, f"{group}: {have} < children's {need}"


@pytest.fixture
def cpu_root(tmp_path: Path) -> Path:
    root = _group(tmp_path / "cpu", 950_000)
    _group(root / "kubepods", 0)
    _group(root / "kubepods" / "burstable", 0)
    _group(root / "system.slice", 100_000)
    return root


def _create(root: Path, ledger: RtLedger, pod: str, ctr: str, runtime: int) -> Path:
    """What the plugin and runc do for an RT container: raise, note, write its budget."""
    pod_dir = (
        _group(root / "kubepods" / "burstable" / pod, 0)
        if not (root / "kubepods" / "burstable" / pod).exists()
        else root / "kubepods" / "burstable" / pod
    )
    ctr_dir = pod_dir / ctr
    ledger.note(raise_rt_ancestors(ctr_dir, runtime, 1_000_000, root))
    _group(ctr_dir, runtime)
    return ctr_dir


def test_removed_container_gives_the_raise_back(cpu_root: Path) -> None:
    ledger = RtLedger()
    before = {p: _rt(p) for p in (cpu_root / "kubepods", cpu_root / "kubepods" / "burstable")}
    ctr = _create(cpu_root, ledger, "pod1", "ctr", 50_000)
    assert _rt(cpu_root / "kubepods") == 50_000
    # Still live: nothing to give back.
    assert ledger.give_back(cpu_root, {}) == []
    shutil.rmtree(ctr)  # runc delete
    changes = ledger.give_back(cpu_root, {})
    assert {c.path.name for c in changes} == {"kubepods", "burstable", "pod1"}
    assert all(c.new_us == 0 for c in changes)
    assert {p: _rt(p) for p in before} == before
    assert _rt(ctr.parent) == 0
    _kernel_rule_holds(cpu_root)
    assert ledger.raises == {}


def test_keeps_exactly_what_live_containers_need(cpu_root: Path) -> None:
    ledger = RtLedger()
    a = _create(cpu_root, ledger, "pod1", "a", 50_000)
    _create(cpu_root, ledger, "pod2", "b", 20_000)
    assert _rt(cpu_root / "kubepods") == 70_000
    shutil.rmtree(a)
    ledger.give_back(cpu_root, {})
    assert _rt(cpu_root / "kubepods") == 20_000
    assert _rt(cpu_root / "kubepods" / "burstable") == 20_000
    assert _rt(cpu_root / "kubepods" / "burstable" / "pod1") == 0
    assert _rt(cpu_root / "kubepods" / "burstable" / "pod2") == 20_000
    _kernel_rule_holds(cpu_root)


def test_pending_container_keeps_its_ancestors(cpu_root: Path) -> None:
    """Granted at CreateContainer, cgroup not created yet (runc creates it at start): a
    give-back meanwhile must not take the raise its write needs."""
    ledger = RtLedger()
    pod = _group(cpu_root / "kubepods" / "burstable" / "pod1", 0)
    ledger.note(raise_rt_ancestors(pod / "ctr", 30_000, 1_000_000, cpu_root))
    assert ledger.give_back(cpu_root, {pod / "ctr": (30_000, 1_000_000)}) == []
    assert _rt(cpu_root / "kubepods") == 30_000 and _rt(pod) == 30_000
    # Its dir exists with 0 (runc has not written yet): still counted as granted.
    _group(pod / "ctr", 0)
    assert ledger.give_back(cpu_root, {pod / "ctr": (30_000, 1_000_000)}) == []
    assert ledger.give_back(cpu_root, {})  # released: given back
    assert _rt(cpu_root / "kubepods") == 0


def test_never_under_the_value_found_nor_someone_elses(cpu_root: Path) -> None:
    ledger = RtLedger()
    _group(cpu_root / "kubepods", 100_000)  # the operator gave kubepods 10% before
    ctr = _create(cpu_root, ledger, "pod1", "ctr", 50_000)
    assert _rt(cpu_root / "kubepods") == 100_000  # enough already: not raised
    assert _rt(cpu_root / "kubepods" / "burstable") == 50_000
    # Someone else raises burstable further after nri-sla's raise: theirs from now on.
    (cpu_root / "kubepods" / "burstable" / "cpu.rt_runtime_us").write_text("80000")
    shutil.rmtree(ctr)
    changes = ledger.give_back(cpu_root, {})
    assert [c.path.name for c in changes] == ["pod1"]
    assert _rt(cpu_root / "kubepods") == 100_000
    assert _rt(cpu_root / "kubepods" / "burstable") == 80_000
    assert ledger.raises == {}


def test_survives_a_restart_and_bounds_its_file(
    cpu_root: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    file = tmp_path / "state" / "rt-raises.json"
    ctr = _create(cpu_root, RtLedger(file), "pod1", "ctr", 50_000)
    assert set(json.loads(file.read_text())["raises"]) == {
        str(cpu_root / "kubepods"),
        str(cpu_root / "kubepods" / "burstable"),
        str(ctr.parent),
    }
    shutil.rmtree(ctr)
    restarted = RtLedger(file)
    assert len(restarted.give_back(cpu_root, {})) == 3
    assert _rt(cpu_root / "kubepods") == 0
    assert json.loads(file.read_text()) == {"raises": {}}
    # A ledger that is not what nri-sla writes is ignored (logged), never trusted.
    for bad in (
        '{"raises": {"relative": [0, 5]}}',
        '{"raises": {"/x": ["0", 5]}}',
        "not json",
        '{"raises": []}',
        " " * (2 << 20),
    ):
        file.write_text(bad)
        assert RtLedger(file).raises == {}
    # ... and the warning says what is wrong with it.
    too_many = {f"/g{i}": [0, 1] for i in range(MAX_ENTRIES + 1)}
    for bad, problem in (
        (
            '{"raises": {"relative": [0, 5]}}',
            "entry 'relative' is not an absolute path with two integers",
        ),
        (json.dumps({"raises": too_many}), f"more than {MAX_ENTRIES} entries"),
        (" " * (2 << 20), f"larger than {MAX_BYTES} bytes"),
    ):
        file.write_text(bad)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="nri_sla.rt"):
            assert RtLedger(file).raises == {}
        assert f"the RT ledger is not valid ({problem})" in caplog.text


def test_a_path_outside_the_hierarchy_is_never_written(cpu_root: Path, tmp_path: Path) -> None:
    outside = _group(tmp_path / "elsewhere", 5_000)
    file = tmp_path / "rt-raises.json"
    file.write_text(json.dumps({"raises": {str(outside): [0, 5_000]}}))
    assert RtLedger(file).give_back(cpu_root, {}) == []
    assert _rt(outside) == 5_000
