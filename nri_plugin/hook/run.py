"""The hook's flow: state -> config.json -> who the container is -> one Run -> its actions,
cached (warm.py) or the core's (cold.py) -> carried out in cgroupfs and read back.

Everything before "there is an SLA for this container" uses only the standard library,
so containers without an SLA (and pod sandboxes) cost a JSON parse and nothing more.
"""

import posix  # not os: posixfs.py says why
import sys
import time

from nri_plugin.errors import (
    EXIT_OK,
    EXIT_STATUS,
    INTERNAL,
    REFUSED,
    SlaFailure,
    one_line,
)
from nri_plugin.hook.inputs import has_sla, identify, load_bundle, read_state
from nri_plugin.hook.options import HELP, HelpRequested, HookOptions, parse_argv
from nri_plugin.hook.values import (
    PREFIX,
    WARN,
    Deadline,
    HookTimeout,
    LoggedDecision,
    Outcome,
    Progress,
    Run,
)
from nri_plugin.posixfs import abspath, dirname, getenv, isdir, isfile, join

try:
    # The C module: `signal` wraps it in enums, whose import costs more start-up time
    # than the whole no-SLA path of the hook. Same functions, same constants.
    import _signal as signal  # type: ignore[import-not-found]  # typeshed has no _signal
except ImportError:  # pragma: no cover - other interpreters
    import signal

TYPE_CHECKING = False  # typing itself costs start-up time; only checkers need it
if TYPE_CHECKING:
    from typing import BinaryIO, TextIO


def run(opts: HookOptions, stdin: "BinaryIO") -> Outcome:
    deadline = Deadline(opts.timeout)
    progress = Progress()
    try:
        with alarm(opts.timeout):
            return _run(opts, stdin, deadline, progress)
    except SlaFailure as exc:
        return _failed(exc.kind, f"{PREFIX}{exc}", progress)
    except Exception as exc:  # a bug must still end as one line, never a traceback
        msg = f"{PREFIX}internal error: {exc.__class__.__name__}: {exc}"
        return _failed(INTERNAL, msg[:2000], progress)


class alarm:  # lower case: used like a function, `with alarm(5): ...`
    """Raise HookTimeout in the main thread if the block runs past `seconds`: the backstop
    for a step that blocks (a stuck stdin, a stuck cgroupfs write), where the Deadline
    checked between steps cannot help. A class rather than @contextmanager: contextlib is
    one more import per container."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.previous: object = None

    def _fire(self, signum: int, frame: object) -> None:
        raise HookTimeout(f"timed out after {self.seconds:g}s (blocked in a step)")

    def __enter__(self) -> "alarm":
        self.previous = signal.signal(signal.SIGALRM, self._fire)
        signal.setitimer(signal.ITIMER_REAL, self.seconds)
        return self

    def __exit__(self, *exc: object) -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, self.previous)


def _failed(kind: str, line: str, progress: Progress) -> Outcome:
    # Soft mode never blocks a container for our own trouble (timeouts, bugs, odd
    # systems); hard mode does, because then nothing proves the SLA holds.
    if kind == INTERNAL and progress.enforcement == "soft":
        warning = WARN + line.removeprefix(PREFIX)
        decision = (
            LoggedDecision("warned", progress.target, progress.log_format, warnings=[warning])
            if progress.target
            else None
        )
        return Outcome(EXIT_OK, "failed", [warning], progress.container_id, decision)
    # Once the container is known to carry an SLA, every failure refuses it: log that.
    decision = (
        LoggedDecision("refused", progress.target, progress.log_format, error=line)
        if progress.target
        else None
    )
    return Outcome(
        EXIT_STATUS[kind],
        "refused" if kind == REFUSED else "failed",
        [line],
        progress.container_id,
        decision,
    )


def _run(opts: HookOptions, stdin: "BinaryIO", deadline: Deadline, progress: Progress) -> Outcome:
    state = read_state(stdin)
    progress.container_id = state.id
    deadline.check("loading config.json")
    spec = load_bundle(state.bundle)
    # config.json is the source of truth; the state's copy fills gaps (older runtimes).
    annotations = {**state.annotations, **spec.annotations}
    target = identify(state.id, annotations)
    if target.sandbox or not has_sla(annotations, target.name):
        return Outcome(EXIT_OK, "skipped", [], state.id)
    progress.target = target
    run = Run(opts, state, spec, annotations, target, deadline, progress)
    # Two paths to the same actions. Warm: a replica of a container seen before gets its
    # cached decision (no yaml, parser or planner). Imported only now: containers without
    # an SLA never load the cache or the writer.
    from nri_plugin.hook.warm import cached_actions

    found = cached_actions(run)
    if found is None:
        deadline.check("planning")
        # Cold: the core decides (SLA parser with yaml, the planner, node detection).
        from nri_plugin.hook.cold import core_actions

        found = core_actions(run)
        if found is None:  # the node config's prefix finds no SLA after all
            return Outcome(EXIT_OK, "skipped", [], state.id)
    from nri_plugin.hook.actions import carry_out

    actions, cgroup = found
    return carry_out(actions, cgroup, run)


def emit(outcome: Outcome, stderr: "TextIO", log_path: str | None = None) -> None:
    outcome.lines = [one_line(line) for line in outcome.lines]
    for line in outcome.lines:
        stderr.write(line + "\n")
    stderr.flush()
    if not log_path or not (outcome.lines or outcome.decision):
        return
    # runc shows a hook's stderr only when the hook fails; the log keeps the soft-mode
    # warnings of containers that did start, and one decision line per SLA container.
    try:
        with open(log_path, "a", encoding="utf-8") as fh:
            if outcome.decision is not None:
                _log_decision(outcome.decision, fh)
            else:
                stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
                for line in outcome.lines:
                    fh.write(f"{stamp} {outcome.container_id or '-'} {line}\n")
    except (OSError, ValueError):
        pass


def _bare(line: str) -> str:
    """A stderr line without its "nri-sla hook: [warning: ]" prefix (the log says path)."""
    for prefix in (WARN, PREFIX):
        if line.startswith(prefix):
            return line[len(prefix) :]
    return line


def _log_decision(d: LoggedDecision, stream: "TextIO") -> None:
    """The plugin's decision line (docs/operations.md), with path "hook"."""
    from nri_plugin.ops.event import DecisionEvent, journald_fd, render_event

    t = d.target
    try:
        journal = d.log_format == "text" and journald_fd(stream.fileno())
    except (AttributeError, OSError, ValueError):  # not a real file (tests)
        journal = False
    event = DecisionEvent(
        t.namespace,
        t.pod or t.id,
        t.name,
        "hook",
        d.outcome,
        d.applied,
        [_bare(w) for w in d.warnings],
        _bare(d.error) if d.error else None,
    )
    stream.write(render_event(event, d.log_format, time.time(), journal) + "\n")
    stream.flush()


def main(argv: list[str] | None = None, log_path: str | None = None) -> int:
    """`nri-sla hook [options]`: the OCI state on stdin; the exit status (docs/hook.md)."""
    try:
        opts = parse_argv(sys.argv[1:] if argv is None else argv)
    except HelpRequested:
        sys.stdout.write(HELP)
        return 0
    except SlaFailure as exc:
        sys.stderr.write(f"{PREFIX}{exc}\n")
        return exc.exit_status
    outcome = run(opts, sys.stdin.buffer)
    emit(outcome, sys.stderr, log_path or getenv("NRI_SLA_HOOK_LOG"))
    return outcome.exit_code


def exit_from_file(as_file: bool) -> None:
    """__main__.py's end: main()'s status, without the interpreter's teardown.

    Run as a file (`python3 -I -S .../__main__.py`), no site ran: put the interpreter's
    own site-packages on sys.path for the dependencies (yaml, cgroupspy). Everything the
    hook writes is flushed or closed when main returns (stderr, the decision log, the cache
    files), so the teardown of every module it loaded, which costs a cached run more than
    its own cgroup writes, is skipped."""
    if as_file:
        add_site_packages()
    status = main()
    sys.stdout.flush()
    sys.stderr.flush()
    posix._exit(status)


def add_site_packages() -> None:
    """What site does for a venv (pyvenv.cfg next to bin/) or Debian's interpreter."""
    version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    venv = dirname(dirname(abspath(sys.executable)))
    if isfile(join(venv, "pyvenv.cfg")):
        candidates = [join(venv, "lib", version, "site-packages")]
    else:
        candidates = [join(sys.prefix, "lib", version, "site-packages")]
        if sys.prefix == "/usr":  # Debian's own interpreter: its dist-packages directories
            candidates += [
                f"/usr/local/lib/{version}/dist-packages",
                "/usr/lib/python3/dist-packages",
            ]
    for candidate in candidates:
        if candidate not in sys.path and isdir(candidate):
            sys.path.append(candidate)
