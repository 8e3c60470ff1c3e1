"""The hook's main flow: state -> config.json -> SLA -> plan -> cgroupfs -> read-back.

Everything before "there is an SLA for this container" uses only the standard library,
so containers without an SLA (and pod sandboxes) cost a JSON parse and nothing more.
"""

from __future__ import annotations

import os
import sys
import time

from nri_sla.hook.deadline import Deadline, alarm
from nri_sla.hook.errors import (
    EXIT_INTERNAL,
    EXIT_OK,
    HookError,
)
from nri_sla.hook.options import HookOptions
from nri_sla.hook.state import load_bundle, read_state
from nri_sla.hook.target import has_sla, identify
from nri_sla.hook.values import Value

TYPE_CHECKING = False  # typing itself costs start-up time; only checkers need it
if TYPE_CHECKING:
    from typing import BinaryIO, TextIO


class Outcome(Value):
    """What the hook did; `lines` go to stderr (one line each)."""

    __slots__ = ("action", "container_id", "exit_code", "lines")

    def __init__(self, exit_code: int, action: str, lines: list[str] | None = None,
                 container_id: str = "") -> None:
        self.exit_code = exit_code
        self.action = action  # skipped | applied | verified | refused | failed
        self.lines = lines if lines is not None else []
        self.container_id = container_id


class RunState(Value):
    """Mutable facts learnt while running, needed to judge a late failure."""

    __slots__ = ("container_id", "enforcement")

    def __init__(self) -> None:
        self.enforcement: str | None = None  # hard | soft once the SLA is parsed
        self.container_id = ""


def run(opts: HookOptions, stdin: BinaryIO) -> Outcome:
    deadline = Deadline(opts.timeout)
    rs = RunState()
    try:
        with alarm(opts.timeout):
            return _run(opts, stdin, deadline, rs)
    except HookError as exc:
        return _failed(exc.exit_code, exc.line(), rs)
    except Exception as exc:  # a bug must still end as one line, never a traceback
        msg = f"nri-sla hook: internal error: {exc.__class__.__name__}: {exc}"
        return _failed(EXIT_INTERNAL, msg[:2000], rs)


def _failed(code: int, line: str, rs: RunState) -> Outcome:
    # Soft mode never blocks a container for our own trouble (timeouts, bugs, odd
    # systems); hard mode does, because then nothing proves the SLA holds.
    if code == EXIT_INTERNAL and rs.enforcement == "soft":
        return Outcome(EXIT_OK, "failed", [line.replace("nri-sla hook: ",
                                                        "nri-sla hook: warning: ", 1)],
                       rs.container_id)
    return Outcome(code, "refused" if code == 1 else "failed", [line], rs.container_id)


def _run(opts: HookOptions, stdin: BinaryIO, deadline: Deadline, rs: RunState) -> Outcome:
    state = read_state(stdin)
    rs.container_id = state.id
    deadline.check("loading config.json")
    spec = load_bundle(state.bundle)
    # config.json is the source of truth; the state's copy fills gaps (older runtimes).
    annotations = {**state.annotations, **spec.annotations}
    target = identify(state.id, annotations)
    if target.sandbox or not has_sla(annotations, target.name):
        return Outcome(EXIT_OK, "skipped", [], state.id)
    deadline.check("planning")
    # Imported only now: the SLA parser (yaml), the planner and the cgroup writers.
    from nri_sla.hook.enforce import enforce

    return enforce(opts, state, spec, annotations, target, deadline, rs)


def emit(outcome: Outcome, stderr: TextIO, log_path: str | None = None) -> None:
    for line in outcome.lines:
        stderr.write(line + "\n")
    stderr.flush()
    if log_path and outcome.lines:
        # runc shows a hook's stderr only when the hook fails; the log keeps the soft-mode
        # warnings of containers that did start.
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        try:
            with open(log_path, "a", encoding="utf-8") as fh:
                for line in outcome.lines:
                    fh.write(f"{stamp} {outcome.container_id or '-'} {line}\n")
        except OSError:
            pass


def main(opts: HookOptions, log_path: str | None = None) -> int:
    outcome = run(opts, sys.stdin.buffer)
    emit(outcome, sys.stderr, log_path or os.environ.get("NRI_SLA_HOOK_LOG"))
    return outcome.exit_code
