"""nri_plugin.ops.logsetup: one structured line per decision, text (logfmt) or JSON."""

import asyncio
import io
import json
import logging
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nri_plugin.ops.event import DecisionEvent
from nri_plugin.ops.logsetup import (
    LOGGER_NAME,
    LoggingSetupError,
    journald_stream,
    log_decision,
    log_event,
    logfmt_value,
    setup_logging,
)

# The shape of a real `applied` (a record's fields: see test_plugin_decision_line).
APPLIED = {
    "enforcement": "soft",
    "cgroup_version": 1,
    "cpu_quota": 250000,
    "cpu_period": 100000,
    "cpus": "0-3",
    "mems": "0",
}
WARN = (
    "sla.nri.io/container.app: memory.high: not available on cgroup v1 nodes (allowed "
    "only on cgroup v2, soft mode writes memory.soft_limit_in_bytes instead)"
)
REPO = Path(__file__).resolve().parents[2]


_UNESCAPE = {"\\": "\\", '"': '"', "n": "\n", "r": "\r", "t": "\t"}


def _logfmt(line: str) -> dict[str, str]:
    """Parse a logfmt line back: key=bare or key="quoted with \\ escapes"."""
    out: dict[str, str] = {}
    i = 0
    while i < len(line):
        eq = line.index("=", i)
        key = line[i:eq]
        assert key and " " not in key and '"' not in key, line
        i = eq + 1
        if line[i : i + 1] == '"':
            i += 1
            chars = []
            while line[i] != '"':
                if line[i] == "\\":
                    code = line[i + 1]
                    if code in "uU":
                        width = 4 if code == "u" else 8
                        chars.append(chr(int(line[i + 2 : i + 2 + width], 16)))
                        i += 2 + width
                        continue
                    chars.append(_UNESCAPE[code])
                    i += 2
                else:
                    chars.append(line[i])
                    i += 1
            value, i = "".join(chars), i + 1
        else:
            end = line.find(" ", i)
            end = len(line) if end < 0 else end
            value, i = line[i:end], end
        out[key] = value
        assert line[i : i + 1] in ("", " "), line
        i += 1
    return out


def test_text_decision_line(monkeypatch):
    monkeypatch.delenv("JOURNAL_STREAM", raising=False)
    out = io.StringIO()
    setup_logging("text", "info", stream=out)
    log_decision(DecisionEvent("default", "web", "app", "nri", "warned", APPLIED, [WARN]))
    lines = out.getvalue().splitlines()
    assert len(lines) == 1
    kv = _logfmt(lines[0])
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", kv["ts"])
    assert kv["level"] == "warning" and kv["msg"] == "sla decision"
    assert kv["pod"] == "default/web" and kv["container"] == "app"
    assert kv["path"] == "nri" and kv["outcome"] == "warned"
    assert kv["applied.cpu_quota"] == "250000" and kv["applied.cpus"] == "0-3"
    assert kv["warnings"] == WARN
    assert "error" not in kv


def test_plugin_decision_line():
    """The line the plugin itself writes for a decision (the demo's simulated runtime
    drives the real plugin; its --verbose log is `run`'s): the record's fields flattened,
    the placement record's nested ones with dotted keys, no version, path or MAC."""
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "nri_plugin.cli",
            "demo",
            "--verbose",
            "examples/pods/10-inference.yaml",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert out.returncode == 0, out.stderr
    [line] = [line for line in out.stderr.splitlines() if 'msg="sla decision"' in line]
    kv = _logfmt(line)
    assert (kv["level"], kv["pod"], kv["container"], kv["outcome"]) == (
        "info",
        "ml/inference",
        "server",
        "enforced",
    )
    assert kv["applied.cpu_quota"] == "400000" and kv["applied.cgroup_version"] == "2"
    assert kv["applied.memory_policy.mode"] == "bind"
    assert kv["applied.placement_record.gpus"] == "GPU-d0000000-0000-0000-0000-000000000000"
    assert not {"applied.v", "applied.path", "applied.mac"} & kv.keys()


def test_json_decision_line():
    out = io.StringIO()
    setup_logging("json", "debug", stream=out)
    err = "sla.nri.io/container.web: memory.high (12Gi) must be below memory.max (10Gi)"
    log_decision(DecisionEvent("ml", "train-0", "trainer", "hook", "refused", {}, [], err))
    obj = json.loads(out.getvalue())
    assert obj["level"] == "error" and obj["outcome"] == "refused"
    assert obj["pod"] == "ml/train-0" and obj["path"] == "hook"
    assert obj["error"] == err and obj["applied"] == {} and obj["warnings"] == []
    assert obj["ts"].endswith("Z")


def test_level_filters_and_setup_is_idempotent():
    out = io.StringIO()
    setup_logging("text", "info", stream=out)
    setup_logging("text", "warning", stream=out)  # replaces, does not add a handler
    log_decision(DecisionEvent("a", "b", "c", "nri", "enforced", APPLIED))  # info: filtered
    log_decision(DecisionEvent("a", "b", "c", "nri", "refused", error="no GPU left"))
    assert len(out.getvalue().splitlines()) == 1
    assert "outcome=refused" in out.getvalue()


def test_deferred_decision_waits_for_the_end_of_the_loop_turn(monkeypatch):
    """`nri-sla run`'s set-up: a decision made in a loop's turn is written when the turn
    ends (after the connection has written the answer), not inside the handler."""
    monkeypatch.delenv("JOURNAL_STREAM", raising=False)
    out = io.StringIO()
    setup_logging("text", "info", stream=out, defer_decisions=True)
    seen = []

    async def turn() -> None:
        log_decision(DecisionEvent("default", "web", "app", "nri", "enforced", APPLIED))
        seen.append(out.getvalue())  # still the handler's turn
        await asyncio.sleep(0)  # the loop's next turn
        seen.append(out.getvalue())

    asyncio.run(turn())
    assert seen[0] == ""
    assert _logfmt(seen[1].rstrip("\n"))["container"] == "app"
    # Outside a loop there is no turn to wait for: written at once.
    log_decision(DecisionEvent("default", "web", "side", "nri", "enforced", APPLIED))
    assert out.getvalue().count("\n") == 2 and "container=side" in out.getvalue()


def test_deferred_decisions_keep_the_log_in_order():
    """Another line, a flush (logging.shutdown's) and a new set-up (SIGHUP) each write
    the decision lines still waiting first, to the stream they were made for."""
    first, second = io.StringIO(), io.StringIO()
    setup_logging("text", "info", stream=first, defer_decisions=True)
    plugin_log = logging.getLogger(f"{LOGGER_NAME}.plugin")

    async def turn() -> None:
        log_decision(DecisionEvent("a", "b", "one", "nri", "enforced", APPLIED))
        log_event(plugin_log, logging.INFO, "after one")
        log_decision(DecisionEvent("a", "b", "two", "nri", "enforced", APPLIED))
        logging.getLogger(LOGGER_NAME).handlers[0].flush()
        log_decision(DecisionEvent("a", "b", "three", "nri", "enforced", APPLIED))
        setup_logging("text", "info", stream=second, defer_decisions=True)
        log_decision(DecisionEvent("a", "b", "four", "nri", "refused", error="no"))
        assert second.getvalue() == ""

    asyncio.run(turn())
    lines = first.getvalue().splitlines()
    assert [_logfmt(line).get("container", _logfmt(line)["msg"]) for line in lines] == [
        "one",
        "after one",
        "two",
        "three",
    ]
    assert "container=four" in second.getvalue()


def test_a_line_from_another_thread_writes_the_waiting_decision_once():
    """A server thread's line writes the decision waiting in the loop's thread before its
    own; the loop's scheduled write then finds nothing left (no line twice, none lost)."""
    out = io.StringIO()
    setup_logging("text", "info", stream=out, defer_decisions=True)

    async def turn() -> None:
        log_decision(DecisionEvent("a", "b", "one", "nri", "enforced", APPLIED))
        thread = threading.Thread(
            target=log_event,
            args=(logging.getLogger(f"{LOGGER_NAME}.metrics"), logging.WARNING, "from a thread"),
        )
        thread.start()
        thread.join()
        await asyncio.sleep(0)

    asyncio.run(turn())
    lines = out.getvalue().splitlines()
    assert [_logfmt(line).get("container", _logfmt(line)["msg"]) for line in lines] == [
        "one",
        "from a thread",
    ]


def test_journald_mode_drops_timestamp_and_adds_priority(tmp_path, monkeypatch):
    with open(tmp_path / "journal", "w+") as stream:
        st = os.fstat(stream.fileno())
        monkeypatch.setenv("JOURNAL_STREAM", f"{st.st_dev}:{st.st_ino}")
        assert journald_stream(stream)
        setup_logging("text", "info", stream=stream)
        log_decision(DecisionEvent("default", "web", "app", "nri", "warned", APPLIED, [WARN]))
        log_event(
            logging.getLogger(f"{LOGGER_NAME}.plugin"),
            logging.INFO,
            "registered",
            runtime="containerd",
            version="2.1.4",
        )
        stream.seek(0)
        first, second = stream.read().splitlines()
    assert first.startswith("<4>level=warning ") and "ts=" not in first
    assert second.startswith("<6>level=info ") and "runtime=containerd" in second


def test_journal_stream_of_another_file_is_ignored(tmp_path, monkeypatch):
    monkeypatch.setenv("JOURNAL_STREAM", "1:2")
    out = tmp_path / "log"
    with open(out, "w") as stream:
        assert not journald_stream(stream)
        setup_logging("text", stream=stream)
        log_decision(DecisionEvent("a", "b", "c", "nri", "enforced", APPLIED))
    assert out.read_text().startswith("ts=")


def test_hostile_values_stay_on_one_line():
    out = io.StringIO()
    setup_logging("text", stream=out)
    log_decision(
        DecisionEvent("ns", "p", 'c"x', "nri", "warned", {"k": "a b\nc"}, ["one", "two=2"])
    )
    (line,) = out.getvalue().splitlines()
    kv = _logfmt(line)
    assert kv["container"] == 'c"x' and kv["applied.k"] == "a b\nc"
    assert kv["warnings"] == "one; two=2"


@pytest.mark.parametrize(
    ("value", "want"),
    [
        ("plain", "plain"),
        ("", '""'),
        (None, '""'),
        (True, "true"),
        (3, "3"),
        ("a b", '"a b"'),
        ('q"', '"q\\""'),
        (["x", "y"], '"x; y"'),
    ],
)
def test_logfmt_value(value, want):
    assert logfmt_value(value) == want


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"format": "xml"}, "text, json"),
        ({"level": "loud"}, "debug, info, warning"),
    ],
)
def test_bad_setup(kwargs, needle):
    with pytest.raises(LoggingSetupError, match=needle):
        setup_logging(stream=io.StringIO(), **kwargs)


@pytest.mark.parametrize(
    ("path", "outcome", "needle"),
    [
        ("cri", "enforced", "nri, hook"),
        ("nri", "ok", "enforced, refused, warned"),
    ],
)
def test_bad_decision_fields(path, outcome, needle):
    with pytest.raises(LoggingSetupError, match=needle):
        log_decision(DecisionEvent("a", "b", "c", path, outcome))


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_any_text_round_trips_on_one_line(text):
    rendered = logfmt_value(text)
    assert len(rendered.splitlines()) <= 1 and rendered.isprintable()
    assert _logfmt(f"k={rendered}") == {"k": text}


def test_control_characters_are_spelled_out():
    assert logfmt_value("x\x1by") == '"x\\u001by"'
    assert logfmt_value("a\u2028b") == '"a\\u2028b"'
