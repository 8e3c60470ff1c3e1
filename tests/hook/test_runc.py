"""The hook under the real runc (cgroup v1 host): busybox containers, real cgroupfs."""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from nri_plugin.plan.model import ContainerPlan
from nri_plugin.plan.record import encode_record

pytestmark = [pytest.mark.runc, pytest.mark.root]

NS = "io.kubernetes.cri.sandbox-namespace"
NAME = "io.kubernetes.cri.container-name"
# No per-pod RT cap here: these tests reach the kernel's own budget.
RT_CONFIG = "permissions:\n  realtime: ['rt-*']\npod-caps:\n  rt-share: 1\n"


@pytest.fixture
def rt_config(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text(RT_CONFIG)
    return str(path)


def _annotations(sla: str, ns: str = "rt-ok", name: str = "app") -> dict[str, str]:
    return {"sla.nri.io/pod": sla, NS: ns, NAME: name,
            "io.kubernetes.cri.container-type": "container"}


def test_hard_sla_is_applied_with_rt_ancestors_raised(runc_env, rt_config, h):
    dev, majmin = h.first_disk()
    sla = (f"enforcement: hard\ncpu:\n  limit: 0.5\n  period: 50ms\n  rt-runtime: 10ms\n"
           f"  rt-period: 1s\nnuma:\n  nodes: '0'\nmemory:\n  max: 256Mi\n"
           f"io:\n  max:\n    - device: {dev}\n      read-bps: 10Mi\n      write-iops: 500\n")
    c = runc_env.create("full", _annotations(sla), hook_args=("--config", rt_config))
    assert c.returncode == 0, c.stderr
    r = runc_env.read
    assert r("cpu", "full", "cpu.cfs_period_us") == "50000"
    assert r("cpu", "full", "cpu.cfs_quota_us") == "25000"
    assert r("cpu", "full", "cpu.rt_runtime_us") == "10000"
    # The scratch parent had 0 RT time: the hook raised it first (ancestors first).
    assert int(runc_env.cgroup_dir("cpu").joinpath("cpu.rt_runtime_us").read_text()) >= 10000
    assert r("cpuset", "full", "cpuset.mems") == "0"
    assert r("memory", "full", "memory.limit_in_bytes") == str(256 << 20)
    assert r("blkio", "full", "blkio.throttle.read_bps_device") == f"{majmin} {10 << 20}"
    assert r("blkio", "full", "blkio.throttle.write_iops_device") == f"{majmin} 500"
    assert runc_env.start("full").returncode == 0
    assert runc_env.status("full") == "running"


def _runc_version() -> tuple[int, ...]:
    out = subprocess.run(["runc", "--version"], capture_output=True, text=True).stdout
    m = re.search(r"runc version (\d+)\.(\d+)", out)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


@pytest.mark.parametrize(("stage", "entry"), [("prestart", "module"),
                                              ("poststart", "module"),
                                              ("createContainer", "module"),
                                              ("createRuntime", "console"),
                                              ("createRuntime", "fast")])
def test_other_stages_and_console_entry(runc_env, h, stage, entry):
    sla = "cpu:\n  limit: 0.25\nmemory:\n  max: 64Mi\n"
    c = runc_env.create("s", _annotations(sla, ns="default"), stage=stage, entry=entry)
    assert c.returncode == 0, c.stderr
    if stage != "poststart" or _runc_version() <= (1, 1):
        # runc 1.1 runs poststart hooks inside `runc create`, before the user's process.
        assert runc_env.read("cpu", "s", "cpu.cfs_quota_us") == "25000"
    assert runc_env.start("s").returncode == 0
    assert runc_env.read("cpu", "s", "cpu.cfs_quota_us") == "25000"
    assert runc_env.read("memory", "s", "memory.limit_in_bytes") == str(64 << 20)


def test_hard_memory_high_on_v1_refuses_the_container(runc_env):
    sla = "memory:\n  high: 64Mi\n  max: 128Mi\n"
    c = runc_env.create("mh", _annotations(sla, ns="default"))
    assert c.returncode != 0
    assert "memory.high: not available on cgroup v1" in c.stderr
    assert "sla.nri.io/pod" in c.stderr
    assert runc_env.status("mh") == "absent"


def test_rt_beyond_the_kernel_budget_refuses(runc_env, rt_config):
    sla = "cpu:\n  rt-runtime: 990ms\n  rt-period: 1s\n"
    c = runc_env.create("rt", _annotations(sla), hook_args=("--config", rt_config))
    assert c.returncode != 0
    assert "real-time budget" in c.stderr
    assert runc_env.status("rt") == "absent"
    # Nothing left raised on the scratch parent.
    parent = runc_env.cgroup_dir("cpu") / "cpu.rt_runtime_us"
    assert not parent.exists() or parent.read_text().strip() == "0"


def test_rt_without_permission_refuses(runc_env):
    sla = "cpu:\n  rt-runtime: 5ms\n"
    c = runc_env.create("rtp", _annotations(sla, ns="default"))
    assert c.returncode != 0
    assert "may not use realtime" in c.stderr


def test_soft_mode_starts_with_warnings(runc_env):
    sla = "enforcement: soft\ncpu:\n  limit: 1\nmemory:\n  high: 64Mi\n  max: 128Mi\n"
    c = runc_env.create("soft", _annotations(sla, ns="default"))
    assert c.returncode == 0, c.stderr
    assert runc_env.read("memory", "soft", "memory.soft_limit_in_bytes") == str(64 << 20)
    assert runc_env.read("memory", "soft", "memory.limit_in_bytes") == str(128 << 20)
    # runc drops a successful hook's stderr; the hook log has the decision line.
    assert "outcome=warned" in c.log and "sla.nri.io/pod: memory.high" in c.log
    assert "applied.memory_soft_limit=67108864" in c.log
    assert runc_env.start("soft").returncode == 0
    assert runc_env.status("soft") == "running"


def test_invalid_sla_refuses_with_the_parser_message(runc_env):
    c = runc_env.create("bad", _annotations("memory:\n  high: 12Gi\n  max: 10Gi\n",
                                            ns="default"))
    assert c.returncode != 0
    assert "memory.high" in c.stderr and "below" in c.stderr


def test_container_without_sla_is_untouched(runc_env):
    c = runc_env.create("plain", {NAME: "plain"})
    assert c.returncode == 0, c.stderr
    assert runc_env.read("cpu", "plain", "cpu.cfs_quota_us") == "-1"
    assert c.log == ""


def _with_resources(runc_env, name: str, quota: int, period: int) -> None:
    cfg_path = runc_env.base / name / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["linux"].setdefault("resources", {})["cpu"] = {"quota": quota, "period": period}
    cfg_path.write_text(json.dumps(cfg))


def test_applied_record_only_verifies(runc_env):
    # What the plugin would have done through NRI: the spec carries the resources and the
    # record; the hook writes nothing and finds no drift.
    plan = ContainerPlan("hard", 1, cpu_quota=30000, cpu_period=100000)
    ann = {**_annotations("cpu:\n  limit: 0.3\n", ns="default"),
           "sla.nri.io/applied": encode_record(plan, "nri")}
    bundle = runc_env.bundle("rec", ann)
    _with_resources(runc_env, "rec", 30000, 100000)
    runc_env.names.append("rec")
    proc = runc_env.runc("create", "--bundle", str(bundle), "rec",
                         stderr_file=bundle / "err")
    assert proc.returncode == 0, (bundle / "err").read_text()
    assert runc_env.read("cpu", "rec", "cpu.cfs_quota_us") == "30000"


def test_applied_record_drift_refuses_in_hard_mode(runc_env):
    plan = ContainerPlan("hard", 1, cpu_quota=30000, cpu_period=100000)
    ann = {**_annotations("cpu:\n  limit: 0.3\n", ns="default"),
           "sla.nri.io/applied": encode_record(plan, "nri")}
    c = runc_env.create("drift", ann)  # the spec has no cpu resources: drift
    assert c.returncode != 0
    assert "drift from what nri applied" in c.stderr and "cpu.cfs_quota_us" in c.stderr
    # Verify-only: the hook did not write the quota itself.
    assert runc_env.status("drift") == "absent"


def test_escaping_cgroups_path_is_refused(runc_env):
    # runc cleans "/../../<parent>/esc" to "/<parent>/esc" (inside the scratch parent);
    # the hook refuses any ".." outright (exit 2) and writes nothing.
    c = runc_env.create("esc", _annotations("cpu:\n  limit: 1\n", ns="default"),
                        cgroups_path=f"/../../{runc_env.parent}/esc")
    assert c.returncode != 0
    assert "exit status 2" in c.stderr
    assert "'..' would leave the cgroup hierarchy" in c.stderr
    assert runc_env.status("esc") == "absent"


def test_replicas_reuse_the_cached_decision(runc_env, rt_config, h, tmp_path):
    """Two replicas under the real runc: the second hook run is a cache hit (it writes no
    entry) and its container gets exactly the first one's settings, RT raise included."""
    dev, majmin = h.first_disk()
    cache = tmp_path / "hook-cache"
    sla = (f"cpu:\n  limit: 0.5\n  rt-runtime: 10ms\nmemory:\n  max: 128Mi\n"
           f"io:\n  max:\n    - device: {dev}\n      read-bps: 10Mi\n")
    args = ("--config", rt_config, "--cache-dir", str(cache))
    first = runc_env.create("rep-0", _annotations(sla), hook_args=args, entry="fast")
    assert first.returncode == 0, first.stderr
    stored = {p.name: p.stat().st_mtime_ns for p in cache.iterdir()}
    assert sorted(n.split("-")[0] for n in stored) == ["config", "decision", "facts"]
    second = runc_env.create("rep-1", _annotations(sla), hook_args=args, entry="fast")
    assert second.returncode == 0, second.stderr
    assert {p.name: p.stat().st_mtime_ns for p in cache.iterdir()} == stored  # a hit
    for name in ("rep-0", "rep-1"):
        assert runc_env.read("cpu", name, "cpu.cfs_quota_us") == "50000"
        assert runc_env.read("cpu", name, "cpu.rt_runtime_us") == "10000"
        assert runc_env.read("memory", name, "memory.limit_in_bytes") == str(128 << 20)
        assert runc_env.read("blkio", name, "blkio.throttle.read_bps_device") == \
            f"{majmin} {10 << 20}"
    assert first.log.split("container=")[1].split(" ts=")[0] == \
        second.log.split("container=")[1].split(" ts=")[0]  # the same decision line
