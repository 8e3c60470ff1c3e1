"""The decision event (nri_plugin.ops.event): one value, one renderer for both front-ends.

The hook renders it for NRI_SLA_HOOK_LOG, the plugin through nri_plugin.ops.logsetup; these
tests check what the renderer produces and that the plugin's logging path (handler,
record time, level names, journald detection) wires it up to the same line.
"""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path
from types import MappingProxyType

import pytest

from nri_plugin.ops.event import (
    LOGGER,
    MESSAGE,
    DecisionEvent,
    LoggingSetupError,
    applied_fields,
    flatten,
    json_line,
    logfmt_value,
    render_event,
    text_line,
)
from nri_plugin.ops.logsetup import log_decision, setup_logging

CREATED = 1_795_000_000.25
APPLIED = {
    "cpu_quota": 50000,
    "cpus": "0-3",
    "io_max": [{"device": "/dev/vda"}],
    "nested": {"a": None, "b": True},
}
WARNINGS = ['sla.nri.io/pod: cpu.rt-runtime: "no", budget', "two\nlines\x1b"]


def test_text_line_fields_and_escapes():
    line = render_event(
        DecisionEvent("prod", "web-0", "app", "hook", "warned", APPLIED, WARNINGS), "text", CREATED
    )
    assert line.startswith("ts=2026-11-18T11:06:40.250Z ")
    assert (
        ' level=warning logger=nri_sla.decision msg="sla decision" pod=prod/web-0'
        " container=app path=hook outcome=warned applied.cpu_quota=50000 "
        "applied.cpus=0-3 "
    ) in line
    assert ' applied.nested.a="" applied.nested.b=true ' in line
    # One line whatever the warnings hold: newline, ESC and quotes are escaped.
    assert "\n" not in line and "\x1b" not in line
    assert 'warnings="sla.nri.io/pod: cpu.rt-runtime: \\"no\\", budget; two\\nlines\\u001b"' in line
    assert "error=" not in line


def test_json_line_keeps_structure():
    line = render_event(
        DecisionEvent(
            "ml", "train-0", "trainer", "hook", "refused", {}, [], "memory.high: too big"
        ),
        "json",
        CREATED,
    )
    obj = json.loads(line)
    assert obj == {
        "ts": "2026-11-18T11:06:40.250Z",
        "level": "error",
        "logger": "nri_sla.decision",
        "msg": "sla decision",
        "pod": "ml/train-0",
        "container": "trainer",
        "path": "hook",
        "outcome": "refused",
        "applied": {},
        "warnings": [],
        "error": "memory.high: too big",
    }


@pytest.mark.parametrize(
    ("path", "outcome", "needle"),
    [
        ("oci", "enforced", "decision path 'oci' is not one of nri, hook"),
        ("hook", "ok", "decision outcome 'ok' is not one of enforced, refused, warned"),
    ],
)
def test_bad_path_or_outcome_is_a_typed_error(path, outcome, needle):
    with pytest.raises(LoggingSetupError, match=needle):
        DecisionEvent("ns", "p", "c", path, outcome)


def _plugin_line(
    tmp_path: Path,
    fmt: str,
    outcome: str,
    error: str | None,
    monkeypatch: pytest.MonkeyPatch,
    journal: bool = False,
) -> str:
    path = tmp_path / f"{fmt}-{outcome}.log"
    path.write_text("")
    if journal:
        st_ = os.stat(path)
        monkeypatch.setenv("JOURNAL_STREAM", f"{st_.st_dev}:{st_.st_ino}")
    with monkeypatch.context() as mp:
        mp.setattr(time, "time", lambda: CREATED)  # the log record's creation time
        with open(path, "a", encoding="utf-8") as fh:
            logger = setup_logging(fmt, "info", stream=fh)
            log_decision(
                DecisionEvent("prod", "web-0", "app", "hook", outcome, APPLIED, WARNINGS, error)
            )
            for handler in logger.handlers:
                handler.flush()
    return path.read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("fmt", "outcome", "error", "journal"),
    [
        ("text", "enforced", None, False),
        ("text", "refused", "no", False),
        ("json", "warned", None, False),
        ("text", "warned", None, True),
    ],
)
def test_hook_line_is_the_plugins_line(tmp_path, monkeypatch, fmt, outcome, error, journal):
    """The plugin logs through `logging`; the hook renders directly: same bytes."""
    monkeypatch.delenv("JOURNAL_STREAM", raising=False)
    shared = _plugin_line(tmp_path, fmt, outcome, error, monkeypatch, journal)
    mine = render_event(
        DecisionEvent("prod", "web-0", "app", "hook", outcome, APPLIED, WARNINGS, error),
        fmt,
        CREATED,
        journal=journal,
    )
    assert mine + "\n" == shared
    if journal:
        assert shared.startswith("<4>level=warning ")


def test_text_rendering_imports_no_logging_typing_or_json():
    """The hook renders a text line on every cached run: it must stay import-lean."""
    code = (
        "import sys; import nri_plugin.ops.event as e; "
        "e.render_event(e.DecisionEvent('n', 'p', 'c', 'hook', 'warned', {'a': {'b': 1}}, "
        "['w']), 'text', 0.0); e.journald_fd(2); print(' '.join(sorted(sys.modules)))"
    )
    root = str(Path(__file__).resolve().parents[2])
    out = subprocess.run(
        [sys.executable, "-I", "-S", "-c", f"import sys; sys.path.insert(0, {root!r}); {code}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert "nri_plugin.ops.event" in out
    for heavy in (
        "logging",
        "typing",
        "json",
        "collections",
        "re",
        "dataclasses",
        "pathlib",
        "importlib",
        "nri_plugin.core.decision",
        "nri_plugin.core.nodestate",
        "os",
        "_collections_abc",
    ):
        assert heavy not in out, heavy


def test_other_mappings_and_sequences_render_as_dicts_and_lists_do():
    # Told by collections.abc's ABCs, imported at first need (not by the hook's values).
    assert logfmt_value(MappingProxyType({"a": 1, "b": "x"})) == logfmt_value({"a": 1, "b": "x"})
    assert logfmt_value(range(3)) == logfmt_value([0, 1, 2]) == '"0; 1; 2"'
    assert logfmt_value(1.5) == "1.5"
    pairs: list = []
    flatten("applied", MappingProxyType({"cpu": MappingProxyType({"quota": 1})}), pairs)
    assert pairs == ["applied.cpu.quota=1"]


def test_applied_fields_are_the_records_without_its_framing():
    """Both front-ends fill `applied` with this: the record minus version and path, keys
    sorted, whichever path wrote it."""
    record = {"v": 2, "path": "nri", "enforcement": "hard", "cgroup_version": 2, "cpu_quota": 1}
    assert applied_fields(record) == {"cgroup_version": 2, "cpu_quota": 1, "enforcement": "hard"}
    assert list(applied_fields({**record, "path": "hook"})) == [
        "cgroup_version",
        "cpu_quota",
        "enforcement",
    ]


EVENTS = [
    DecisionEvent("prod", "web-0", "app", "nri", "enforced", APPLIED),
    DecisionEvent("prod", "web-0", "app", "hook", "warned", APPLIED, WARNINGS),
    DecisionEvent("ml", "t", "c", "nri", "refused", {}, (), 'bad "x"\n=y'),
    DecisionEvent("n s", "p\x1b", 'c"x', "nri", "warned", {"k": "a b\nc", "e": []}, ["1", "2=2"]),
]


@pytest.mark.parametrize("event", EVENTS)
@pytest.mark.parametrize("journal", [False, True])
def test_render_event_is_text_line_of_its_fields(event, journal):
    """render_event keeps parts that repeat (the head, a plan's applied text): the bytes
    stay those of the generic renderer the formatters use for every other line."""
    for _ in range(2):  # the second time from the remembered applied text
        assert render_event(event, "text", CREATED, journal) == text_line(
            CREATED, event.level, LOGGER, MESSAGE, event.fields(), journal=journal
        )
    assert render_event(event, "json", CREATED) == json_line(
        CREATED, event.level, LOGGER, MESSAGE, event.fields()
    )


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_log_decision_writes_the_same_bytes_through_logging(tmp_path, monkeypatch, fmt):
    """log_decision writes straight to setup_logging's handlers; with anything else in
    the way (here a filter) the line goes through `logging`: the same bytes either way."""
    monkeypatch.delenv("JOURNAL_STREAM", raising=False)
    monkeypatch.setattr(time, "time", lambda: CREATED)
    lines = []
    for through_logging in (False, True):
        out = io.StringIO()
        logger = setup_logging(fmt, "info", stream=out)
        allow = logging.Filter()  # lets every record through, but is a filter
        if through_logging:
            logger.addFilter(allow)
        try:
            for event in EVENTS:
                log_decision(event)
        finally:
            logger.removeFilter(allow)
        lines.append(out.getvalue())
    assert lines[0] == lines[1] and lines[0].count("\n") == len(EVENTS)
