"""The hook as one run: one frozen Run value, two paths (warm, cold) side by side."""

from __future__ import annotations

import subprocess
import sys

import pytest

from nri_plugin.errors import DamagedState, ProgrammingError
from nri_plugin.granted import GrantedResources
from nri_plugin.hook.actions import CgroupActions
from nri_plugin.hook.inputs import BundleSpec, OciState, identify
from nri_plugin.hook.options import HookOptions
from nri_plugin.hook.values import Deadline, Progress, Run


def _run() -> Run:
    annotations = {
        "io.kubernetes.cri.container-type": "container",
        "io.kubernetes.cri.container-name": "app",
    }
    state = OciState("c1", "creating", "/b", 42, {})
    spec = BundleSpec(annotations, "/kubepods/c1", GrantedResources())
    return Run(
        HookOptions(),
        state,
        spec,
        annotations,
        identify("c1", annotations),
        Deadline(5),
        Progress(),
    )


def test_a_run_is_frozen():
    run = _run()
    with pytest.raises(AttributeError, match="frozen"):
        run.target = None
    with pytest.raises(AttributeError, match="frozen"):
        del run.spec
    assert run.target.name == "app" and run.oci.pid == 42
    run.progress.log_format = "json"  # what the run learns is its progress, not the run
    assert run.progress.log_format == "json"


@pytest.mark.parametrize(("path", "other"), [("warm", "cold"), ("cold", "warm")])
def test_the_two_paths_never_load_each_other(path, other):
    code = f"import sys, nri_plugin.hook.{path}; print('nri_plugin.hook.{other}' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-I", "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("seconds", [0, -1.5])
def test_a_deadline_needs_time(seconds):
    # parse_argv refuses such a --timeout as input; a Deadline given one is a bug
    with pytest.raises(ProgrammingError, match="timeout must be positive"):
        Deadline(seconds)


_STORED = {
    "kind": "apply",
    "enforcement": "hard",
    "writes": [["cpu", "cpu.max", "max"]],
    "rt": None,
    "lines": [],
    "applied": {},
    "source": "sla.nri.io/pod",
    "key": "sla.nri.io/pod",
}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"kind": "enforce"}, "bad decision kind or enforcement"),
        ({"enforcement": "strict"}, "bad decision kind or enforcement"),
        ({"writes": [["cpu", "cpu.max"]]}, "bad write"),
        ({"writes": [["cpu", "cpu.max", 5]]}, "bad write"),
        ({"rt": [950_000]}, "bad rt"),
        ({"rt": [950_000, "1s"]}, "bad rt"),
        ({"lines": "one"}, "bad lines, applied, source or key"),
        ({"applied": []}, "bad lines, applied, source or key"),
        ({"key": None}, "bad lines, applied, source or key"),
    ],
)
def test_a_damaged_cached_decision_is_a_typed_miss(change, message):
    actions = CgroupActions.from_json(_STORED)
    assert CgroupActions.from_json(actions.to_json()).to_json() == _STORED
    with pytest.raises(DamagedState, match=message):
        CgroupActions.from_json({**_STORED, **change})
