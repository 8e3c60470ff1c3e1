"""`nri-sla status` and the status socket it reads: root only, one line when the plugin is
not running, a table or the JSON document."""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from nri_plugin.commands.status import render
from nri_plugin.errors import Unavailable
from nri_plugin.ops.statussocket import StatusServer, read_status

REPO = Path(__file__).resolve().parents[2]
NOBODY = 65534
DOC = {
    "version": 1,
    "at": 1000.0,
    "interval": 30.0,
    "registered": True,
    "containers": [
        {
            "id": "a" * 64,
            "namespace": "infer",
            "pod": "llm-0",
            "container": "server",
            "enforcement": "hard",
            "sla": "hard cpu=4 mem=16Gi high=12Gi",
            "state": "watched",
            "settings": [
                {
                    "controller": "cpu",
                    "file": "cpu.cfs_quota_us",
                    "via": "runtime",
                    "expected": "400000",
                    "actual": "100000",
                    "drifted": True,
                },
                {
                    "controller": "memory",
                    "file": "memory.limit_in_bytes",
                    "via": "runtime",
                    "expected": "17179869184",
                    "actual": "17179869184",
                    "drifted": False,
                },
            ],
            "drifted": 1,
            "repair": "requested through the runtime",
            "cpus": "0-3",
            "mems": "0",
            "exclusive_cpus": "2-3",
            "gpus": ["GPU-1234"],
            "cpu": {"periods": 1000, "throttled": 80, "throttled_seconds": 1.5},
            "throttled_ratio": 0.0812,
            "memory_events": {"high": 12, "max": 0},
            "pressure": {"cpu.some": 0.125, "memory.some": 0.0},
        },
        {
            "id": "b" * 64,
            "namespace": "batch",
            "pod": "job",
            "container": "work",
            "enforcement": "soft",
            "sla": "soft cpu=1",
            "state": "not started",
            "settings": [],
            "drifted": 0,
            "repair": "",
            "cpus": "",
            "mems": "",
            "exclusive_cpus": "",
            "gpus": [],
            "cpu": None,
            "throttled_ratio": None,
            "memory_events": {},
            "pressure": {},
        },
    ],
}


@pytest.fixture
def run_dir() -> Iterator[Path]:
    """A directory others may enter, as /run/nri-sla is (0755), with a short path (unix
    socket paths are limited to 107 bytes)."""
    path = Path(tempfile.mkdtemp(prefix="nri-sla-", dir="/tmp"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def as_nobody(path: Path) -> str:
    """What read_status says in a child process running as nobody."""
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: drop to nobody, ask, report, leave without cleanup
        try:
            os.close(reader)
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            try:
                read_status(str(path), timeout=10)
                said = "answered"
            except Unavailable as exc:
                said = str(exc)
            os.write(writer, said.encode())
        finally:
            os._exit(0)
    os.close(writer)
    with os.fdopen(reader, "rb") as pipe:
        said = pipe.read().decode()
    os.waitpid(pid, 0)
    return said


def test_the_socket_answers_root_and_nobody_else(run_dir):
    if os.geteuid() != 0:
        pytest.skip("needs root: the test connects as root and as nobody")
    path = run_dir / "status.sock"
    with StatusServer(str(path), lambda: DOC):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600 and path.stat().st_uid == 0
        assert read_status(str(path)) == DOC
        assert as_nobody(path) == f"permission denied on {path}: nri-sla status is root only"
        # Were the mode widened, the server itself still refuses other users.
        path.chmod(0o666)
        assert (
            as_nobody(path) == "nri-sla could not report its status: permission denied: root only"
        )
    assert not path.exists()  # removed on close


def test_a_stale_socket_is_replaced_and_a_live_or_foreign_one_is_not(run_dir):
    path = run_dir / "status.sock"
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(path))
    stale.close()  # what a killed plugin leaves behind: nothing listens
    with StatusServer(str(path), lambda: DOC):
        assert read_status(str(path))["registered"] is True
        with pytest.raises(Unavailable, match="served by another process"):
            StatusServer(str(path), lambda: DOC)
    path.write_text("not a socket")
    with pytest.raises(Unavailable, match="exists and is not a socket"):
        StatusServer(str(path), lambda: DOC)


def test_a_failing_source_is_one_line_for_the_client(run_dir):
    path = run_dir / "status.sock"

    def broken() -> dict:
        raise TimeoutError("the event loop did not answer")

    with StatusServer(str(path), broken), pytest.raises(Unavailable) as caught:
        read_status(str(path))
    assert (
        str(caught.value) == "nri-sla could not report its status: TimeoutError: the "
        "event loop did not answer"
    )


def status_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "nri_plugin.cli", "status", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )


def test_cli_says_in_one_line_when_the_plugin_is_not_running(run_dir):
    done = status_cli("--socket", str(run_dir / "status.sock"))
    assert done.returncode == 4 and done.stdout == ""
    assert (
        done.stderr == f"nri-sla status: nri-sla is not running (nothing serves "
        f"{run_dir / 'status.sock'})\n"
    )
    config = run_dir / "config.yaml"
    config.write_text('status: {socket: ""}\n')
    done = status_cli("--config", str(config))
    assert done.returncode == 4
    assert (
        done.stderr == "nri-sla status: the node config turns the status socket off "
        '(status.socket is "")\n'
    )


def test_cli_exits_1_while_the_plugin_is_not_registered_with_the_runtime(run_dir):
    path = run_dir / "status.sock"
    for registered, status in ((True, 0), (False, 1)):
        with StatusServer(
            str(path), lambda registered=registered: {**DOC, "registered": registered}
        ):
            done = status_cli("--socket", str(path))
        assert done.returncode == status, done.stderr
        assert ("NOT registered with the runtime" in done.stdout) is not registered


def test_cli_says_a_bad_config_in_one_line_through_its_kind(run_dir):
    # Neither failure is caught by the command: nri_plugin.cli prints it and exits with
    # its kind's status (a ConfigError: invalid, 2; the unreachable socket: unavailable, 4).
    config = run_dir / "config.yaml"
    config.write_text("status: {socket: relative.sock}\n")
    done = status_cli("--config", str(config))
    assert (done.returncode, done.stdout) == (2, "")
    assert (
        done.stderr == f"nri-sla status: {config}: status.socket must be an absolute "
        "path, got relative.sock\n"
    )


def test_a_taken_status_path_leaves_the_plugin_without_the_socket(run_dir, caplog):
    # Unavailable is no OSError: the service still logs it and serves on without it.
    from nri_plugin.plugin.service import start_status_server

    path = run_dir / "status.sock"
    path.write_text("not a socket")
    with caplog.at_level("WARNING", logger="nri_sla"):
        assert start_status_server(None, str(path)) is None  # type: ignore[arg-type]
    assert (
        f"status socket {path} not served: status socket {path} exists and is not a "
        "socket" in caplog.text
    )


def test_cli_prints_the_table_or_the_document(run_dir):
    path = run_dir / "status.sock"
    with StatusServer(str(path), lambda: DOC):
        table = status_cli("--socket", str(path))
        as_json = status_cli("--socket", str(path), "--json")
    assert table.returncode == 0 and as_json.returncode == 0
    assert json.loads(as_json.stdout) == DOC
    assert "infer/llm-0" in table.stdout and "8.1%" in table.stdout


def test_table_rows_and_notes():
    text = render(DOC, now=1012.0)
    lines = text.splitlines()
    assert (
        lines[0] == "2 SLA containers, 1 drifted; watch every 30s; registered with the "
        "runtime (read 12s ago)"
    )
    header = lines[1].split()
    assert header == [
        "POD",
        "CONTAINER",
        "SLA",
        "HOLDS",
        "THROTTLED",
        "MEMORY",
        "PRESSURE",
        "CPUS",
        "GPUS",
    ]
    row = lines[2]
    for cell in (
        "infer/llm-0",
        "server",
        "hard cpu=4 mem=16Gi high=12Gi",
        "1/2",
        "8.1%",
        "high=12",
        "cpu=12% memory=0%",
        "0-3 (excl 2-3)",
        "GPU-1234",
    ):
        assert cell in row
    assert "batch/job" in lines[3] and "not started" in lines[3]
    assert lines[-2:] == [
        "infer/llm-0 server: cpu/cpu.cfs_quota_us holds '100000', SLA '400000' (set through "
        "the runtime)",
        "infer/llm-0 server: repair requested through the runtime",
    ]


def test_gpu_health_below_the_table():
    gpus = [
        {
            "index": i,
            "gpu": f"GPU-{i}",
            "pci_bus_id": f"0000:0{i}:00.0",
            "name": "",
            "mig": "off",
            "health": "healthy",
            "reason": "",
        }
        for i in range(4)
    ]
    gpus[1].update(health="unhealthy", reason="XID 79")
    gpus[3].update(health="unknown", reason="NVML: error 999", mig="unknown")
    lines = render({**DOC, "gpus": gpus}, now=1012.0).splitlines()
    assert lines[-3:] == [
        "GPUs: 4 (2 healthy, 1 unhealthy, 1 unknown)",
        "GPU 1 (GPU-1): unhealthy: XID 79",
        "GPU 3 (GPU-3): unknown: NVML: error 999; MIG mode unknown",
    ]


def test_containers_created_unenforced_below_the_table():
    unenforced = [
        {"id": "ab" * 32, "namespace": "web", "pod": "api-1", "container": "app"},
        {"id": "cd" * 32, "namespace": "web", "pod": "api-2", "container": "app"},
    ]
    lines = render({**DOC, "unenforced": unenforced}, now=1012.0).splitlines()
    assert lines[-3:] == [
        "created unenforced (an SLA asked, none enforced: recreate them): 2",
        "  web/api-1 app (abababababab)",
        "  web/api-2 app (cdcdcdcdcdcd)",
    ]
    assert "created unenforced" not in render(DOC, now=1012.0)
