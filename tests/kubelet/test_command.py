"""`nri-sla device-plugin` as a process: config, a snapshot inventory, the fake kubelet,
SIGTERM, and its one-line errors."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from nri_plugin import cli
from nri_plugin.value import fields

REPO = Path(__file__).resolve().parents[2]
DGX = REPO / "examples" / "dgx-like.yaml"
MIG_BOX = REPO / "examples" / "mig-box.yaml"
FIRST_UUID = "GPU-d0000000-0000-0000-0000-000000000000"


def _command(*args: str) -> list[str]:
    return [sys.executable, "-m", "nri_plugin.cli", "device-plugin", *args]


def test_serves_registers_allocates_and_stops_on_sigterm(make_kubelet, sock_dir, tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text(
        "gpu: {injection: env}\n"
        "device-plugin: {resource-name: example.com/gpu, "
        f"socket-dir: {sock_dir}}}\n"
    )
    kubelet = make_kubelet()
    with socket.socket() as s:  # a free port for the metrics endpoint
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        _command(
            "--config",
            str(config),
            "--inventory",
            str(DGX),
            "--metrics-address",
            f"127.0.0.1:{port}",
        ),
        cwd=REPO,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert kubelet.registration(timeout=20)["resource_name"] == "example.com/gpu"
        assert len(kubelet.next_list()["devices"]) == 8
        answer = kubelet.call("Allocate", {"container_requests": [{"devices_ids": [FIRST_UUID]}]})
        assert answer["response"]["container_responses"] == [
            {"envs": {"NVIDIA_VISIBLE_DEVICES": FIRST_UUID}}
        ]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            metrics = r.read().decode()
        for line in (
            'nri_sla_device_plugin_registered{resource="example.com/gpu"} 1.0',
            'nri_sla_device_plugin_allocations_total{outcome="ok",resource="example.com/gpu"} 1.0',
            'nri_sla_device_plugin_allocated_devices_total{resource="example.com/gpu"} 1.0',
            'nri_sla_device_plugin_devices{health="Healthy",resource="example.com/gpu"} 8.0',
        ):
            assert line in metrics.splitlines(), line
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert not (sock_dir / "nri-sla-gpu.sock").exists()
    assert "registered example.com/gpu with the kubelet: 8 GPU(s)" in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("args", "config", "status", "message"),
    [
        (
            ["--socket-dir", "/nonexistent/device-plugins"],
            "",
            4,
            "nri-sla device-plugin: /nonexistent/device-plugins is not a directory (is the kubelet "
            "installed? device-plugin.socket-dir or --socket-dir)",
        ),
        (
            [],
            "device-plugin: {resource-name: gpu}",
            2,
            "nri-sla device-plugin: {config}: device-plugin.resource-name must be an extended "
            "resource name like nvidia.com/gpu",
        ),
        (
            ["--inventory", "/nonexistent/snapshot.yaml", "--socket-dir", "/"],
            "",
            2,
            "nri-sla device-plugin: cannot read inventory snapshot /nonexistent/snapshot.yaml",
        ),
        (
            ["--inventory", str(MIG_BOX), "--socket-dir", "/", "--mig-strategy", "single"],
            "",
            2,
            "nri-sla device-plugin: device-plugin.mig-strategy single needs every GPU in MIG "
            "mode or "
            "none; MIG mode is on for GPU 0 and off for GPU 1 (use mixed)",
        ),
        (
            ["--socket-dir", "/"],
            "device-plugin: {mig-strategy: split}",
            2,
            "nri-sla device-plugin: {config}: device-plugin.mig-strategy must be one of none, "
            "single, "
            "mixed",
        ),
    ],
)
def test_errors_are_one_line(tmp_path, capsys, args, config, status, message):
    path = tmp_path / "config.yaml"
    path.write_text(config)
    code = cli.main(["device-plugin", "--config", str(path), "--inventory", str(DGX), *args])
    err = capsys.readouterr().err
    assert code == status
    assert err.startswith(message.format(config=path)) and err.count("\n") == 1, err


def test_docs_name_every_flag_and_config_key():
    import argparse
    import re

    from nri_plugin.commands import device_plugin
    from nri_plugin.config.values import DevicePluginConfig

    parser = argparse.ArgumentParser()
    device_plugin.add_arguments(parser)
    flags = {s for a in parser._actions for s in a.option_strings if s.startswith("--")}
    doc = (REPO / "docs" / "device-plugin.md").read_text()
    table = set(re.findall(r"^\| `(--[a-z-]+)", doc, re.M))
    assert table == flags - {"--help"}
    config_doc = (REPO / "docs" / "config.md").read_text()
    for name in (f.name for f in fields(DevicePluginConfig)):
        key = f"device-plugin.{name.replace('_', '-')}"
        assert f"| `{key}` |" in config_doc and key in doc, key
