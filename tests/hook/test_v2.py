"""cgroup v2 behaviour on a fake cgroup2 tree, plus verify-only mode and failure policy."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from nri_plugin.core.recordkey import load_or_create_key
from nri_plugin.errors import EXIT_INTERNAL, EXIT_INVALID, EXIT_OK, EXIT_REFUSED
from nri_plugin.hook.run import alarm
from nri_plugin.hook.values import Deadline, HookTimeout
from nri_plugin.plan.model import ContainerPlan
from nri_plugin.plan.record import encode_record

DGX = Path(__file__).resolve().parents[2] / "examples" / "dgx-like.yaml"
CTR = "/kubepods/pod-a/ctr-1"
NAME = "io.kubernetes.cri.container-name"


@pytest.fixture
def v2(tmp_path, h):
    """(cgroup root, container dir, run(annotations, **kw) -> Outcome)."""
    root = tmp_path / "cg"
    cdir = h.fake_v2_tree(root, CTR)
    config = tmp_path / "config.yaml"
    config.write_text(f"enforcement: hard\nstate-dir: {tmp_path / 'state'}\n")

    def run(annotations, cgroups_path=CTR, pid=None, env=None, **opts):
        bundle = h.write_bundle(
            tmp_path / "bundle", {NAME: "app", **annotations}, cgroups_path, env
        )
        opts.setdefault("config", str(config))
        opts.setdefault("cgroup_root", str(root))
        return h.run_inproc(h.state_json(bundle, pid=pid), **opts)

    return root, cdir, run


def snapshot(top: Path) -> dict[str, str]:
    return {
        str(p.relative_to(top)): (p.read_text() if p.is_file() else "<dir>")
        for p in sorted(top.rglob("*"))
    }


def test_v2_hard_sla_is_written_and_read_back(v2, h):
    _root, cdir, run = v2
    _dev, majmin = h.first_disk()
    sla = (
        f"cpu:\n  limit: 0.5\n  period: 50ms\nnuma:\n  nodes: '0'\n"
        f"memory:\n  high: 96Mi\n  max: 128Mi\nio:\n  weight: 500\n  max:\n"
        f"    - device: '{majmin}'\n      read-bps: 10Mi\n      write-iops: 500\n"
    )
    out = run({"sla.nri.io/pod": sla})
    assert (out.exit_code, out.action, out.lines) == (EXIT_OK, "applied", [])
    assert (cdir / "cpu.max").read_text().split() == ["25000", "50000"]
    assert (cdir / "cpuset.mems").read_text().strip() == "0"
    assert (cdir / "memory.high").read_text().strip() == str(96 << 20)
    assert (cdir / "memory.max").read_text().strip() == str(128 << 20)
    io_max = (cdir / "io.max").read_text()
    assert io_max.startswith(majmin) and f"rbps={10 << 20}" in io_max and "wiops=500" in io_max
    assert "500" in (cdir / "io.weight").read_text()


def test_v2_rt_is_refused_in_hard_mode(v2):
    _root, cdir, run = v2
    before = (cdir / "cpu.max").read_text()
    out = run({"sla.nri.io/pod": "cpu:\n  limit: 1\n  rt-runtime: 5ms\n"})
    assert out.exit_code == EXIT_REFUSED
    assert len(out.lines) == 1
    assert "sla.nri.io/pod: cpu.rt-runtime" in out.lines[0] and "cgroup v2" in out.lines[0]
    assert (cdir / "cpu.max").read_text() == before  # refused means nothing written


def test_v2_soft_mode_warns_and_applies_the_rest(v2):
    _root, cdir, run = v2
    out = run({"sla.nri.io/pod": "enforcement: soft\ncpu:\n  limit: 1\n  rt-runtime: 5ms\n"})
    assert (out.exit_code, out.action) == (EXIT_OK, "applied")
    assert any("warning" in line and "cpu.rt-runtime" in line for line in out.lines)
    assert (cdir / "cpu.max").read_text().split()[0] == "100000"


def test_v2_write_failure_hard_refuses_soft_warns(v2):
    _root, cdir, run = v2
    (cdir / "memory.max").unlink()
    (cdir / "memory.max").mkdir()  # the write fails with EISDIR
    out = run({"sla.nri.io/pod": "memory:\n  max: 64Mi\n"})
    assert out.exit_code == EXIT_REFUSED
    assert "memory.max" in out.lines[0]
    soft = run({"sla.nri.io/pod": "enforcement: soft\nmemory:\n  max: 64Mi\n"})
    assert soft.exit_code == EXIT_OK
    assert "warning" in soft.lines[0] and "memory.max" in soft.lines[0]


@pytest.mark.parametrize(
    "cgroups_path", ["/kubepods/../../../etc", "../../etc", "/kubepods/\0x", "a:b"]
)
def test_v2_bad_cgroups_path_writes_nothing(v2, tmp_path, cgroups_path):
    root, _cdir, run = v2
    (tmp_path / "etc").mkdir()
    before = snapshot(tmp_path / "etc"), snapshot(root)
    out = run({"sla.nri.io/pod": "memory:\n  max: 64Mi\n"}, cgroups_path=cgroups_path)
    assert out.exit_code == EXIT_INVALID, out.lines
    assert out.lines[0].startswith("nri-sla hook: container cgroup: cgroups path")
    assert (snapshot(tmp_path / "etc"), snapshot(root)) == before


def test_v2_symlink_in_the_tree_is_refused(v2, tmp_path):
    root, _cdir, run = v2
    outside = tmp_path / "outside"
    outside.mkdir()
    (root / "kubepods" / "evil").symlink_to(outside)
    out = run({"sla.nri.io/pod": "memory:\n  max: 64Mi\n"}, cgroups_path="/kubepods/evil")
    assert out.exit_code == EXIT_INVALID and "symlink" in out.lines[0]
    assert list(outside.iterdir()) == []


def test_v2_no_cgroups_path_and_no_pid(v2):
    _root, _cdir, run = v2
    out = run({"sla.nri.io/pod": "memory:\n  max: 64Mi\n"}, cgroups_path=None, pid=None)
    assert out.exit_code == EXIT_INVALID
    assert "no linux.cgroupsPath and the state has no pid usable" in out.lines[0]


def test_missing_container_cgroup(v2):
    _root, _cdir, run = v2
    out = run({"sla.nri.io/pod": "memory:\n  max: 64Mi\n"}, cgroups_path="/kubepods/nope")
    assert out.exit_code == EXIT_INVALID and "does not exist" in out.lines[0]


def test_bad_node_config_is_a_usage_error(v2, tmp_path):
    _root, _cdir, run = v2
    bad = tmp_path / "bad.yaml"
    bad.write_text("enforcement: sometimes\n")
    out = run({"sla.nri.io/pod": "memory:\n  max: 64Mi\n"}, config=str(bad))
    assert out.exit_code == EXIT_INVALID and "enforcement" in out.lines[0]


def test_internal_failure_hard_exits_3_soft_exits_0(v2, tmp_path):
    _root, _cdir, run = v2
    missing = str(tmp_path / "no-cgroup-root")
    out = run({"sla.nri.io/pod": "memory:\n  max: 64Mi\n"}, cgroup_root=missing)
    assert out.exit_code == EXIT_INTERNAL and "cgroup facts" in out.lines[0]
    soft = run({"sla.nri.io/pod": "enforcement: soft\nmemory:\n  max: 64Mi\n"}, cgroup_root=missing)
    assert soft.exit_code == EXIT_OK and soft.lines[0].startswith("nri-sla hook: warning:")


# ------------------------------------------------------------------ verify-only mode


@pytest.fixture
def record(tmp_path):
    """record(**plan settings): the plugin's record for ctr-1 under this node's key."""
    key = load_or_create_key(str(tmp_path / "state"))

    def make(owner="ctr-1", key=key, **settings) -> str:
        return encode_record(ContainerPlan("hard", 2, **settings), "nri", owner, key)

    return make


def test_applied_record_verifies_without_writing(v2, tmp_path, record):
    _root, cdir, run = v2
    (cdir / "cpu.max").write_text("30000 100000\n")
    before = snapshot(tmp_path / "cg")
    out = run(
        {
            "sla.nri.io/pod": "cpu:\n  limit: 0.3\nmemory:\n  max: 64Mi\n",
            "sla.nri.io/applied": record(cpu_quota=30000, cpu_period=100000),
        }
    )
    assert (out.exit_code, out.action, out.lines) == (EXIT_OK, "verified", [])
    assert snapshot(tmp_path / "cg") == before  # memory.max left alone: the plugin's job


def test_applied_record_drift(v2, record):
    _root, cdir, run = v2
    ann = {
        "sla.nri.io/pod": "cpu:\n  limit: 0.3\n",
        "sla.nri.io/applied": record(cpu_quota=30000, cpu_period=100000),
    }
    out = run(ann)
    assert out.exit_code == EXIT_REFUSED
    assert "drift from what nri applied" in out.lines[0] and "cpu.max" in out.lines[0]
    soft = run(
        {
            **ann,
            "sla.nri.io/enforcement": "soft",
            "sla.nri.io/pod": "enforcement: soft\ncpu:\n  limit: 0.3\n",
        }
    )
    assert soft.exit_code == EXIT_OK and soft.action == "verified"
    assert "warning: drift" in soft.lines[0]
    assert (cdir / "cpu.max").read_text().split()[0] == "max"  # verify never writes


@pytest.mark.parametrize(
    "forged",
    [
        "{nope",
        '{"cgroup_version":2,"enforcement":"hard","path":"nri","v":2}',  # no MAC
        "another key",  # a MAC, but not this node's
        "another container",  # this node's MAC, for another container
        "no key on the node",  # a MAC, and no plugin ever ran here
    ],
)
@pytest.mark.parametrize("enforcement", ["hard", "soft"])
def test_forged_record_is_ignored_and_the_sla_enforced(v2, tmp_path, record, forged, enforcement):
    """A pod that sets `applied` itself (to skip enforcement; CRI-O copies every pod
    annotation into the spec) gets no verify-only pass: the record is ignored, said in a
    warning, and the SLA enforced as for any pod, as the NRI path does."""
    _root, cdir, run = v2
    text = {
        "another key": record(key=bytes(32), cpu_quota=30000, cpu_period=100000),
        "another container": record(owner="ctr-2", cpu_quota=30000, cpu_period=100000),
        "no key on the node": record(cpu_quota=30000, cpu_period=100000),
    }.get(forged, forged)
    if forged == "no key on the node":
        (tmp_path / "state" / "record.key").unlink()
    out = run(
        {
            "sla.nri.io/pod": f"enforcement: {enforcement}\ncpu:\n  limit: 0.3\n",
            "sla.nri.io/applied": text,
        }
    )
    assert (out.exit_code, out.action) == (EXIT_OK, "applied")
    assert "warning: sla.nri.io/applied ignored: not a valid record (" in out.lines[0]
    assert (cdir / "cpu.max").read_text().split() == ["30000", "100000"]


def test_a_record_under_an_untrusted_key_is_undecidable(v2, tmp_path, record):
    """A key file the hook cannot trust: the plugin may have enforced, so hard refuses and
    soft only warns; neither writes."""
    _root, _cdir, run = v2
    text = record(cpu_quota=30000, cpu_period=100000)
    (tmp_path / "state" / "record.key").chmod(0o644)
    before = snapshot(tmp_path / "cg")
    out = run({"sla.nri.io/pod": "cpu:\n  limit: 0.3\n", "sla.nri.io/applied": text})
    assert out.exit_code == EXIT_REFUSED
    assert "sla.nri.io/applied cannot be verified" in out.lines[0]
    soft = run(
        {"sla.nri.io/pod": "enforcement: soft\ncpu:\n  limit: 0.3\n", "sla.nri.io/applied": text}
    )
    assert soft.exit_code == EXIT_OK and "cannot be verified" in soft.lines[0]
    assert snapshot(tmp_path / "cg") == before


# ------------------------------------------------------------------ GPUs


def test_the_hook_verifies_gpu_slas_and_adds_no_gpu(v2):
    _root, _cdir, run = v2
    out = run({"sla.nri.io/pod": "gpu:\n  count: 1\n"})
    assert out.exit_code == EXIT_REFUSED
    assert "no device plugin granted this container a GPU" in out.lines[0]
    soft = run({"sla.nri.io/pod": "enforcement: soft\ngpu:\n  count: 1\nmemory:\n  max: 64Mi\n"})
    assert soft.exit_code == EXIT_OK
    assert any("no GPU is aligned" in line for line in soft.lines)


def test_an_env_naming_gpus_is_no_grant(v2):
    _root, _cdir, run = v2
    out = run(
        {"sla.nri.io/pod": "gpu:\n  from: runtime\n"}, env=["NVIDIA_VISIBLE_DEVICES=GPU-0000"]
    )
    assert out.exit_code == EXIT_REFUSED and len(out.lines) == 1
    assert "NVIDIA_VISIBLE_DEVICES='GPU-0000' is not a grant" in out.lines[0]


def test_the_grant_in_config_json_is_verified_and_aligned_to(tmp_path, h):
    """The runtime resolved the device plugin's grant into mounts (volume-mounts strategy)
    and linux.devices; cdi.k8s.io annotations are a pod's to write, never read."""
    root = tmp_path / "cg"
    cdir = h.fake_v2_tree(root, CTR)
    config = tmp_path / "config.yaml"
    config.write_text(f"state-dir: {tmp_path / 'state'}\ngpu: {{inventory: {DGX}}}\n")

    def run(sla, **grant):
        bundle = h.write_bundle(
            tmp_path / "bundle",
            {NAME: "app", "sla.nri.io/pod": sla, "cdi.k8s.io/x": "nvidia.com/gpu=all"},
            CTR,
            **grant,
        )
        return h.run_inproc(h.state_json(bundle), config=str(config), cgroup_root=str(root))

    gpu0 = {
        "mounts": [
            {
                "destination": "/var/run/nvidia-container-devices/"
                "GPU-d0000000-0000-0000-0000-000000000000",
                "source": "/dev/null",
            }
        ]
    }
    out = run("gpu: {count: 1}", **gpu0)
    assert out.exit_code == EXIT_OK, out.lines
    assert (cdir / "cpuset.mems").read_text().strip() == "0"
    out = run(
        "gpu: {count: 2}", devices=[{"path": "/dev/nvidia0", "type": "c", "major": 195, "minor": 0}]
    )
    assert out.exit_code == EXIT_REFUSED
    assert "asks for 2 whole GPUs; the grant has 1 (granted: GPU 0" in out.lines[0]
    out = run("gpu: {count: 1}")  # the annotation alone: no grant
    assert "no device plugin granted" in out.lines[0]
    out = run(
        "gpu: {count: 1}",
        mounts=[
            {"destination": "/var/run/nvidia-container-devices/GPU-0000", "source": "/dev/null"}
        ],
    )
    assert "'GPU-0000', which match no GPU on this node" in out.lines[0]


def test_gpu_inventory_fallback_does_not_reach_stderr(v2, tmp_path, h):
    root, _cdir, _run = v2
    bundle = h.write_bundle(
        tmp_path / "bg",
        {NAME: "app", "sla.nri.io/pod": "gpu:\n  from: runtime\n"},
        CTR,
        ["NVIDIA_VISIBLE_DEVICES=0"],
    )
    proc = h.run_subprocess(
        h.state_json(bundle), "--cgroup-root", str(root), "--config", str(tmp_path / "config.yaml")
    )
    assert proc.returncode == EXIT_REFUSED
    assert len(proc.stderr.decode().splitlines()) == 1, proc.stderr


def test_exclusive_cpus_are_placed_on_the_topology(v2):
    _root, cdir, run = v2
    out = run({"sla.nri.io/pod": "cpu:\n  exclusive: 1\n"})
    assert out.exit_code == EXIT_OK, out.lines
    assert len((cdir / "cpuset.cpus").read_text().strip().split(",")) == 1
    assert (cdir / "cpuset.mems").read_text().strip() != ""


# ------------------------------------------------------------------ start-up cost


@pytest.mark.parametrize("mode", ["-m", "-S"])
def test_sla_container_imports_no_protobuf_or_nvml(v2, tmp_path, h, mode):
    root, cdir, _run = v2
    bundle = h.write_bundle(
        tmp_path / "b2",
        {NAME: "app", "sla.nri.io/pod": "cpu:\n  limit: 1\nmemory:\n  max: 64Mi\n"},
        CTR,
    )
    config = tmp_path / "config.yaml"
    # Run the real entry point, then list the heavy modules it loaded: the fast entry ends
    # with posix._exit (no interpreter teardown), -m with sys.exit (atexit): catch both.
    probe = (
        "import atexit, posix, sys\n"
        "def heavy():\n"
        "    print(sorted(m for m in ('google.protobuf', 'pynvml', 'grpc', 'argparse',"
        " 'prometheus_client') if m in sys.modules), flush=True)\n"
        "_exit = posix._exit\n"
        "posix._exit = lambda status: (heavy(), _exit(status))\n"
        "atexit.register(heavy)\n"
    )
    main = Path(__file__).resolve().parents[2] / "nri_plugin" / "hook" / "__main__.py"
    if mode == "-S":
        argv = [
            sys.executable,
            "-I",
            "-S",
            "-c",
            probe + f"sys.argv = [{str(main)!r}] + sys.argv[1:]\n"
            f"exec(compile(open({str(main)!r}).read(), {str(main)!r}, 'exec'), "
            f"{{'__name__': '__main__', '__file__': {str(main)!r}, '__package__': ''}})",
        ]
    else:
        argv = [
            sys.executable,
            "-I",
            "-c",
            probe + "import runpy; runpy.run_module('nri_plugin.hook', run_name='__main__')",
        ]
    out = subprocess.run(
        [*argv, "--cgroup-root", str(root), "--config", str(config)],
        input=h.state_json(bundle).decode(),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert (out.returncode, out.stdout.strip()) == (0, "[]"), (out.stdout, out.stderr)
    assert (cdir / "memory.max").read_text().strip() == str(64 << 20)


# ------------------------------------------------------------------ time limit


def test_deadline_and_alarm():
    d = Deadline(0.01)
    import time

    time.sleep(0.02)
    with pytest.raises(HookTimeout, match="before writing"):
        d.check("writing")
    with pytest.raises(HookTimeout, match="blocked"), alarm(0.05):
        time.sleep(2)


def test_hook_spec_shapes():
    from nri_plugin.hookspec import HookSpecError, hook_spec, hooks_d_document, oci_hooks

    spec = hook_spec("createRuntime")
    assert list(spec) == ["create_runtime"]
    entry = spec["create_runtime"][0]
    assert entry["path"] == "/usr/bin/nri-sla" and entry["args"][1:4] == [
        "hook",
        "--stage",
        "createRuntime",
    ]
    assert entry["timeout"] > float(entry["args"][-1])  # ours fires before the runtime's
    assert hook_spec("poststart", "/opt/x/nri-sla")["poststart"][0]["path"] == "/opt/x/nri-sla"
    with pytest.raises(HookSpecError):
        hook_spec("poststop")
    with pytest.raises(HookSpecError):
        oci_hooks("prestart", "relative/nri-sla")
    doc = hooks_d_document("prestart")
    assert doc["stages"] == ["prestart"] and doc["version"] == "1.0.0"


def test_packaged_hook_files_match_the_code():
    from nri_plugin.hookspec import hooks_d_document, oci_hooks

    top = Path(__file__).resolve().parents[2] / "hooks"
    assert json.loads((top / "nri-sla-hook.json").read_text()) == hooks_d_document("prestart")
    # no spec template: the base spec is made on the node from its containerd's own
    assert not (top / "base-runtime-spec.json").exists()
    (entry,) = oci_hooks("createRuntime")["createRuntime"]
    assert entry["path"] == "/bin/sh" and "/usr/bin/nri-sla" in entry["args"]
    toml = (top / "containerd-config.toml.example").read_text()
    assert "base_runtime_spec" in toml and "pod_annotations" in toml


# ------------------------------------------------------------------ decision log


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_decision_line_goes_to_the_hook_log(v2, tmp_path, h, fmt):
    from nri_plugin.hook.run import emit

    root, _cdir, _run = v2
    config = tmp_path / "log-config.yaml"
    config.write_text(f"log:\n  format: {fmt}\n")
    log = tmp_path / f"hook-{fmt}.log"
    ann = {
        NAME: "app",
        "io.kubernetes.cri.sandbox-name": "web-0",
        "io.kubernetes.cri.sandbox-namespace": "prod",
        "io.kubernetes.cri.container-type": "container",
    }
    cases = [
        ("cpu:\n  limit: 0.5\n", "enforced"),
        ("enforcement: soft\ncpu:\n  rt-runtime: 5ms\n", "warned"),
        ("cpu:\n  rt-runtime: 5ms\n", "refused"),
    ]
    for i, (sla, _) in enumerate(cases):
        bundle = h.write_bundle(tmp_path / f"b{i}", {**ann, "sla.nri.io/pod": sla}, CTR)
        out = h.run_inproc(h.state_json(bundle), cgroup_root=str(root), config=str(config))
        emit(out, io.StringIO(), str(log))
    lines = log.read_text().splitlines()
    assert len(lines) == 3
    if fmt == "json":
        docs = [json.loads(line) for line in lines]
        assert [d["outcome"] for d in docs] == [c[1] for c in cases]
        assert all(d["path"] == "hook" and d["pod"] == "prod/web-0" for d in docs)
        # The plugin's fields for the same decision (ops.event.applied_fields).
        assert docs[0]["applied"] == {
            "cgroup_version": 2,
            "cpu_period": 100000,
            "cpu_quota": 50000,
            "enforcement": "hard",
        }
        assert docs[1]["warnings"][0].startswith("sla.nri.io/pod: cpu.rt-runtime")
        assert docs[2]["error"].startswith("sla.nri.io/pod: cpu.rt-runtime")
    else:
        assert "outcome=enforced" in lines[0] and "applied.cpu_quota=50000" in lines[0]
        assert "level=warning" in lines[1] and "outcome=warned" in lines[1]
        assert "level=error" in lines[2] and 'error="sla.nri.io/pod: cpu.rt-runtime' in lines[2]


def test_no_decision_line_without_an_sla(tmp_path, h):
    from nri_plugin.hook.run import emit

    bundle = h.write_bundle(tmp_path / "b", {"x": "y"}, CTR)
    out = h.run_inproc(h.state_json(bundle))
    log = tmp_path / "hook.log"
    emit(out, io.StringIO(), str(log))
    assert not log.exists()


# ------------------------------------------------------------------ a removed installation


def _run_hook_entry(entry: dict, binary: Path, stdin: str) -> subprocess.CompletedProcess:
    """Run an OCI hook entry as runc does (execve of path with args as argv), the packaged
    binary path swapped for `binary`."""
    args = [str(binary) if a == "/usr/bin/nri-sla" else a for a in entry["args"]]
    return subprocess.run(
        args, executable=entry["path"], input=stdin, capture_output=True, text=True, timeout=10
    )


def test_base_spec_hook_does_nothing_once_nri_sla_is_gone(tmp_path):
    # `apt remove` keeps the base spec (a conffile) and containerd keeps the spec it
    # loaded: runc would fail every container whose hook binary is missing
    from nri_plugin.hookspec import is_sla_hook, oci_hooks

    (entry,) = oci_hooks("createRuntime")["createRuntime"]
    assert is_sla_hook(entry["path"], entry["args"])
    gone = _run_hook_entry(entry, tmp_path / "absent" / "nri-sla", '{"id": "c1"}')
    assert (gone.returncode, gone.stdout, gone.stderr) == (0, "", "")


def test_base_spec_hook_runs_nri_sla_when_installed(tmp_path):
    from nri_plugin.hookspec import oci_hooks

    # stands in for /usr/bin/nri-sla: its argv and stdin back, and a refusal's status
    fake = tmp_path / "nri-sla"
    fake.write_text("#!/bin/sh\nprintf '%s|' \"$@\"; cat; exit 1\n")
    fake.chmod(0o755)
    (entry,) = oci_hooks("createRuntime")["createRuntime"]
    res = _run_hook_entry(entry, fake, '{"id": "c1"}')
    assert res.returncode == 1  # a hard refusal still fails the container
    assert res.stdout == 'hook|--stage|createRuntime|--timeout|5|{"id": "c1"}'


def test_fast_hook_entry_runs_the_interpreter_in_utf8_mode():
    # -X utf8: the hook's text is UTF-8 whatever locale the runtime passes on (and the
    # interpreter skips the C library's locale conversions: docs/hook.md)
    from nri_plugin.hookspec import fast_hook_entry, is_sla_hook

    entry = fast_hook_entry("createRuntime", python=sys.executable)
    script = next(i for i, a in enumerate(entry["args"]) if a.endswith("__main__.py"))
    assert is_sla_hook(entry["path"], entry["args"])
    probe = subprocess.run(
        [*entry["args"][:script], "-c", "import sys; print(sys.flags.utf8_mode)"],
        capture_output=True,
        text=True,
        timeout=30,
        env={"LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"},
    )
    assert probe.stdout == "1\n", probe.stderr


def test_fast_entry_runs_without_the_cyclic_collector():
    # A hook run is one short process ending in posix._exit: the collector would only walk
    # the objects of the modules it imports (docs/hook.md).
    main = Path(__file__).resolve().parents[2] / "nri_plugin" / "hook" / "__main__.py"
    probe = (
        "import gc, posix, sys\n"
        "_exit = posix._exit\n"
        "posix._exit = lambda status: (print(gc.isenabled(), flush=True), _exit(status))\n"
        f"sys.argv = [{str(main)!r}]\n"
        f"exec(compile(open({str(main)!r}).read(), {str(main)!r}, 'exec'), "
        f"{{'__name__': '__main__', '__file__': {str(main)!r}, '__package__': ''}})"
    )
    out = subprocess.run(
        [sys.executable, "-I", "-S", "-c", probe],
        input="{}",
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.stdout == "False\n", (out.stdout, out.stderr)
