"""bench/bench_hook.py runs on the installed layout: it installs nri-sla as `nri-sla
host-hook` does (compiled), and every row runs that copy; `--instructions` prints one
callgrind count per run. One pass of each, so the script cannot rot unseen."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # installs a copy and runs the hook ~40 times

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_hook.py"


def bench(*args: str) -> str:
    res = subprocess.run(
        [sys.executable, str(BENCH), *args], capture_output=True, text=True, timeout=600
    )
    assert res.returncode == 0, res.stderr[-3000:]
    return res.stdout


def test_timings_run_the_installed_compiled_copy():
    out = bench("--runs", "1")
    installed = re.search(r"installed as .* \((\d+) \.py, (\d+) \.pyc in site/\)", out)
    assert installed and installed.group(1) == installed.group(2), out
    assert "/opt/nri-sla/runtime-" in out and "the same, no __pycache__ (-B)" in out
    assert "/opt/nri-sla/bin/nri-sla hook, SLA, warm" in out


@pytest.mark.skipif(not os.access("/usr/bin/valgrind", os.X_OK), reason="no valgrind")
def test_instructions_counts_each_run():
    out = bench("--instructions")
    counts = dict(re.findall(r"^(\S.*?)\s+([\d.]+) M\s+[\d.]+$", out, re.M))
    assert set(counts) == {
        "bare python3 -I -S -c pass",
        "hook, SLA, warm (cache hit)",
        "hook, CPU/memory SLA, cold",
        "hook, SLA with numa, cold",
        "hook, CPU/memory SLA, cold, no __pycache__",
    }, out
    n = {k: float(v) for k, v in counts.items()}
    # compiled beats uncompiled, and a hit does less than a cold run
    assert n["hook, CPU/memory SLA, cold"] < n["hook, CPU/memory SLA, cold, no __pycache__"]
    assert n["bare python3 -I -S -c pass"] < n["hook, SLA, warm (cache hit)"]
    assert n["hook, SLA, warm (cache hit)"] < n["hook, CPU/memory SLA, cold"]
