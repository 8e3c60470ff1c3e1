"""Every failure nri-sla raises to a caller is an SlaFailure, and its class is its
category: the kind comes from the one root it derives from (docs/architecture.md)."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import textwrap
from pathlib import Path

import nri_plugin
from nri_plugin.core.errors import NoRecordKey, RecordKeyError
from nri_plugin.enforce.errors import (
    CgroupFactsError,
    CgroupPathError,
    CgroupWriteError,
    EnforceError,
    RtBudgetError,
)
from nri_plugin.errors import (
    EXIT_INVALID,
    EXIT_UNAVAILABLE,
    INTERNAL,
    INVALID,
    KINDS,
    REFUSED,
    UNAVAILABLE,
    InternalFailure,
    InvalidInput,
    Refused,
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
# FrozenValueError is the same kind of bug: code assigning to a frozen value.
OUTSIDE = {"HelpRequested", "ProgrammingError", "FrozenValueError"}
# The one place each kind is set.
ROOTS = {
    InvalidInput: INVALID,
    Refused: REFUSED,
    InternalFailure: INTERNAL,
    Unavailable: UNAVAILABLE,
}
# Names for catching a group of failures (a layer's), never raised: they have no kind.
ABSTRACT = {SlaFailure, EnforceError}


def exception_classes() -> list[type[BaseException]]:
    found = []
    for info in pkgutil.walk_packages(nri_plugin.__path__, "nri_plugin."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        found += [
            c
            for c in vars(module).values()
            if inspect.isclass(c) and issubclass(c, BaseException) and c.__module__ == info.name
        ]
    return found


def test_every_exception_class_is_under_the_root():
    classes = exception_classes()
    assert len(classes) > 30
    outside = [
        f"{c.__module__}.{c.__name__}"
        for c in classes
        if not issubclass(c, SlaFailure)
        and not c.__name__.startswith("_")
        and not c.__module__.startswith(OUTSIDE_PACKAGES)
        and c.__name__ not in OUTSIDE
    ]
    assert outside == []


def test_each_class_takes_its_kind_from_its_one_root():
    # Old shape: CgroupFactsError (internal) and CgroupPathError (invalid) were Refused
    # subclasses that set another kind; SnapshotError an InternalFailure set to invalid.
    assert set(ROOTS.values()) == set(KINDS)
    wrong = []
    for cls in exception_classes():
        name = f"{cls.__module__}.{cls.__qualname__}"
        if "kind" in vars(cls) and cls not in ROOTS:
            wrong.append(f"{name} sets kind")
        if not issubclass(cls, SlaFailure) or cls in ABSTRACT:
            continue
        roots = [root for root in ROOTS if issubclass(cls, root)]
        if len(roots) != 1:
            wrong.append(f"{name} is under {[r.__name__ for r in roots]}")
        elif cls.kind != ROOTS[roots[0]] or not cls.reason:
            wrong.append(f"{name} is {cls.kind}, under {roots[0].__name__}")
    assert wrong == []


def test_no_failure_sets_its_kind_per_instance():
    for cls in exception_classes():
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
        except (OSError, TypeError):
            continue
        for node in ast.walk(tree):
            targets = (
                node.targets
                if isinstance(node, ast.Assign)
                else [node.target]
                if isinstance(node, (ast.AnnAssign, ast.AugAssign))
                else []
            )
            assert not any(isinstance(t, ast.Attribute) and t.attr == "kind" for t in targets), cls
            assert not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "setattr"
            ), cls


def test_the_abstract_bases_are_never_raised():
    names = {cls.__name__ for cls in ABSTRACT}
    raised = []
    for path in Path(nri_plugin.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in names
            ):
                raised.append(f"{path.name}:{node.lineno}")
    assert raised == []


def test_a_layer_base_catches_every_kind_of_its_layer():
    # `except EnforceError` (the hook, the RT room) still takes all of them, each with
    # the status its own kind gives.
    kinds = {
        cls.kind
        for cls in (CgroupFactsError, CgroupPathError, CgroupWriteError, RtBudgetError)
        if issubclass(cls, EnforceError)
    }
    assert kinds == {INTERNAL, INVALID, REFUSED}
    assert not issubclass(CgroupFactsError, Refused)


def test_a_record_key_nri_sla_cannot_trust_is_invalid_input():
    # `nri-sla run` exits 2 for it (tests/core/test_recordkey.py), as its class says.
    assert RecordKeyError("x").exit_status == NoRecordKey("x").exit_status == EXIT_INVALID


def test_operator_facing_failures_exit_with_their_kind():
    # nri_plugin.cli turns each into one line and its kind's exit status
    # (docs/operations.md "Start-up and exit statuses"); catching ValueError still works.
    for cls in (MetricsError, LoggingSetupError):
        assert issubclass(cls, ValueError) and cls("x").exit_status == EXIT_INVALID
    assert Unavailable("x").exit_status == EXIT_UNAVAILABLE


def test_the_enforce_errors_keep_their_statuses():
    # Moving each under its kind's root changed no exit status or NRI code: the hook exits
    # and the plugin answers with what the kind gives, as before.
    from nri_plugin.nri.errors import Code
    from nri_plugin.plugin.handlers import rpc_error

    want = {
        CgroupFactsError("x"): (3, Code.INTERNAL),
        CgroupPathError("/x", "y"): (2, Code.INVALID_ARGUMENT),
        CgroupWriteError("/x", "1", "busy"): (1, Code.FAILED_PRECONDITION),
        RtBudgetError("x"): (1, Code.FAILED_PRECONDITION),
    }
    for exc, (status, code) in want.items():
        assert (exc.exit_status, rpc_error(exc).code) == (status, code), type(exc)


def test_a_cpu_list_problem_keeps_the_metric_label():
    # Its problem was kept in `reason`, the decisions metric's label: free text there would
    # be a new series per wording. The problem is `detail`, as in the enforce errors.
    from nri_plugin.topology.errors import CpuListError

    exc = CpuListError("0-", "empty element")
    assert (exc.reason, exc.detail) == ("invalid", "empty element")
    assert str(exc) == "invalid CPU list '0-': empty element (expected e.g. '0-3,8-11')"


# Layers whose failures stay beside the code that raises them: a warm hook run loads those
# modules (hook.inputs and hook.values always, ops.event for its decision line), and one
# more module there is paid on every container start (docs/architecture.md).
SPREAD_ON_PURPOSE = {"nri_plugin.hook", "nri_plugin.ops"}


def test_each_layer_keeps_its_failures_in_one_module():
    modules: dict[str, set[str]] = {}
    for cls in exception_classes():
        if issubclass(cls, SlaFailure) and not cls.__module__.startswith(OUTSIDE_PACKAGES):
            layer = ".".join(cls.__module__.split(".")[:2])
            modules.setdefault(layer, set()).add(cls.__module__)
    spread = {
        layer: sorted(found)
        for layer, found in modules.items()
        if len(found) > 1 and layer not in SPREAD_ON_PURPOSE
    }
    assert spread == {}
    assert all(len(modules.get(layer, ())) > 1 for layer in SPREAD_ON_PURPOSE)
