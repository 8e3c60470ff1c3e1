"""Every failure nri-sla raises to a caller is an SlaFailure (docs/architecture.md)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import nri_plugin
from nri_plugin.errors import (
    EXIT_INVALID,
    EXIT_UNAVAILABLE,
    KINDS,
    SlaFailure,
    Unavailable,
)
from nri_plugin.ops.event import LoggingSetupError
from nri_plugin.ops.metrics import MetricsError

# Protocol code knows no SLA; the simulated runtime, kubelet and NVML raise what the real
# ones would.
OUTSIDE_PACKAGES = ("nri_plugin.nri.", "nri_plugin.simulated.")
# `nri-sla hook --help` is no failure: parse_argv's way out to printing the help, exit 0.
# ProgrammingError is a bug, not a failure: no failure handler may take it for one
# (tests/core/test_decide.py: decide reports it as internal, with its traceback).
OUTSIDE = {"HelpRequested", "ProgrammingError"}


def exception_classes() -> list[type[BaseException]]:
    found = []
    for info in pkgutil.walk_packages(nri_plugin.__path__, "nri_plugin."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        found += [c for c in vars(module).values() if inspect.isclass(c)
                  and issubclass(c, BaseException) and c.__module__ == info.name]
    return found


def test_every_exception_class_is_under_the_root():
    classes = exception_classes()
    assert len(classes) > 30
    outside = [f"{c.__module__}.{c.__name__}" for c in classes
               if not issubclass(c, SlaFailure) and not c.__name__.startswith("_")
               and not c.__module__.startswith(OUTSIDE_PACKAGES) and c.__name__ not in OUTSIDE]
    assert outside == []
    for cls in classes:
        if issubclass(cls, SlaFailure):
            assert cls.kind in KINDS and cls.reason, cls


def test_operator_facing_failures_exit_with_their_kind():
    # nri_plugin.cli turns each into one line and its kind's exit status
    # (docs/operations.md "Start-up and exit statuses"); catching ValueError still works.
    for cls in (MetricsError, LoggingSetupError):
        assert issubclass(cls, ValueError) and cls("x").exit_status == EXIT_INVALID
    assert Unavailable("x").exit_status == EXIT_UNAVAILABLE
