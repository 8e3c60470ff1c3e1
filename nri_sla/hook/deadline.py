"""The hook's own time limit: it must never hang container creation.

Two guards: a monotonic deadline checked between steps (clean, names the step), and a
SIGALRM interval timer as the backstop for a step that blocks (a stuck stdin, a stuck
cgroupfs write). Both raise HookTimeout.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager

from nri_sla.hook.errors import HookTimeout

DEFAULT_TIMEOUT = 5.0  # seconds; runtimes give hooks their own (often larger) timeout


class Deadline:
    def __init__(self, seconds: float) -> None:
        if not seconds > 0:
            raise ValueError("timeout must be positive")
        self.seconds = seconds
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        return self.end - time.monotonic()

    def check(self, step: str) -> None:
        if time.monotonic() >= self.end:
            raise HookTimeout(f"timed out after {self.seconds:g}s before {step}")


@contextmanager
def alarm(seconds: float) -> Iterator[None]:
    """Raise HookTimeout in the main thread if the block runs past `seconds`."""

    def _fire(signum: int, frame: object) -> None:
        raise HookTimeout(f"timed out after {seconds:g}s (blocked in a step)")

    previous = signal.signal(signal.SIGALRM, _fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
