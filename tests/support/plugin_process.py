"""`nri-sla run` as its own process, for the tests that start, signal and kill it
(tests/plugin/test_plugin_process.py, test_plugin_reload.py)."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from tests.support.plugin_helpers import DGX


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def log_lines(log: Path) -> list[dict]:
    """The JSON log lines of every process that wrote to `log`."""
    return [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]


class PluginProcess:
    """One `nri-sla run` process; its JSON log lines, its metrics endpoint."""

    def __init__(self, config: Path, log: Path, port: int) -> None:
        self.log = log
        self.port = port
        cli = Path(sys.executable).parent / "nri-sla"
        self.proc = subprocess.Popen(
            [str(cli), "run", "--config", str(config), "--cgroup", "v2", "--inventory", str(DGX)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=log.open("a"),
        )

    def lines(self) -> list[dict]:
        return log_lines(self.log)

    def get(self, path: str) -> tuple[int, str]:
        return http_get(self.port, path)

    def metric(self, name: str) -> float:
        for line in self.get("/metrics")[1].splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        return -1.0

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()


async def until(check, timeout: float = 20.0, what: str = ""):
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what or check}"
        await asyncio.sleep(0.05)


def http_get(port: int, path: str, timeout: float = 2) -> tuple[int, str]:
    """(status, body) of GET `path` on 127.0.0.1:`port`; (0, "") when nothing answers."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError:
        return 0, ""
