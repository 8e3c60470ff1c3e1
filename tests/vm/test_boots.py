"""GuestBoots (tests/vm/boots.py), the threads that boot the qemu guests at the same time,
with stand-in boots: no qemu needed."""

import threading
import time

import pytest


def test_the_started_boots_run_at_the_same_time(vm_boots):
    both = threading.Barrier(2, timeout=20)  # broken unless both boots are in it at once

    def boot(name):
        def run():
            both.wait()
            return f"{name} run"

        return run

    boots = vm_boots.GuestBoots({"a": boot("a"), "b": boot("b")}, ["a", "b"], threading.Event())
    assert boots.wait("b") == "b run"
    assert boots.wait("a") == "a run"


def test_a_boots_skip_and_failure_are_raised_in_the_waiting_test_as_they_were(vm_boots):
    def skips():
        pytest.skip("cgroup v2 guest unavailable: qemu-system-x86_64 not found")

    def fails():
        pytest.fail("systemd guest failed to boot: no console", pytrace=False)

    boots = vm_boots.GuestBoots(
        {"skips": skips, "fails": fails}, ["skips", "fails"], threading.Event()
    )
    with pytest.raises(pytest.skip.Exception) as skipped:
        boots.wait("skips")
    assert skipped.value.msg == "cgroup v2 guest unavailable: qemu-system-x86_64 not found"
    with pytest.raises(pytest.fail.Exception) as failed:
        boots.wait("fails")
    assert failed.value.msg == "systemd guest failed to boot: no console"
    assert failed.value.pytrace is False


def test_a_boot_not_started_begins_when_first_waited_for(vm_boots):
    calls = []
    boots = vm_boots.GuestBoots({"a": lambda: calls.append("a") or "a run"}, [], threading.Event())
    time.sleep(0.1)
    assert calls == []
    assert boots.wait("a") == "a run"
    assert calls == ["a"]


def test_stop_cancels_the_boots_still_running(vm_boots):
    cancel = threading.Event()

    def boot():
        if not cancel.wait(20):
            return "finished"
        raise RuntimeError("cancelled")

    boots = vm_boots.GuestBoots({"a": boot}, ["a"], cancel)
    started = time.monotonic()
    boots.stop()
    assert time.monotonic() - started < 10
    with pytest.raises(RuntimeError, match="cancelled"):
        boots.wait("a")
