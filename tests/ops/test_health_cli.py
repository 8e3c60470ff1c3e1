"""`nri-sla run` refuses, in one line, a probe listener it cannot serve: exit 2 for an
address that is no address, 4 for a port another process holds (docs/operations.md)."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.parametrize("case", ["taken", "malformed"])
def test_run_refuses_a_health_address_in_one_line(tmp_path: Path, case: str):
    config = tmp_path / "config.yaml"
    config.write_text(
        f"state-dir: {tmp_path / 'state'}\nstatus: {{socket: ''}}\nmetrics: {{address: ''}}\n"
    )
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = {"taken": f"127.0.0.1:{taken.getsockname()[1]}", "malformed": "bogus"}[case]
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "nri_plugin.cli",
                "run",
                "--config",
                str(config),
                "--socket",
                str(tmp_path / "nri.sock"),
                "--health-address",
                address,
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert r.returncode == {"taken": 4, "malformed": 2}[case]
    last = r.stderr.strip().splitlines()[-1]
    shown = address if case == "taken" else repr(address)
    assert last.startswith(f"nri-sla run: health address {shown}")
    assert last.count("health address") == 1
    assert {"taken": "Address already in use", "malformed": "must be HOST:PORT"}[case] in last
    assert "Traceback" not in r.stderr
