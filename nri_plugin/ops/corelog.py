"""The log lines of the modules an OCI hook's cold run loads, without importing `logging`.

The core, the planner's placement and RT budget, and the GPU inventory log through a
`CoreLogger` instead of a `logging.Logger`: it has the same methods and hands every record
to `logging.getLogger(name)`, importing `logging` at the first line logged. The plugin sets
the `nri_sla` logger tree up (`ops.logsetup`) and sees every line as before.

Why: the OCI hook never logs through `logging` (its stderr is the one line runc shows),
yet importing `logging` cost every cold run ~16 M instructions (~4% of it, docs/hook.md
"Start-up cost"), only to install a NullHandler so that these lines
could not reach Python's last-resort handler (stderr). The hook runs the core `with silenced()`
instead: the lines are dropped without `logging` being imported.
"""

from __future__ import annotations

_silenced = False


class silenced:
    """Within it, every CoreLogger line is dropped (the OCI hook's cold run: its stderr is
    runc's). A class rather than contextlib.contextmanager: contextlib costs an import."""

    def __enter__(self) -> None:
        global _silenced
        self.before, _silenced = _silenced, True

    def __exit__(self, *exc: object) -> None:
        global _silenced
        _silenced = self.before


class CoreLogger:
    """A `logging.getLogger(name)` that imports `logging` only when a line is logged."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def _log(self, level: str, msg: str, args: tuple[object, ...], exc_info: bool) -> None:
        if _silenced:
            return
        import logging

        getattr(logging.getLogger(self.name), level)(msg, *args, exc_info=exc_info, stacklevel=3)

    def debug(self, msg: str, *args: object, exc_info: bool = False) -> None:
        self._log("debug", msg, args, exc_info)

    def info(self, msg: str, *args: object, exc_info: bool = False) -> None:
        self._log("info", msg, args, exc_info)

    def warning(self, msg: str, *args: object, exc_info: bool = False) -> None:
        self._log("warning", msg, args, exc_info)

    def error(self, msg: str, *args: object, exc_info: bool = False) -> None:
        self._log("error", msg, args, exc_info)
