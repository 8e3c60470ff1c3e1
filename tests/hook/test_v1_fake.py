"""cgroup v1 paths on a fake per-controller tree: RT ancestors raised, and undone when a
later write fails in hard mode (the real-runc tests cover the kernel's side)."""

from __future__ import annotations

import pytest

from nri_plugin.errors import EXIT_OK, EXIT_REFUSED
from tests.support.cgroups import make_v1_tree

CTR = "/kubepods/pod-a/ctr-1"
NAME = "io.kubernetes.cri.container-name"


@pytest.fixture
def v1(tmp_path, h):
    root = tmp_path / "cg"
    dirs = make_v1_tree(root).add_cgroup(CTR)
    config = tmp_path / "config.yaml"
    # No per-pod RT cap: these tests reach the kernel's own budget.
    config.write_text("permissions:\n  realtime: ['*']\npod-caps:\n  rt-share: 1\n")

    def run(sla):
        bundle = h.write_bundle(tmp_path / "bundle", {NAME: "app", "sla.nri.io/pod": sla}, CTR)
        return h.run_inproc(h.state_json(bundle), cgroup_root=str(root), config=str(config))

    return root, dirs, run


def test_v1_rt_ancestors_raised_then_container(v1):
    root, dirs, run = v1
    out = run("cpu:\n  limit: 0.5\n  rt-runtime: 10ms\nmemory:\n  max: 64Mi\n")
    assert (out.exit_code, out.lines) == (EXIT_OK, [])
    assert dirs["cpu"].joinpath("cpu.rt_runtime_us").read_text().strip() == "10000"
    for ancestor in (root / "cpu" / "kubepods", root / "cpu" / "kubepods" / "pod-a"):
        assert int(ancestor.joinpath("cpu.rt_runtime_us").read_text()) >= 10000
    assert dirs["cpu"].joinpath("cpu.cfs_quota_us").read_text().strip() == "50000"
    assert dirs["memory"].joinpath("memory.limit_in_bytes").read_text().strip() == str(64 << 20)


def test_v1_hard_failure_after_rt_raise_undoes_it(v1):
    root, dirs, run = v1
    limit = dirs["memory"] / "memory.limit_in_bytes"
    limit.unlink()
    limit.mkdir()  # this write will fail after the RT raise succeeded
    out = run("cpu:\n  rt-runtime: 10ms\nmemory:\n  max: 64Mi\n")
    assert out.exit_code == EXIT_REFUSED
    assert "memory.limit_in_bytes" in out.lines[0]
    for ancestor in (root / "cpu" / "kubepods", root / "cpu" / "kubepods" / "pod-a"):
        assert ancestor.joinpath("cpu.rt_runtime_us").read_text().strip() == "0"


def test_v1_soft_memory_high_becomes_soft_limit(v1):
    _root, dirs, run = v1
    out = run("enforcement: soft\nmemory:\n  high: 32Mi\n  max: 64Mi\n")
    assert out.exit_code == EXIT_OK
    assert any("memory.high" in line and "warning" in line for line in out.lines)
    assert dirs["memory"].joinpath("memory.soft_limit_in_bytes").read_text().strip() == str(
        32 << 20
    )


def test_v1_rt_over_budget_soft_drops_rt_keeps_rest(v1):
    _root, dirs, run = v1
    out = run("enforcement: soft\ncpu:\n  limit: 1\n  rt-runtime: 990ms\n")
    assert out.exit_code == EXIT_OK
    assert any("real-time budget" in line for line in out.lines), out.lines
    assert dirs["cpu"].joinpath("cpu.rt_runtime_us").read_text().strip() == "0"
    assert dirs["cpu"].joinpath("cpu.cfs_quota_us").read_text().strip() == "100000"


def _refuse(monkeypatch, file: str, code: int) -> None:
    """The kernel answers `code` to every write of `file` (a plain file cannot: the one
    writer's write call is patched)."""
    import os

    from nri_plugin.enforce.cgfile import CgroupWriter

    real = CgroupWriter._write

    def write(self, controller, path, value):
        if os.path.basename(path) == file:
            raise OSError(code, os.strerror(code))
        real(self, controller, path, value)

    monkeypatch.setattr(CgroupWriter, "_write", write)


def test_v1_hard_refused_write_undoes_the_earlier_ones(v1, monkeypatch):
    import errno

    root, dirs, run = v1
    _refuse(monkeypatch, "memory.limit_in_bytes", errno.EBUSY)
    out = run("cpu:\n  limit: 0.5\n  rt-runtime: 10ms\nmemory:\n  max: 64Mi\n")
    assert out.exit_code == EXIT_REFUSED
    assert "Device or resource busy" in out.lines[0]
    assert "undone: cpu.rt_runtime_us, cpu.rt_period_us, cpu.cfs_quota_us" in out.lines[0]
    cpu = dirs["cpu"]
    assert cpu.joinpath("cpu.cfs_quota_us").read_text().strip() == "-1"
    assert cpu.joinpath("cpu.rt_runtime_us").read_text().strip() == "0"
    for ancestor in (root / "cpu" / "kubepods", root / "cpu" / "kubepods" / "pod-a"):
        assert ancestor.joinpath("cpu.rt_runtime_us").read_text().strip() == "0"


def test_v1_soft_refused_write_keeps_the_others(v1, monkeypatch):
    import errno

    _root, dirs, run = v1
    _refuse(monkeypatch, "memory.limit_in_bytes", errno.EBUSY)
    out = run("enforcement: soft\ncpu:\n  limit: 0.5\nmemory:\n  max: 64Mi\n")
    assert out.exit_code == EXIT_OK
    assert any("memory.limit_in_bytes" in line and "busy" in line for line in out.lines)
    assert dirs["cpu"].joinpath("cpu.cfs_quota_us").read_text().strip() == "50000"
