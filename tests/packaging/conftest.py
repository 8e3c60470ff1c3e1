"""Shared helpers for the packaging tests (systemd, NRI pre-launch, Debian, Kubernetes).

pytest runs with --import-mode=importlib, so test modules cannot import this file:
the helpers reach them through the `pk` fixture.
"""

from __future__ import annotations

import asyncio
import shutil
import sys
import urllib.error
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGING = REPO / "packaging"
# The nri-sla entry point of the environment running the tests (the venv's).
VENV_NRI_SLA = Path(sys.executable).with_name("nri-sla")


def parse_unit(path: Path) -> dict[str, dict[str, list[str]]]:
    """Parse a systemd unit into section -> key -> values (keys may repeat)."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] | None = None
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
            continue
        assert current is not None, f"{path}: key outside a section: {line}"
        key, sep, value = line.partition("=")
        assert sep, f"{path}: not KEY=VALUE: {line}"
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


def need_tool(name: str, package: str) -> str:
    """The tool's path, or skip naming the Debian package that provides it."""
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} not found: install the Debian package {package}")
    return path


def readyz(port: int) -> int:
    """The plugin's /readyz status (0 when nothing answers yet)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as r:
            return r.status
    except (urllib.error.HTTPError, urllib.error.URLError) as exc:
        return getattr(exc, "code", 0)


async def wait_ready(port: int, tries: int = 100) -> int:
    """Poll /readyz until the plugin reports itself registered; the last status."""
    status = 0
    for _ in range(tries):
        status = await asyncio.to_thread(readyz, port)
        if status == 200:
            break
        await asyncio.sleep(0.1)
    return status


@pytest.fixture(scope="session")
def pk() -> SimpleNamespace:
    return SimpleNamespace(REPO=REPO, PACKAGING=PACKAGING, VENV_NRI_SLA=VENV_NRI_SLA,
                           parse_unit=parse_unit, need_tool=need_tool, wait_ready=wait_ready)
