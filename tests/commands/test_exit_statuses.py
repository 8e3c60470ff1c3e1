"""Every command mistake an operator makes is one line on stderr and a status from the one
table (nri_plugin.errors EXIT_*, docs/operations.md "Exit statuses"), run as a process."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from nri_plugin import __version__
from nri_plugin.errors import EXIT_INVALID, EXIT_OK, EXIT_UNAVAILABLE

REPO = Path(__file__).resolve().parents[2]
DGX = str(REPO / "examples" / "dgx-like.yaml")
POD = str(REPO / "examples" / "pods" / "10-inference.yaml")
BROKEN = "{version: 1, cpus: {online: '0'\n"


def cli(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nri_plugin.cli", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


@pytest.fixture
def node(tmp_path):
    """A node config whose paths are all under tmp_path (no NRI socket there)."""
    config = tmp_path / "config.yaml"
    config.write_text(
        f"state-dir: {tmp_path / 'state'}\n"
        f"nri: {{socket: {tmp_path / 'nri.sock'}}}\n"
        f"status: {{socket: {tmp_path / 'status.sock'}}}\n"
        "metrics: {address: ''}\n"
    )
    (tmp_path / "broken.yaml").write_text(BROKEN)
    (tmp_path / "binary.yaml").write_bytes(b"a:\xff\xfe")
    return tmp_path


def one_line(done: subprocess.CompletedProcess[str]) -> str:
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


RUN = ("run", "--config", "{dir}/config.yaml", "--cgroup", "v2", "--inventory", DGX)
CASES = {
    "metrics address": (
        (*RUN, "--metrics-address", "bogus"),
        EXIT_INVALID,
        "nri-sla run: metrics address 'bogus' must be HOST:PORT",
    ),
    "plugin index": (
        (*RUN, "--index", "7"),
        EXIT_INVALID,
        "nri-sla run: plugin index '7' is invalid: exactly two digits",
    ),
    "plugin name": (
        (*RUN, "--name", "a b"),
        EXIT_INVALID,
        "nri-sla run: plugin name 'a b' is invalid",
    ),
    "run missing inventory": (
        ("run", "--config", "{dir}/config.yaml", "--inventory", "{dir}/none.yaml"),
        EXIT_INVALID,
        "nri-sla run: cannot read inventory snapshot {dir}/none.yaml: No such file or directory",
    ),
    "run broken inventory": (
        ("run", "--config", "{dir}/config.yaml", "--inventory", "{dir}/broken.yaml"),
        EXIT_INVALID,
        "nri-sla run: inventory snapshot {dir}/broken.yaml: not valid YAML: ",
    ),
    "explain missing inventory": (
        ("explain", "--inventory", "{dir}/none.yaml", POD),
        EXIT_INVALID,
        "nri-sla explain: cannot read inventory snapshot {dir}/none.yaml",
    ),
    "explain broken inventory": (
        ("explain", "--inventory", "{dir}/broken.yaml", POD),
        EXIT_INVALID,
        "nri-sla explain: inventory snapshot {dir}/broken.yaml: not valid YAML: ",
    ),
    "explain unusable inventory": (
        ("explain", "--inventory", "{dir}/config.yaml", POD),
        EXIT_INVALID,
        "nri-sla explain: inventory snapshot {dir}/config.yaml: a YAML mapping without "
        "`version`, not a node snapshot (expected what `nri-sla inventory --save` writes",
    ),
    "explain pod file as inventory": (
        ("explain", "--inventory", POD, POD),
        EXIT_INVALID,
        f"nri-sla explain: inventory snapshot {POD}: a Kubernetes Pod manifest, not a node "
        "snapshot",
    ),
    "explain gpus bad free list": (
        ("explain", "--inventory", DGX, "--gpus", "2", "--free", "abc"),
        EXIT_INVALID,
        "nri-sla explain: --free: abc is not a list of GPU indexes (expected e.g. 0-3,6)",
    ),
    "inventory save nowhere": (
        ("inventory", "--inventory", DGX, "--save", "{dir}/none/x.yaml"),
        EXIT_INVALID,
        "nri-sla inventory: --save {dir}/none/x.yaml: cannot write: No such file or directory",
    ),
    "config check binary": (
        ("config", "check", "{dir}/binary.yaml"),
        EXIT_INVALID,
        "nri-sla config: {dir}/binary.yaml: cannot be read: not UTF-8 text (byte 2)",
    ),
    "config check no file": (
        ("config", "check", "{dir}/none.yaml"),
        EXIT_INVALID,
        "nri-sla config: {dir}/none.yaml: does not exist (give the file to check: nri-sla "
        "config check FILE)",
    ),
    "run empty name": (
        (*RUN, "--name", ""),
        EXIT_INVALID,
        "nri-sla run: plugin name '' is invalid",
    ),
    "run relative socket": (
        (*RUN, "--socket", "nri.sock"),
        EXIT_INVALID,
        "nri-sla run: --socket 'nri.sock' must be an absolute path",
    ),
    "demo missing inventory": (
        ("demo", "--inventory", "{dir}/none.yaml"),
        EXIT_INVALID,
        "nri-sla demo: cannot read inventory snapshot {dir}/none.yaml",
    ),
    "demo broken inventory": (
        ("demo", "--inventory", "{dir}/broken.yaml"),
        EXIT_INVALID,
        "nri-sla demo: inventory snapshot {dir}/broken.yaml: not valid YAML: ",
    ),
    "inventory broken": (
        ("inventory", "--inventory", "{dir}/broken.yaml"),
        EXIT_INVALID,
        "nri-sla inventory: inventory snapshot {dir}/broken.yaml: not valid YAML: ",
    ),
    "no command": ((), EXIT_INVALID, "usage: nri-sla "),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_mistake_is_one_line_and_its_status(node, case):
    args, status, start = CASES[case]
    done = cli(*(a.format(dir=node) for a in args))
    line = one_line(done)
    assert done.returncode == status, done.stderr
    assert line.startswith(start.format(dir=node)), line
    assert done.stdout == ""


def test_metrics_port_in_use_is_unavailable(node):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        done = cli(*(a.format(dir=node) for a in RUN), "--metrics-address", address)
    assert one_line(done) == f"nri-sla run: metrics address {address}: Address already in use"
    assert done.returncode == EXIT_UNAVAILABLE
    assert not (node / "status.sock").exists()  # nothing left behind


def test_version_command_says_what_version_flag_says():
    done = cli("version")
    assert (done.returncode, done.stdout, done.stderr) == (EXIT_OK, f"nri-sla {__version__}\n", "")
    assert re.fullmatch(r"\d+\.\d+\.\d+.*", __version__)


def test_docs_table_lists_every_status():
    from nri_plugin import errors

    doc = (REPO / "docs" / "operations.md").read_text()
    table = doc.split("## Start-up and exit statuses", 1)[1].split("\n\n| status |", 1)[1]
    shown = [int(n) for n in re.findall(r"^\| (\d) \|", table.split("\n\n", 1)[0], re.M)]
    statuses = sorted(
        v for k, v in vars(errors).items() if k.startswith("EXIT_") and isinstance(v, int)
    )
    assert shown == statuses == [0, 1, 2, 3, 4]


def test_run_warns_at_start_when_the_kubelet_pins_cpus_itself(node):
    state = node / "cpu_manager_state"
    state.write_text('{"policyName":"static","defaultCpuSet":"0-7","checksum":1}')
    args = [a.format(dir=node) for a in RUN]
    with subprocess.Popen(
        [sys.executable, "-m", "nri_plugin.cli", *args, "--cpu-manager-state", str(state)],
        cwd=REPO,
        text=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    ) as run:
        try:
            lines = []
            for line in run.stderr:  # the NRI socket is absent: it retries, logging that
                lines.append(line)
                if "NRI runtime not reachable" in line:
                    break
        finally:
            run.terminate()
    warned = [line for line in lines if "CPU manager policy" in line]
    assert len(warned) == 1 and "level=warning" in warned[0], lines
    assert f"policy is 'static' ({state})" in warned[0]
