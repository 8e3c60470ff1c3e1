"""Fixtures for the plugin tests; helpers live in plugin_helpers.py (importable)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from plugin_helpers import V1_CONTROLLERS


@pytest.fixture
def v1_tree(tmp_path: Path) -> Path:
    """A fake cgroup v1 root with the controllers nri-sla writes."""
    root = tmp_path / "cgroup"
    for controller in V1_CONTROLLERS:
        (root / controller).mkdir(parents=True)
    return root
