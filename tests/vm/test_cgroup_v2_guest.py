"""Outer tests: one per guest test in tests/vm/guest/, passing, skipping or failing as the
guest test did inside the qemu cgroup v2 guest (booted once per session by `guest_run`).
"""

import pytest

# Two guest runs at most (a stalled one is booted again), each NRI_SLA_VM_TIMEOUT (420 s).
pytestmark = [pytest.mark.vm, pytest.mark.timeout(900)]


def test_guest(guest_nodeid, guest_run, guest_report):
    guest_report.test("guest_nodeid", guest_nodeid, guest_run)


def test_guest_pytest_completed(guest_run, guest_report):
    guest_report.pytest(guest_run)
