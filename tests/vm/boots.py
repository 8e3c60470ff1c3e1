"""Guest boots run at the same time, each in a thread of its own (tests/vm/conftest.py):
a guest's outer tests wait for that guest only, and get its run or whatever its boot
raised (pytest's skip and fail included) as if the boot had run in the waiting test.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


class GuestBoots:
    """`boots`: name -> a function that boots that guest and returns its run. The names in
    `start` start at once; any other starts when first waited for. `cancel` is the event
    the boots watch (harness.run_in_guest kills its guest when it is set)."""

    def __init__(
        self, boots: dict[str, Callable[[], Any]], start: list[str], cancel: threading.Event
    ) -> None:
        self._boots = boots
        self._cancel = cancel
        self._threads: dict[str, threading.Thread] = {}
        self._runs: dict[str, Any] = {}
        self._raised: dict[str, BaseException] = {}
        for name in start:
            self._start(name)

    def _start(self, name: str) -> None:
        thread = threading.Thread(target=self._boot, args=(name,), daemon=True, name=f"boot {name}")
        self._threads[name] = thread
        thread.start()

    def _boot(self, name: str) -> None:
        try:
            self._runs[name] = self._boots[name]()
        except BaseException as exc:  # pytest's skip and fail are BaseExceptions too
            self._raised[name] = exc

    def wait(self, name: str) -> Any:
        """The guest's run; what its boot raised is raised here, in the waiting test."""
        if name not in self._threads:  # wanted by a test the selection did not show
            self._start(name)
        self._threads[name].join()
        if name in self._raised:
            raise self._raised[name]
        return self._runs[name]

    def stop(self, grace: float = 30) -> None:
        """Kill the guests still running (the session is over); wait up to `grace` seconds
        for each boot's thread (a boot still building its inputs ends later, unwaited)."""
        self._cancel.set()
        for thread in self._threads.values():
            thread.join(timeout=grace)
