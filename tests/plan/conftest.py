"""Helpers for the plan tests live in record_helpers.py (importable)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
