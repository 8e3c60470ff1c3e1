"""Fixtures for the NRI transport tests (tests/nri); the recordings and the reference
plugin: tests/support/nri_golden.py."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator

import pytest

from tests.support.nri_golden import GOLDEN_FILES, Golden, load_golden


@pytest.fixture(params=GOLDEN_FILES)
def golden(request: pytest.FixtureRequest) -> Golden:
    return load_golden(request.param)


@pytest.fixture
def sock_dir() -> Iterator[str]:
    # Short path: unix socket paths are limited to 107 bytes.
    path = tempfile.mkdtemp(prefix="nri-", dir="/tmp")
    os.chmod(path, 0o700)
    yield path
    shutil.rmtree(path, ignore_errors=True)
