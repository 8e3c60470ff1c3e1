"""The decision line the hook writes to NRI_SLA_HOOK_LOG (nri_plugin.decision_line).

One renderer serves the hook and nri_plugin.ops.logsetup; these tests check what the hook's call
produces and that the plugin's logging path (handler, record time, level names, journald
detection) wires it up to the same line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nri_plugin.decision_line import LoggingSetupError, decision_line
from nri_plugin.ops.logsetup import log_decision, setup_logging

CREATED = 1_795_000_000.25
APPLIED = {"cpu_quota": 50000, "cpus": "0-3", "io_max": [{"device": "/dev/vda"}],
           "nested": {"a": None, "b": True}}
WARNINGS = ['sla.nri.io/pod: cpu.rt-runtime: "no", budget', "two\nlines\x1b"]


def test_text_line_fields_and_escapes():
    line = decision_line("text", "prod", "web-0", "app", "hook", "warned", APPLIED,
                         WARNINGS, None, CREATED)
    assert line.startswith("ts=2026-11-18T11:06:40.250Z ")
    assert (" level=warning logger=nri_sla.decision msg=\"sla decision\" pod=prod/web-0"
            " container=app path=hook outcome=warned applied.cpu_quota=50000 "
            "applied.cpus=0-3 ") in line
    assert " applied.nested.a=\"\" applied.nested.b=true " in line
    # One line whatever the warnings hold: newline, ESC and quotes are escaped.
    assert "\n" not in line and "\x1b" not in line
    assert ('warnings="sla.nri.io/pod: cpu.rt-runtime: \\"no\\", budget; two\\nlines\\u001b"'
            in line)
    assert "error=" not in line


def test_json_line_keeps_structure():
    line = decision_line("json", "ml", "train-0", "trainer", "hook", "refused", {}, [],
                         "memory.high: too big", CREATED)
    obj = json.loads(line)
    assert obj == {"ts": "2026-11-18T11:06:40.250Z", "level": "error",
                   "logger": "nri_sla.decision", "msg": "sla decision", "pod": "ml/train-0",
                   "container": "trainer", "path": "hook", "outcome": "refused",
                   "applied": {}, "warnings": [], "error": "memory.high: too big"}


@pytest.mark.parametrize(("path", "outcome", "needle"), [
    ("oci", "enforced", "decision path 'oci' is not one of nri, hook"),
    ("hook", "ok", "decision outcome 'ok' is not one of enforced, refused, warned"),
])
def test_bad_path_or_outcome_is_a_typed_error(path, outcome, needle):
    with pytest.raises(LoggingSetupError, match=needle):
        decision_line("text", "ns", "p", "c", path, outcome, {}, [], None, CREATED)


def _plugin_line(tmp_path: Path, fmt: str, outcome: str, error: str | None,
                 monkeypatch: pytest.MonkeyPatch, journal: bool = False) -> str:
    path = tmp_path / f"{fmt}-{outcome}.log"
    path.write_text("")
    if journal:
        st_ = os.stat(path)
        monkeypatch.setenv("JOURNAL_STREAM", f"{st_.st_dev}:{st_.st_ino}")
    with monkeypatch.context() as mp:
        mp.setattr(time, "time", lambda: CREATED)  # the log record's creation time
        with open(path, "a", encoding="utf-8") as fh:
            logger = setup_logging(fmt, "info", stream=fh)
            log_decision("prod", "web-0", "app", "hook", outcome, applied=APPLIED,
                         warnings=WARNINGS, error=error)
            for handler in logger.handlers:
                handler.flush()
    return path.read_text(encoding="utf-8")


@pytest.mark.parametrize(("fmt", "outcome", "error", "journal"), [
    ("text", "enforced", None, False), ("text", "refused", "no", False),
    ("json", "warned", None, False), ("text", "warned", None, True),
])
def test_hook_line_is_the_plugins_line(tmp_path, monkeypatch, fmt, outcome, error, journal):
    """The plugin logs through `logging`; the hook renders directly: same bytes."""
    monkeypatch.delenv("JOURNAL_STREAM", raising=False)
    shared = _plugin_line(tmp_path, fmt, outcome, error, monkeypatch, journal)
    mine = decision_line(fmt, "prod", "web-0", "app", "hook", outcome, APPLIED, WARNINGS,
                         error, CREATED, journal=journal)
    assert mine + "\n" == shared
    if journal:
        assert shared.startswith("<4>level=warning ")


def test_text_rendering_imports_no_logging_typing_or_json():
    """The hook renders a text line on every cached run: it must stay import-lean."""
    code = ("import sys; import nri_plugin.decision_line as d; "
            "d.decision_line('text', 'n', 'p', 'c', 'hook', 'warned', {'a': {'b': 1}}, "
            "['w'], None, 0.0); print(' '.join(sorted(sys.modules)))")
    root = str(Path(__file__).resolve().parents[2])
    out = subprocess.run([sys.executable, "-I", "-S", "-c",
                          f"import sys; sys.path.insert(0, {root!r}); {code}"],
                         capture_output=True, text=True, check=True).stdout.split()
    assert "nri_plugin.decision_line" in out
    for heavy in ("logging", "typing", "json", "collections", "re", "dataclasses",
                  "pathlib"):
        assert heavy not in out, heavy
