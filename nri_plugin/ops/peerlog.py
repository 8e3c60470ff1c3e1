"""What HTTP peers do to their connections, as one rate-limited structured log line.

A client that resets its connection before the answer, or goes away in the middle of it,
makes the server's read or write fail (ConnectionResetError, BrokenPipeError, a timeout).
That is the peer's behaviour, not a fault of nri-sla, and anyone who can reach the port
can cause it thousands of times a second: socketserver's default reaction (a traceback
on stderr per connection) would let them flood the node's logs. `PeerErrorLog` counts
such failures and writes at most one line per `interval` (60 s) per listener, naming
how many connections failed and how (exception class names: anything but connection and
timeout errors there is a bug in nri-sla's handler, worth a report), through the
structured log.

The first failure after a quiet interval is logged at once (count 1); the ones that follow
within the interval are counted and written by the next `note` or `flush` once the
interval has passed. The servers call `flush` from their loops, so a burst that stops is
still reported within about one interval.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from time import monotonic

from nri_plugin.ops.logsetup import log_event

INTERVAL = 60.0  # seconds between two lines of one listener
_MESSAGE_CHARS = 120  # of the last error's text, which a peer may influence


class PeerErrorLog:
    """Counts failed connections of one listener; logs them at most once per interval."""

    def __init__(
        self,
        logger: logging.Logger,
        listener: str,
        *,
        interval: float = INTERVAL,
        clock: Callable[[], float] = monotonic,
    ) -> None:
        self.logger = logger
        self.listener = listener
        self.interval = interval
        self.clock = clock
        self._lock = threading.Lock()
        self._kinds: dict[str, int] = {}  # exception class name -> failures not yet logged
        self._last_error = ""
        self._logged_at: float | None = None
        self.total = 0  # every failure noted, logged or not

    def note(self, exc: BaseException) -> None:
        """One connection failed with `exc`."""
        kind = type(exc).__name__
        with self._lock:
            self.total += 1
            self._kinds[kind] = self._kinds.get(kind, 0) + 1
            self._last_error = str(exc)[:_MESSAGE_CHARS]
        self.flush()

    def flush(self) -> None:
        """Write the pending count if the interval since the last line has passed."""
        with self._lock:
            now = self.clock()
            due = self._logged_at is None or now - self._logged_at >= self.interval
            if not self._kinds or not due:
                return
            kinds, self._kinds = self._kinds, {}
            last, self._last_error = self._last_error, ""
            self._logged_at = now
        log_event(
            self.logger,
            logging.WARNING,
            "HTTP connections failed",
            listener=self.listener,
            count=sum(kinds.values()),
            errors=",".join(f"{k}:{n}" for k, n in sorted(kinds.items())),
            last_error=last,
            every_seconds=self.interval,
        )
