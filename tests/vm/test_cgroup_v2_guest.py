"""Outer tests: one per guest test in tests/vm/guest/, passing, skipping or failing as the
guest test did inside the qemu cgroup v2 guest (booted once per session by `guest_run`).
"""

import pytest

# Two guest runs at most (a stalled one is booted again), each NRI_SLA_VM_TIMEOUT (420 s).
pytestmark = [pytest.mark.vm, pytest.mark.timeout(900)]


def _tail(text: str, lines: int = 40) -> str:
    return "\n".join(text.splitlines()[-lines:])


def test_guest(guest_nodeid, guest_run, vm_harness, guest_collection_error):
    if guest_nodeid == "<guest collection error>":
        pytest.fail(f"collecting tests/vm/guest failed:\n{guest_collection_error}",
                    pytrace=False)
    result = vm_harness.load_results(guest_run.io_dir).get(guest_nodeid)
    if result is None:
        why = guest_run.error or f"guest pytest rc {guest_run.rc}"
        pytest.fail(
            f"guest test {guest_nodeid} reported no result ({why})\n"
            f"--- guest pytest output (tail)\n{_tail(guest_run.output)}\n"
            f"--- guest console (tail)\n{_tail(guest_run.console)}", pytrace=False)
    if result["outcome"] == "skipped":
        pytest.skip(f"in the guest: {result['longrepr']}")
    if result["outcome"] != "passed":
        pytest.fail(f"in the guest ({result['outcome']}):\n{result['longrepr']}\n"
                    f"{result['sections']}", pytrace=False)


def test_guest_pytest_completed(guest_run):
    # rc 0: all passed; 1: some failed (reported by test_guest). Anything else means the
    # guest pytest itself broke (usage error, internal error, nothing collected).
    if guest_run.rc is None:
        pytest.fail(f"{guest_run.error}\n--- guest pytest output (tail)\n"
                    f"{_tail(guest_run.output)}\n--- guest console (tail)\n"
                    f"{_tail(guest_run.console)}", pytrace=False)
    assert guest_run.rc in (0, 1), (
        f"guest pytest exited {guest_run.rc}\n{_tail(guest_run.output, 80)}")
    assert guest_run.boot_seconds is not None
