"""Outer tests: one per guest test in tests/vm/systemd_guest/, passing, skipping or failing
as the guest test did inside the qemu guest with systemd as PID 1 (booted once per session
by `systemd_guest_run`, with the Debian package built on the host in its I/O share).
"""

import pytest

# Building the .deb, then up to two boots of NRI_SLA_VM_TIMEOUT (default 600 s) each.
pytestmark = [pytest.mark.vm, pytest.mark.timeout(1500)]


def test_systemd_guest(systemd_nodeid, systemd_guest_run, guest_report):
    guest_report.test("systemd_nodeid", systemd_nodeid, systemd_guest_run)


def test_systemd_guest_pytest_completed(systemd_guest_run, guest_report):
    guest_report.pytest(systemd_guest_run)
