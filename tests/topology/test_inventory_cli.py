import json
import subprocess
import sys
from pathlib import Path

from nri_plugin.cli import main

DGX = Path(__file__).resolve().parents[2] / "examples/dgx-like.yaml"


def test_table_on_this_gpu_less_machine(capsys):
    assert main(["inventory"]) == 0
    out = capsys.readouterr().out
    assert "NUMA  CPUs" in out
    assert "GPUs: " in out


def test_table_from_fake_sysfs(capsys, dgx_sysfs):
    # no NVML here, so the 8 fake PCI functions are found through sysfs
    assert main(["inventory", "--sysfs-root", str(dgx_sysfs)]) == 0
    out = capsys.readouterr().out
    assert "2 NUMA node(s)" in out and "2 thread(s) per core" in out
    assert "0     0-7,16-23" in out
    assert "GPUs: 8 (source: sysfs" in out
    assert "0000:bd:00.0" in out


def test_json_save_and_replay(tmp_path, capsys, dgx_sysfs):
    snap = tmp_path / "node.yaml"
    assert main(["inventory", "--sysfs-root", str(dgx_sysfs), "--json", "--save", str(snap)]) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["cpus"]["online"] == "0-31"
    assert [g["numa_node"] for g in first["gpus"]] == [0] * 4 + [1] * 4
    assert snap.exists()
    assert main(["inventory", "--inventory", str(snap), "--json"]) == 0
    replay = json.loads(capsys.readouterr().out)
    assert replay["gpus"] == first["gpus"] and replay["numa"] == first["numa"]
    assert replay["gpu_source"] == "snapshot"


def test_replay_the_dgx_example_as_a_table(capsys):
    assert main(["inventory", "--inventory", str(DGX)]) == 0
    out = capsys.readouterr().out
    assert "GPUs: 8 (source: snapshot)" in out
    assert "1,2,3,4" in out  # NVLink peers of GPU 0


def test_bad_snapshot_is_one_line_and_exit_2(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 7\ncpus: {online: '0'}\n")
    assert main(["inventory", "--inventory", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("nri-sla inventory: ") and "version: 7 is not supported" in err
    assert "Traceback" not in err


def test_entry_point_runs_as_a_process():
    out = subprocess.run(
        [sys.executable, "-m", "nri_plugin.cli", "inventory", "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(out.stdout)["version"] == 1
