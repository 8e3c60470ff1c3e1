"""Fixtures for the whole suite."""

from __future__ import annotations

import logging

import pytest

from nri_plugin.ops.logsetup import LOGGER_NAME


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
