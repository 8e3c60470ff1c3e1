"""Fixtures for the whole suite."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from nri_plugin.ops.logsetup import LOGGER_NAME
from tests.support.cgroups import CgroupTree, make_v1_tree, make_v2_tree


@pytest.fixture(autouse=True)
def _restore_logger():
    """A test that sets logging up in-process (cli.main, setup_logging) points the
    `nri_sla` logger at its own captured stream, closed after it: later tests' threads
    must not log into that ("--- Logging error ---" on their stderr)."""
    logger = logging.getLogger(LOGGER_NAME)
    saved = (list(logger.handlers), logger.level, logger.propagate)
    yield
    logger.handlers[:] = saved[0]
    logger.setLevel(saved[1])
    logger.propagate = saved[2]


@pytest.fixture
def v1_tree(tmp_path: Path) -> CgroupTree:
    """A fake cgroup v1 (hybrid) hierarchy and its mountinfo (tests/support/cgroups.py)."""
    return make_v1_tree(tmp_path / "v1" / "cgroup")


@pytest.fixture
def v2_tree(tmp_path: Path) -> CgroupTree:
    """A fake cgroup v2 hierarchy and its mountinfo (tests/support/cgroups.py)."""
    return make_v2_tree(tmp_path / "v2" / "cgroup")
