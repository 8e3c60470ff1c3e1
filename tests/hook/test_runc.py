"""The hook under the real runc (cgroup v1 host): busybox containers, real cgroupfs."""

from __future__ import annotations

import json
import re
import subprocess
import uuid
from pathlib import Path

import pytest

from nri_plugin.core.recordkey import load_or_create_key
from nri_plugin.plan.model import ContainerPlan
from nri_plugin.plan.record import encode_record

pytestmark = [pytest.mark.runc, pytest.mark.root]

NS = "io.kubernetes.cri.sandbox-namespace"
NAME = "io.kubernetes.cri.container-name"
CRIO_TYPE = "io.kubernetes.cri-o.ContainerType"
KUBE_NS = "io.kubernetes.pod.namespace"
CGROUP_ROOT = Path("/sys/fs/cgroup")
# No per-pod RT cap here: these tests reach the kernel's own budget.
RT_CONFIG = "permissions:\n  realtime: ['rt-*']\npod-caps:\n  rt-share: 1\n"


@pytest.fixture
def rt_config(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text(RT_CONFIG)
    return str(path)


def _annotations(sla: str, ns: str = "rt-ok", name: str = "app") -> dict[str, str]:
    return {
        "sla.nri.io/pod": sla,
        NS: ns,
        NAME: name,
        "io.kubernetes.cri.container-type": "container",
    }


def test_hard_sla_is_applied_with_rt_ancestors_raised(runc_env, rt_config, h):
    dev, majmin = h.first_disk()
    sla = (
        f"enforcement: hard\ncpu:\n  limit: 0.5\n  period: 50ms\n  rt-runtime: 10ms\n"
        f"  rt-period: 1s\nnuma:\n  nodes: '0'\nmemory:\n  max: 256Mi\n"
        f"io:\n  max:\n    - device: {dev}\n      read-bps: 10Mi\n      write-iops: 500\n"
    )
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


@pytest.mark.parametrize(
    ("stage", "entry"),
    [
        ("prestart", "module"),
        ("poststart", "module"),
        ("createContainer", "module"),
        ("createRuntime", "console"),
        ("createRuntime", "fast"),
    ],
)
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
    c = runc_env.create("bad", _annotations("memory:\n  high: 12Gi\n  max: 10Gi\n", ns="default"))
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


@pytest.fixture
def keyed_config(tmp_path):
    """A node config whose state directory holds a record key: (--config args, key)."""
    path = tmp_path / "keyed.yaml"
    path.write_text(f"state-dir: {tmp_path / 'state'}\n")
    return ("--config", str(path)), load_or_create_key(str(tmp_path / "state"))


def test_applied_record_only_verifies(runc_env, keyed_config):
    # What the plugin would have done through NRI: the spec carries the resources and the
    # record; the hook writes nothing and finds no drift.
    args, key = keyed_config
    plan = ContainerPlan("hard", 1, cpu_quota=30000, cpu_period=100000)
    ann = {
        **_annotations("cpu:\n  limit: 0.3\n", ns="default"),
        "sla.nri.io/applied": encode_record(plan, "nri", "rec", key),
    }
    bundle = runc_env.bundle("rec", ann, hook_args=args)
    _with_resources(runc_env, "rec", 30000, 100000)
    runc_env.names.append("rec")
    proc = runc_env.runc("create", "--bundle", str(bundle), "rec", stderr_file=bundle / "err")
    assert proc.returncode == 0, (bundle / "err").read_text()
    assert runc_env.read("cpu", "rec", "cpu.cfs_quota_us") == "30000"


def test_applied_record_drift_refuses_in_hard_mode(runc_env, keyed_config):
    args, key = keyed_config
    plan = ContainerPlan("hard", 1, cpu_quota=30000, cpu_period=100000)
    ann = {
        **_annotations("cpu:\n  limit: 0.3\n", ns="default"),
        "sla.nri.io/applied": encode_record(plan, "nri", "drift", key),
    }
    c = runc_env.create("drift", ann, hook_args=args)  # the spec has no cpu resources
    assert c.returncode != 0
    assert "drift from what nri applied" in c.stderr and "cpu.cfs_quota_us" in c.stderr
    # Verify-only: the hook did not write the quota itself.
    assert runc_env.status("drift") == "absent"


def test_a_record_copied_from_another_container_is_ignored(runc_env, keyed_config):
    """The record is genuine, but the plugin wrote it for another container: under the
    real runc the hook ignores it (with a warning) and enforces the SLA itself."""
    args, key = keyed_config
    plan = ContainerPlan("hard", 1, cpu_quota=30000, cpu_period=100000)
    ann = {
        **_annotations("cpu:\n  limit: 0.3\n", ns="default"),
        "sla.nri.io/applied": encode_record(plan, "nri", "victim", key),
    }
    c = runc_env.create("copy", ann, hook_args=args)
    assert c.returncode == 0, c.stderr
    assert "applied ignored: not a valid record" in c.stderr + c.log
    assert runc_env.read("cpu", "copy", "cpu.cfs_quota_us") == "30000"


@pytest.mark.parametrize(
    ("installed", "run_at"),
    [("prestart", "prestart"), ("prestart", "createRuntime"), ("createRuntime", "createRuntime")],
)
def test_prestart_run_at_create_runtime_behaves_the_same(runc_env, installed, run_at):
    """CRI-O turns hooks.d `prestart` into `createRuntime`: the hook installed for one and
    run at the other gets the same OCI state (status creating, the container's pid), finds
    the cgroup already made, and enforces the same; a refusal is the same refusal."""
    sla = "cpu:\n  limit: 0.25\nmemory:\n  max: 64Mi\n"
    c = runc_env.create(
        "st", _annotations(sla, ns="default"), stage=installed, run_at=run_at, capture=True
    )
    assert c.returncode == 0, c.stderr
    bundle = runc_env.base / "st"
    state = json.loads((bundle / "state.json").read_text())
    assert (state["status"], state["id"]) == ("creating", "st") and state["pid"] > 0
    assert (bundle / "cgroup").read_text().strip() == "exists"
    assert runc_env.read("cpu", "st", "cpu.cfs_quota_us") == "25000"
    assert runc_env.read("memory", "st", "memory.limit_in_bytes") == str(64 << 20)
    refused = runc_env.create(
        "st2", _annotations("memory:\n  high: 64Mi\n", ns="default"), stage=installed, run_at=run_at
    )
    assert refused.returncode != 0 and "memory.high" in refused.stderr


def test_escaping_cgroups_path(runc_env):
    # runc cleans "/../../<parent>/esc" to "/<parent>/esc" (inside the scratch parent).
    # At createRuntime the hook follows the process (/proc/<pid>/cgroup) into that real
    # cgroup; at createContainer it has only the spec's path and refuses any ".." (exit 2).
    path = f"/../../{runc_env.parent}/esc"
    sla = _annotations("cpu:\n  limit: 1\n", ns="default")
    c = runc_env.create("esc", sla, cgroups_path=path)
    assert c.returncode == 0, c.stderr
    assert runc_env.read("cpu", "esc", "cpu.cfs_quota_us") == "100000"
    c = runc_env.create("esc2", sla, cgroups_path=path + "2", stage="createContainer")
    assert c.returncode != 0
    assert "exit status 2" in c.stderr
    assert "'..' would leave the cgroup hierarchy" in c.stderr
    assert runc_env.status("esc2") == "absent"


def test_relative_cgroups_path_is_found_through_the_pid(runc_env, h):
    """runc puts a relative cgroupsPath below its own cgroup (ours: it is our child), in
    each hierarchy; the spec's path alone would send the hook to the hierarchy's root."""
    rel = f"{runc_env.parent}/rel"
    sla = "cpu:\n  limit: 0.5\nmemory:\n  max: 64Mi\n"
    c = runc_env.create("rel", _annotations(sla, ns="default"), cgroups_path=rel)
    assert c.returncode == 0, c.stderr
    for controller, file, value in (
        ("cpu", "cpu.cfs_quota_us", "50000"),
        ("memory", "memory.limit_in_bytes", str(64 << 20)),
    ):
        own = h.own_cgroup(controller)
        where = CGROUP_ROOT / controller / own.strip("/") / rel
        assert (where / file).read_text().strip() == value
        if own != "/":  # this host: the memory cgroup of the test session
            assert not (CGROUP_ROOT / controller / rel).exists()
    assert runc_env.start("rel").returncode == 0


def test_a_cgroup_holding_other_processes_is_refused(runc_env):
    """A cgroupsPath naming a cgroup with a populated child (a pod- or slice-level cgroup):
    the hook refuses (exit 2) instead of writing limits over the processes below it.

    Another runc container below it would not do: runc itself cannot reuse a v1 cgroup
    with children (devices.* cannot change there). So the process below is a plain one,
    placed in the cpu and memory hierarchies only, as any other manager's could be."""
    below = [CGROUP_ROOT / c / runc_env.parent / "pod" / "other" for c in ("cpu", "memory")]
    sleeper = subprocess.Popen(["sleep", "300"])
    try:
        for d in below:
            d.mkdir(parents=True)
            (d / "cgroup.procs").write_text(str(sleeper.pid))
        sla = _annotations("cpu:\n  limit: 0.1\nmemory:\n  max: 32Mi\n", ns="default")
        c = runc_env.create("pod", sla, cgroups_path=f"/{runc_env.parent}/pod")
        assert c.returncode != 0
        assert "exit status 2" in c.stderr and "holds other processes" in c.stderr
        assert f"cpu/{runc_env.parent}/pod/other below it" in c.stderr
        assert runc_env.read("cpu", "pod", "cpu.cfs_quota_us") == "-1"  # nothing written
        assert runc_env.read("memory", "pod", "memory.limit_in_bytes") != str(32 << 20)
        assert runc_env.status("pod") == "absent"
        assert sleeper.poll() is None  # the process below was left alone
    finally:
        sleeper.kill()
        sleeper.wait()


@pytest.mark.parametrize(
    ("keys", "granted"),
    [
        ({CRIO_TYPE: "container", KUBE_NS: "rt-ok"}, True),  # CRI-O's own namespace key
        ({NS: "rt-ok"}, True),  # containerd's
        # A pod's annotation named like containerd's key, under CRI-O (which copies them all).
        ({CRIO_TYPE: "container", KUBE_NS: "default", NS: "rt-ok"}, False),
        # containerd copied a pod annotation named like kubelet's label.
        ({NS: "default", KUBE_NS: "rt-ok"}, False),
    ],
)
def test_namespace_comes_from_the_runtimes_own_keys(runc_env, rt_config, keys, granted):
    ann = {"sla.nri.io/pod": "cpu:\n  rt-runtime: 5ms\n", **keys}
    if CRIO_TYPE in keys:
        ann["io.kubernetes.container.name"] = "app"
    else:
        ann.update({NAME: "app", "io.kubernetes.cri.container-type": "container"})
    c = runc_env.create("ns", ann, hook_args=("--config", rt_config))
    if granted:
        assert c.returncode == 0, c.stderr
        assert runc_env.read("cpu", "ns", "cpu.rt_runtime_us") == "5000"
        return
    assert c.returncode != 0 and "exit status 1" in c.stderr
    assert "namespace '' may not use realtime" in c.stderr
    assert "the pod's namespace is unknown" in c.stderr
    assert runc_env.status("ns") == "absent"


def _hook_line(stderr: str) -> str:
    """The hook's own line inside runc's error (runc quotes it, newline escaped)."""
    return stderr.split("stderr: ", 1)[1].split("\\n", 1)[0]


def test_io_max_devices_do_not_reveal_host_files(runc_env, h, tmp_path):
    """Whatever an io.max device path names outside the block devices under /dev, the
    answer does not depend on what exists: /dev/null, a missing node and a link out of
    /dev read alike (refused); paths outside /dev are refused by the SLA schema before
    anything is looked up (invalid), /etc/shadow like /nonexistent."""
    link = Path(f"/dev/nri-sla-test-{uuid.uuid4().hex[:12]}")
    link.symlink_to("/etc/shadow")
    answers = {}
    try:
        for i, device in enumerate(
            ("/dev/null", "/dev/nri-sla-test-missing", str(link), "/etc/shadow", "/nonexistent")
        ):
            sla = f"io:\n  max:\n    - device: '{device}'\n      read-bps: 1Mi\n"
            c = runc_env.create(f"dev{i}", _annotations(sla, ns="default"))
            assert c.returncode != 0 and runc_env.status(f"dev{i}") == "absent"
            status = c.stderr.split("exit status ", 1)[1][0]
            answers[device] = (status, _hook_line(c.stderr).replace(device, "<dev>"))
    finally:
        link.unlink()
    refused = (
        "1",
        "nri-sla hook: sla.nri.io/pod: io.max[0].device: io device '<dev>': "
        "is not a block device under /dev",
    )
    assert (
        answers["/dev/null"]
        == answers["/dev/nri-sla-test-missing"]
        == answers[str(link)]
        == refused
    )
    assert answers["/etc/shadow"] == answers["/nonexistent"]
    assert answers["/etc/shadow"][0] == "2"


def test_replicas_reuse_the_cached_decision(runc_env, rt_config, h, tmp_path):
    """Two replicas under the real runc: the second hook run is a cache hit (it writes no
    entry) and its container gets exactly the first one's settings, RT raise included."""
    dev, majmin = h.first_disk()
    cache = tmp_path / "hook-cache"
    sla = (
        f"cpu:\n  limit: 0.5\n  rt-runtime: 10ms\nmemory:\n  max: 128Mi\n"
        f"io:\n  max:\n    - device: {dev}\n      read-bps: 10Mi\n"
    )
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
        assert (
            runc_env.read("blkio", name, "blkio.throttle.read_bps_device") == f"{majmin} {10 << 20}"
        )
    assert (
        first.log.split("container=")[1].split(" ts=")[0]
        == second.log.split("container=")[1].split(" ts=")[0]
    )  # the same decision line
