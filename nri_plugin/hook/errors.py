"""Typed hook failures and the exit codes the runtime sees.

runc refuses a container when a createRuntime/prestart/poststart hook exits non-zero and
prints the hook's stderr in its own error, so each failure renders as ONE line.
"""

from __future__ import annotations

# Exit codes (documented in docs/hook.md).
EXIT_OK = 0  # applied (or nothing to do); soft-mode warnings may be on stderr
EXIT_REFUSED = 1  # hard mode: the SLA cannot be honoured exactly; the container must not run
EXIT_USAGE = 2  # bad command line or bad input from the runtime (state, bundle, cgroupsPath)
EXIT_INTERNAL = 3  # a bug or an unexpected system error (hard mode; soft mode warns, exits 0)


class HookError(Exception):
    """A failure that ends the hook with `exit_code` and one stderr line."""

    exit_code = EXIT_INTERNAL

    def line(self) -> str:
        return f"nri-sla hook: {self}"


class BadInput(HookError):
    """The runtime handed us something unusable: state JSON, bundle, config.json, paths."""

    exit_code = EXIT_USAGE


class SlaRefusedError(HookError):
    """Hard mode: a setting cannot be applied or read back as requested."""

    exit_code = EXIT_REFUSED


class HookTimeout(HookError):
    """The hook ran past its own deadline (it never hangs the runtime)."""

    exit_code = EXIT_INTERNAL


class InternalError(HookError):
    exit_code = EXIT_INTERNAL
