"""Run every benchmark script in turn and print its figures (`make bench`).

Each script is standalone (`.venv/bin/python bench/<name>.py --help`); this only runs them
one after another, so that they do not compete for the CPUs. docs/benchmarks.md records
the figures and what each measures.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCRIPTS = [
    ("bench_sla.py", []),
    ("bench_hostile_text.py", []),
    ("bench_plan.py", []),
    ("bench_create.py", []),
    ("bench_placement.py", []),
    ("bench_exclusive.py", []),
    ("bench_selection.py", []),
    ("bench_records.py", []),
    ("bench_synchronize.py", []),
    ("bench_drift.py", []),
    ("bench_transport.py", []),
    ("bench_hook.py", []),
    ("bench_lifecycles.py", []),
    ("bench_memory_floor.py", []),
    # Skips itself without the Go programs; --floor: this stack's floor beside nri-sla.
    ("bench_vs_go.py", ["--floor"]),
]


def main() -> int:
    failed = []
    for name, args in SCRIPTS:
        print(f"\n== {name} {' '.join(args)}", flush=True)
        started = time.monotonic()
        rc = subprocess.call([sys.executable, str(HERE / name), *args])
        print(f"-- {name}: exit {rc}, {time.monotonic() - started:.1f} s", flush=True)
        if rc:
            failed.append(name)
    if failed:
        print(f"\nmissed targets or failed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
