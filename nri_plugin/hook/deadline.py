"""The hook's own time limit: it must never hang container creation.

Two guards: a monotonic deadline checked between steps (clean, names the step), and a
SIGALRM interval timer as the backstop for a step that blocks (a stuck stdin, a stuck
cgroupfs write). Both raise HookTimeout.
"""

from __future__ import annotations

import time

from nri_plugin.errors import InternalFailure

try:
    # The C module: `signal` wraps it in enums, whose import costs more start-up time
    # than the whole no-SLA path of the hook. Same functions, same constants.
    import _signal as signal
except ImportError:  # pragma: no cover - other interpreters
    import signal  # type: ignore[no-redef]

DEFAULT_TIMEOUT = 5.0  # seconds; runtimes give hooks their own (often larger) timeout


class HookTimeout(InternalFailure):
    """The hook ran past its own deadline (it never hangs the runtime)."""


class Deadline:
    def __init__(self, seconds: float) -> None:
        if not seconds > 0:
            raise ValueError("timeout must be positive")
        self.seconds = seconds
        self.end = time.monotonic() + seconds

    def check(self, step: str) -> None:
        if time.monotonic() >= self.end:
            raise HookTimeout(f"timed out after {self.seconds:g}s before {step}")


class alarm:  # lower case: used like a function, `with alarm(5): ...`
    """Raise HookTimeout in the main thread if the block runs past `seconds`.

    A class rather than @contextmanager: contextlib is one more import per container.
    """

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.previous: object = None

    def _fire(self, signum: int, frame: object) -> None:
        raise HookTimeout(f"timed out after {self.seconds:g}s (blocked in a step)")

    def __enter__(self) -> alarm:
        self.previous = signal.signal(signal.SIGALRM, self._fire)
        signal.setitimer(signal.ITIMER_REAL, self.seconds)
        return self

    def __exit__(self, *exc: object) -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, self.previous)
