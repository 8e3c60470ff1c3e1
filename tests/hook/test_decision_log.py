"""The hook's logging-free decision line is byte for byte what nri_sla.logging writes."""

from __future__ import annotations

import os
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nri_sla.hook.decision_log import decision_line
from nri_sla.logging import log_decision, setup_logging

CREATED = 1_795_000_000.25

text = st.text(alphabet=st.sampled_from(list('ab =",;\\\n\t\x1b\u2028é:1')), max_size=12)
leaf = st.one_of(st.none(), st.booleans(), st.integers(-5, 10**12), text,
                 st.lists(st.one_of(st.integers(0, 9), text), max_size=3))
applied = st.dictionaries(st.sampled_from(["cpu_quota", "cpus", "io_max", "memory_max", "x"]),
                          st.one_of(leaf, st.dictionaries(st.sampled_from(["a", "b"]), leaf,
                                                          max_size=2)), max_size=4)


def _shared(tmp_path, fmt, ns, pod, ctr, outcome, applied_, warnings, error, monkeypatch):
    monkeypatch.setattr(time, "time", lambda: CREATED)
    path = tmp_path / "shared.log"
    with open(path, "w", encoding="utf-8") as fh:
        logger = setup_logging(fmt, "info", stream=fh)
        log_decision(ns, pod, ctr, "hook", outcome, applied=applied_, warnings=warnings,
                     error=error)
        for handler in logger.handlers:
            handler.flush()
        journal = os.fstat(fh.fileno())
    monkeypatch.undo()
    return path.read_text(encoding="utf-8"), journal


@settings(max_examples=60, deadline=None)
@given(fmt=st.sampled_from(["text", "json"]), ns=text, ctr=text,
       outcome=st.sampled_from(["enforced", "warned", "refused"]), applied_=applied,
       warnings=st.lists(text, max_size=3), error=st.one_of(st.none(), text))
def test_decision_line_matches_nri_sla_logging(tmp_path_factory, fmt, ns, ctr, outcome,
                                               applied_, warnings, error):
    tmp = tmp_path_factory.mktemp("log")
    mp = pytest.MonkeyPatch()
    mp.delenv("JOURNAL_STREAM", raising=False)
    try:
        shared, _ = _shared(tmp, fmt, ns, "web-0", ctr, outcome, applied_, warnings, error,
                            mp)
    finally:
        mp.undo()
    mine = decision_line(fmt, ns, "web-0", ctr, outcome, applied_, warnings, error, CREATED)
    assert mine + "\n" == shared


def test_journald_prefix_matches(tmp_path, monkeypatch):
    """Under journald (the log file is $JOURNAL_STREAM) text lines drop ts, add <prio>."""
    path = tmp_path / "j.log"
    path.write_text("")
    st_ = os.stat(path)
    monkeypatch.setenv("JOURNAL_STREAM", f"{st_.st_dev}:{st_.st_ino}")
    monkeypatch.setattr(time, "time", lambda: CREATED)
    with open(path, "a", encoding="utf-8") as fh:
        logger = setup_logging("text", "info", stream=fh)
        log_decision("ns", "p", "c", "hook", "warned", applied={"cpus": "0-1"},
                     warnings=["w 1"])
        for handler in logger.handlers:
            handler.flush()
    monkeypatch.undo()
    shared = path.read_text()
    assert shared.startswith("<4>level=warning ")
    mine = decision_line("text", "ns", "p", "c", "warned", {"cpus": "0-1"}, ["w 1"], None,
                         CREATED, journal=True)
    assert mine + "\n" == shared
