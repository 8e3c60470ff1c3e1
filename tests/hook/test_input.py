"""Bad input from the runtime: clear one-line errors, documented exit codes, no writes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nri_plugin.errors import EXIT_INTERNAL, EXIT_INVALID, EXIT_OK
from nri_plugin.granted import GrantedResources
from nri_plugin.hook.inputs import STATE_LIMIT, parse_config
from nri_plugin.hook.options import parse_argv

SLA = {"sla.nri.io/pod": "cpu:\n  limit: 1\n"}


def test_not_json_exits_2_with_one_line(h):
    proc = h.run_subprocess(b"{not json")
    assert proc.returncode == EXIT_INVALID
    lines = proc.stderr.decode().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("nri-sla hook: OCI state on stdin is not valid JSON")


@pytest.mark.parametrize(
    ("state", "needle"),
    [
        (b"[]", "must be a JSON object"),
        (b"{}", "'id' must be a non-empty string"),
        (json.dumps({"id": "x"}).encode(), "'bundle' must be a non-empty string"),
        (json.dumps({"id": "x", "bundle": "rel/path"}).encode(), "must be an absolute path"),
        (json.dumps({"id": "x", "bundle": "/b", "pid": "12"}).encode(), "'pid' must be a positive"),
        (json.dumps({"id": "x", "bundle": "/b", "pid": True}).encode(), "'pid' must be a positive"),
        (json.dumps({"id": "x", "bundle": "/b", "pid": -1}).encode(), "'pid' must be a positive"),
        (
            json.dumps({"id": "x", "bundle": "/b", "annotations": {"a": 1}}).encode(),
            "annotation 'a' must be a string",
        ),
        (b"\xff\xfe", "not valid JSON"),
    ],
)
def test_bad_state_fields(state, needle, h):
    out = h.run_inproc(state)
    assert out.exit_code == EXIT_INVALID
    assert len(out.lines) == 1 and needle in out.lines[0], out.lines


def test_state_larger_than_limit_is_refused(h):
    big = b'{"id": "x", "bundle": "/b", "pad": "' + b"a" * STATE_LIMIT + b'"}'
    out = h.run_inproc(big)
    assert out.exit_code == EXIT_INVALID
    assert f"larger than {STATE_LIMIT} bytes" in out.lines[0]


def test_missing_bundle(tmp_path, h):
    out = h.run_inproc(h.state_json(tmp_path / "nope"))
    assert out.exit_code == EXIT_INVALID
    assert "has no config.json" in out.lines[0]


def test_config_json_symlink_is_refused(tmp_path, h):
    real = h.write_bundle(tmp_path / "real", SLA, "/x/y") / "config.json"
    bundle = tmp_path / "b"
    bundle.mkdir()
    (bundle / "config.json").symlink_to(real)
    out = h.run_inproc(h.state_json(bundle))
    assert out.exit_code == EXIT_INVALID
    assert "cannot open" in out.lines[0]


def test_config_json_not_regular(tmp_path, h):
    bundle = tmp_path / "b"
    (bundle / "config.json").mkdir(parents=True)
    out = h.run_inproc(h.state_json(bundle))
    assert out.exit_code == EXIT_INVALID


def test_config_json_not_json(tmp_path, h):
    bundle = tmp_path / "b"
    bundle.mkdir()
    (bundle / "config.json").write_text("nope")
    out = h.run_inproc(h.state_json(bundle))
    assert out.exit_code == EXIT_INVALID
    assert "config.json" in out.lines[0] and "not valid JSON" in out.lines[0]


def test_hostile_annotation_value_too_long(tmp_path, h):
    bundle = h.write_bundle(tmp_path / "b", {"sla.nri.io/pod": "x" * (300 << 10)}, "/a/b")
    out = h.run_inproc(h.state_json(bundle))
    assert out.exit_code == EXIT_INVALID
    assert "annotation 'sla.nri.io/pod' is longer than" in out.lines[0]


def test_config_parse_keeps_grants_and_cgroups_path():
    spec = parse_config(
        json.dumps(
            {
                "process": {"env": ["A=1", "NVIDIA_VISIBLE_DEVICES=0,1", 7, "junk"]},
                "linux": {
                    "cgroupsPath": "/k/c1",
                    "resources": {
                        "cpu": {"quota": 50000, "period": 100000, "shares": 512},
                        "memory": {"limit": 268435456},
                    },
                    "devices": [
                        {"path": "/dev/nvidia3", "type": "c", "major": 195, "minor": 3},
                        {"path": "/dev/nvidiactl", "type": "c", "major": 195, "minor": 255},
                        {"path": "/dev/sda", "type": "b", "major": 8, "minor": 0},
                        {"type": "c", "major": "195", "minor": 4},
                        "junk",
                    ],
                },
                "mounts": [
                    {
                        "destination": "/var/run/nvidia-container-devices/GPU-1",
                        "source": "/dev/null",
                    },
                    # a pod's own volume there is not the device plugin's mount
                    {
                        "destination": "/var/run/nvidia-container-devices/all",
                        "source": "/var/lib/kubelet/pods/x/volumes/empty",
                    },
                    {"destination": "/proc"},
                    {"destination": 5},
                    [],
                ],
                "annotations": {"k": "v", "cdi.k8s.io/x": "nvidia.com/gpu=all"},
            }
        ).encode()
    )
    assert spec.granted == GrantedResources(
        cpu_quota=50000,
        cpu_period=100000,
        cpu_shares=512,
        memory_limit=268435456,
        gpu_devices=((195, 3), (195, 255)),
        device_mounts=("GPU-1",),
        env_gpus="0,1",
    )
    assert spec.cgroups_path == "/k/c1"
    assert spec.annotations == {"k": "v", "cdi.k8s.io/x": "nvidia.com/gpu=all"}


def test_config_unlimited_resources_grant_nothing():
    spec = parse_config(
        json.dumps(
            {
                "linux": {
                    "resources": {"cpu": {"quota": -1, "period": 100000}, "memory": {"limit": -1}}
                }
            }
        ).encode()
    )
    assert spec.granted.quota_period is None and spec.granted.memory_limit is None
    assert parse_config(b'{"linux": {}}').granted == GrantedResources()


@pytest.mark.parametrize(
    "doc",
    [
        {"linux": []},
        {"linux": {"cgroupsPath": 5}},
        {"linux": {"resources": []}},
        {"linux": {"resources": {"cpu": 5}}},
        {"linux": {"resources": {"cpu": {"quota": "50000"}}}},
        {"linux": {"resources": {"memory": {"limit": True}}}},
        {"linux": {"resources": {"cpu": {"shares": 1.5}}}},
    ],
)
def test_config_bad_linux(doc):
    from nri_plugin.errors import InvalidInput

    with pytest.raises(InvalidInput):
        parse_config(json.dumps(doc).encode())


# ------------------------------------------------------------------ nothing to do


def test_no_sla_is_a_silent_success(tmp_path, h):
    bundle = h.write_bundle(tmp_path / "b", {"other": "x"}, "/a/b")
    out = h.run_inproc(h.state_json(bundle))
    assert (out.exit_code, out.action, out.lines) == (EXIT_OK, "skipped", [])


def test_sandbox_is_skipped_even_with_an_sla(tmp_path, h):
    ann = {**SLA, "io.kubernetes.cri.container-type": "sandbox"}
    bundle = h.write_bundle(tmp_path / "b", ann, "/../../etc")
    out = h.run_inproc(h.state_json(bundle))
    assert (out.exit_code, out.action) == (EXIT_OK, "skipped")


def test_other_containers_sla_is_not_ours(tmp_path, h):
    ann = {
        "sla.nri.io/container.db": "cpu:\n  limit: 1\n",
        "io.kubernetes.cri.container-name": "web",
    }
    bundle = h.write_bundle(tmp_path / "b", ann, "/a/b")
    out = h.run_inproc(h.state_json(bundle))
    assert out.action == "skipped"


def test_no_sla_does_not_import_yaml_or_protobuf(tmp_path, h):
    bundle = h.write_bundle(tmp_path / "b", {"x": "y"}, "/a/b")
    code = (
        "import sys, io\nfrom nri_plugin.hook.run import main\n"
        "sys.stdin = io.TextIOWrapper(io.BytesIO(sys.argv[1].encode()))\n"
        "rc = main([])\n"
        "bad = [m for m in ('yaml', 'google.protobuf', 'pynvml', 'argparse') "
        "if m in sys.modules]\nprint(rc, bad)\n"
    )
    out = subprocess.run(
        [sys.executable, "-I", "-c", code, h.state_json(bundle).decode()],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.stdout.strip() == "0 []", out.stderr


# ------------------------------------------------------------------ command line


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--stage", "bogus"], "--stage: 'bogus' is not one of"),
        (["--timeout", "0"], "--timeout: 0 is outside"),
        (["--timeout", "x"], "is not a number"),
        (["--frob"], "unknown argument '--frob'"),
        (["--stage"], "--stage needs a value"),
    ],
)
def test_bad_arguments(argv, needle, h):
    proc = h.run_subprocess(b"", *argv)
    assert proc.returncode == EXIT_INVALID
    assert needle in proc.stderr.decode()


def test_parse_argv_forms():
    opts = parse_argv(["--stage=poststart", "--timeout", "2.5", "--cgroup-root", "/x"])
    assert (opts.stage, opts.timeout, opts.cgroup_root) == ("poststart", 2.5, "/x")


def test_console_entry_runs_the_same_hook(tmp_path, h):
    bundle = h.write_bundle(tmp_path / "b", {"x": "y"}, "/a/b")
    script = Path(sys.executable).parent / "nri-sla"
    if not script.exists():
        pytest.skip("needs the nri-sla console script: pip install -e .")
    ok = subprocess.run(
        [script, "hook", "--stage", "prestart"],
        input=h.state_json(bundle),
        capture_output=True,
        timeout=30,
    )
    assert ok.returncode == EXIT_OK and ok.stderr == b""
    bad = subprocess.run([script, "hook"], input=b"[", capture_output=True, timeout=30)
    assert bad.returncode == EXIT_INVALID
    assert bad.stderr.decode().startswith("nri-sla hook: OCI state on stdin is not valid")


# ------------------------------------------------------------------ never hang


def test_stdin_never_closed_times_out():
    start = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-I", "-m", "nri_plugin.hook", "--timeout", "0.5"],
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        # stdin stays open: the hook is blocked in read() until its own alarm fires.
        rc = proc.wait(timeout=20)
        err = proc.stderr.read().decode()
    finally:
        proc.stdin.close()
        if proc.poll() is None:
            proc.kill()
    assert rc == EXIT_INTERNAL
    assert "timed out after 0.5s" in err
    assert time.monotonic() - start < 10


def test_log_file_gets_the_lines(tmp_path, h):
    log = tmp_path / "hook.log"
    env = {**os.environ, "NRI_SLA_HOOK_LOG": str(log)}
    proc = h.run_subprocess(b"[]", env=env)
    assert proc.returncode == EXIT_INVALID
    assert "- nri-sla hook: OCI state on stdin must be a JSON object" in log.read_text()


def test_multiline_messages_become_one_line(tmp_path, h):
    # An SLA whose error echoes a value with newlines still yields exactly one line.
    bundle = h.write_bundle(
        tmp_path / "b", {"sla.nri.io/pod": "cpu:\n  limit: |\n    two\n    lines\n"}, "/a/b"
    )
    (tmp_path / "config.yaml").write_text("enforcement: hard\n")
    proc = h.run_subprocess(h.state_json(bundle), "--config", str(tmp_path / "config.yaml"))
    assert proc.returncode == EXIT_INVALID, proc.stderr
    assert len(proc.stderr.decode().splitlines()) == 1, proc.stderr
    assert "cpu.limit" in proc.stderr.decode()
    from nri_plugin.hook.run import one_line

    assert one_line("a\nb\r\nc") == "a b  c"
    assert len(one_line("x" * 10_000)) == 4000
