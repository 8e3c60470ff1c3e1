"""`nri-sla status`: the node's SLA containers as the running plugin sees them now.

One row per container: its SLA in short, how many enforced values the kernel still
holds, CPU throttling, memory limit events and pressure, its CPUs and GPUs; each drifted
value and any repair under way below the table; then the node's GPUs by health, with a
line for each GPU that is not healthy. Read from the plugin's root-only status
socket (docs/operations.md, "The status table"); `--json` prints the document itself.
Exit status 0; 1 when the plugin answers but is not registered with the runtime (the
table says so); 4 with one line on stderr when the plugin cannot be asked.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from nri_plugin.commands.common import table_lines
from nri_plugin.config.loader import DEFAULT_PATH, load_config

HEADER = ["POD", "CONTAINER", "SLA", "HOLDS", "THROTTLED", "MEMORY", "PRESSURE", "CPUS", "GPUS"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--json", action="store_true", help="print the status document (JSON) instead of the table"
    )
    parser.add_argument(
        "--socket",
        default=None,
        help="the plugin's status socket (default: status.socket of the node config)",
    )
    parser.add_argument(
        "--config", default=None, help=f"node config file (default {DEFAULT_PATH} if present)"
    )


def main(args: argparse.Namespace) -> int:
    from nri_plugin.errors import EXIT_OK, EXIT_REFUSED, Unavailable
    from nri_plugin.ops.statussocket import read_status

    # A ConfigError (exit status 2) or an Unavailable (4) reaches nri_plugin.cli: one line.
    path = args.socket
    if path is None:
        path = load_config(args.config).status.socket
        if not path:
            raise Unavailable('the node config turns the status socket off (status.socket is "")')
    document = read_status(path)
    print(json.dumps(document, indent=2) if args.json else render(document))
    # Running but not registered with the runtime: no container is being decided, so a
    # health check must not read it as fine.
    return EXIT_OK if document.get("registered") else EXIT_REFUSED


def render(doc: dict[str, Any], now: float | None = None) -> str:
    containers = doc.get("containers", [])
    drifted = sum(1 for c in containers if c.get("drifted"))
    interval = doc.get("interval") or 0
    watch = f"watch every {interval:g}s" if interval else "drift watch off"
    runtime = (
        "registered with the runtime"
        if doc.get("registered")
        else "NOT registered with the runtime"
    )
    age = (now if now is not None else time.time()) - float(doc.get("at", 0))
    lines = [
        f"{len(containers)} SLA containers, {drifted} drifted; {watch}; {runtime} "
        f"(read {max(age, 0):.0f}s ago)"
    ]
    if containers:
        lines += table_lines([HEADER, *(_row(c) for c in containers)])
    notes = [note for c in containers for note in _notes(c)]
    if notes:
        lines += ["", *notes]
    gpus = doc.get("gpus", [])
    if gpus:
        lines += ["", *_gpu_lines(gpus)]
    unenforced = doc.get("unenforced", [])
    if unenforced:
        lines += [
            "",
            f"created unenforced (an SLA asked, none enforced: recreate them): {len(unenforced)}",
            *(
                f"  {u.get('namespace', '')}/{u.get('pod', '')} {u.get('container', '')} "
                f"({str(u.get('id', ''))[:12]})"
                for u in unenforced
            ),
        ]
    return "\n".join(lines)


def _gpu_lines(gpus: list[dict[str, Any]]) -> list[str]:
    """ "GPUs: 8 (7 healthy, 1 unhealthy)" and a line for each GPU not healthy."""
    states: dict[str, int] = {}
    for g in gpus:
        states[g.get("health", "unknown")] = states.get(g.get("health", "unknown"), 0) + 1
    counts = ", ".join(f"{n} {state}" for state, n in sorted(states.items()))
    lines = [f"GPUs: {len(gpus)} ({counts})"]
    for g in gpus:
        if g.get("health") != "healthy":
            mig = "; MIG mode unknown" if g.get("mig") == "unknown" else ""
            lines.append(
                f"GPU {g.get('index')} ({g.get('gpu')}): {g.get('health')}: "
                f"{g.get('reason') or 'no reason given'}{mig}"
            )
    return lines


def _row(c: dict[str, Any]) -> list[str]:
    settings = c.get("settings", [])
    holding = sum(1 for s in settings if not s.get("drifted"))
    holds = f"{holding}/{len(settings)}" if settings else c.get("state", "-")
    ratio = c.get("throttled_ratio")
    throttled = "-" if ratio is None else f"{ratio:.1%}"
    events = c.get("memory_events", {})
    memory = " ".join(f"{k}={v}" for k, v in events.items() if v) or "-"
    pressure = c.get("pressure", {})
    psi = (
        " ".join(
            f"{r}={pressure[f'{r}.some']:.0%}"
            for r in ("cpu", "memory", "io")
            if f"{r}.some" in pressure
        )
        or "-"
    )
    cpus = c.get("cpus") or "-"
    if c.get("exclusive_cpus"):
        cpus += f" (excl {c['exclusive_cpus']})"
    return [
        f"{c.get('namespace', '')}/{c.get('pod', '')}",
        c.get("container", ""),
        c.get("sla", ""),
        holds,
        throttled,
        memory,
        psi,
        cpus,
        ",".join(c.get("gpus", [])) or "-",
    ]


def _notes(c: dict[str, Any]) -> list[str]:
    who = f"{c.get('namespace', '')}/{c.get('pod', '')} {c.get('container', '')}"
    notes = [
        f"{who}: {s.get('controller')}/{s.get('file')} holds {s.get('actual')!r}, "
        f"SLA {s.get('expected')!r} (set {_via(s)})"
        for s in c.get("settings", [])
        if s.get("drifted")
    ]
    if c.get("repair"):
        notes.append(f"{who}: repair {c['repair']}")
    state = c.get("state", "")
    if state not in ("watched", "not started", "settling"):
        notes.append(f"{who}: {state}")
    return notes


def _via(setting: dict[str, Any]) -> str:
    return "by nri-sla" if setting.get("via") == "direct" else "through the runtime"
