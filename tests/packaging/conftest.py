"""Shared helpers for the packaging tests (systemd, NRI pre-launch, Debian, Kubernetes).

pytest runs with --import-mode=importlib, so test modules cannot import this file:
the helpers reach them through the `pk` fixture.
"""

from __future__ import annotations

import asyncio
import importlib.util
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


def load_package_tools():
    """package_tools.py, under the name tests/vm's conftest loads it by too."""
    key = "nri_sla_package_tools"
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            key, Path(__file__).with_name("package_tools.py")
        )
        module = importlib.util.module_from_spec(spec)
        sys.modules[key] = module
        spec.loader.exec_module(module)
    return sys.modules[key]


@pytest.fixture(scope="session")
def pk() -> SimpleNamespace:
    tools = load_package_tools()
    return SimpleNamespace(
        REPO=REPO,
        PACKAGING=PACKAGING,
        VENV_NRI_SLA=VENV_NRI_SLA,
        parse_unit=tools.parse_unit,
        need_tool=need_tool,
        wait_ready=wait_ready,
        build_deb=tools.build_deb,
        DebUnavailable=tools.DebUnavailable,
    )
