"""The Debian package's nri-sla.service under systemd as PID 1 (inside the systemd guest).

The package is installed with dpkg; systemd runs the service exactly as the unit file
says (Type=notify, WatchdogSec, the hardening), and the project's NRI runtime simulator
plays containerd at the socket the packaged config names. The tests share one start of
the service (the module's `service` fixture) and run in file order: the last one stops it.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any

import pytest

from nri_plugin import __version__

MIB = 1 << 20
UNIT = "nri-sla.service"
STATE = ("ActiveState", "SubState", "StatusText", "MainPID", "NRestarts")


@dataclasses.dataclass
class ServiceStart:
    waiting: dict[str, str]  # the unit while no runtime listened at the NRI socket
    ready: dict[str, str]  # once systemd had the service's READY=1
    session: Any  # the runtime simulator's session with the plugin


@pytest.fixture(scope="module")
def service(package, nri_runtime, systemd):
    """`systemctl start --no-block` with no runtime listening, then the runtime comes up:
    the unit must stay `activating` until nri-sla registered."""
    res = systemd.run(["systemctl", "start", "--no-block", UNIT])
    assert res.returncode == 0, res.stderr
    # Its dial loop says "connecting ..." / "disconnected: cannot connect ..." by turns.
    waiting = systemd.wait_for(
        "nri-sla dialling the NRI socket",
        lambda: (p := systemd.unit_properties(UNIT, *STATE))["StatusText"] and p,
        unit=UNIT,
    )
    nri_runtime.listen()
    session = nri_runtime.accept(timeout=120)
    ready = systemd.wait_for(
        "nri-sla.service active",
        lambda: (
            (
                p := systemd.unit_properties(
                    UNIT, *STATE, "WatchdogTimestampMonotonic", "ActiveEnterTimestampMonotonic"
                )
            )["ActiveState"]
            != "activating"
            and p
        ),
        unit=UNIT,
    )
    yield ServiceStart(waiting, ready, session)
    systemd.run(["systemctl", "stop", UNIT])


def test_package_installs_its_unit_without_starting_it(package, systemd):
    status = systemd.run(["dpkg", "-s", "nri-sla"]).stdout
    assert "Status: install ok installed" in status
    assert f"Version: {__version__}" in status
    # postinst reloaded systemd: the unit is known, and (by design) neither enabled nor
    # started on a first install (containerd needs NRI configured first).
    unit = systemd.unit_properties(
        UNIT, "LoadState", "UnitFileState", "FragmentPath", "ActiveState"
    )
    assert unit == {
        "LoadState": "loaded",
        "UnitFileState": "disabled",
        "FragmentPath": str(package.unit_file),
        "ActiveState": "inactive",
    }
    version = systemd.run(["/usr/bin/nri-sla", "--version"])
    assert version.stdout.strip() == f"nri-sla {__version__}", version.stderr


def test_ready_only_once_registered_with_the_runtime(service):
    """Type=notify: `READY=1` follows the registration, not the process start."""
    waiting, ready = service.waiting, service.ready
    assert (waiting["ActiveState"], waiting["SubState"]) == ("activating", "start")
    assert waiting["StatusText"] in (
        "connecting to the NRI runtime",
        "disconnected: cannot connect to NRI socket /var/run/nri/nri.sock: "
        "No such file or directory",
    )
    assert (ready["ActiveState"], ready["SubState"]) == ("active", "running")
    assert ready["StatusText"] == "registered with containerd 2.3.4"
    assert ready["MainPID"] == waiting["MainPID"] != "0"  # the same process, no restart
    assert service.session.name == "nri-sla"


def test_plugin_writes_land_from_inside_the_units_sandbox(
    service, nri_runtime, kube_bundle, first_disk, second_disk, systemd
):
    """The NRI path under the systemd cgroup driver, as containerd drives it: the plugin's
    adjustment goes into the spec and runc applies it to the container's scope; io.max on
    two devices (NRI's `unified` takes one) is written by the plugin itself at
    StartContainer, from inside the hardened service."""
    sla = (
        "cpu: {limit: 0.5}\nmemory: {high: 96Mi, max: 128Mi}\n"
        "io:\n  max:\n    - {device: /dev/vda, read-bps: 1Mi}\n"
        "    - {device: /dev/vdb, write-iops: 300}\n"
    )
    pod, ctr = kube_bundle.pod_container("direct", {"sla.nri.io/pod": sla})
    response = nri_runtime.call(service.session.create_container(pod, ctr))
    resources = kube_bundle.bundle.oci_resources(response.adjust)
    assert "io.max" not in resources["unified"]  # two devices: not NRI's to carry
    result, container = kube_bundle.start(ctr, resources=resources)
    assert container is not None, result.stderr
    nri_runtime.call(service.session.start_container(pod, ctr))
    got = container.values(["cpu.max", "memory.max", "memory.high", "io.max"])
    assert got["cpu.max"] == "50000 100000"
    assert got["memory.max"] == str(128 * MIB)
    assert got["memory.high"] == str(96 * MIB)
    assert sorted(got["io.max"].splitlines()) == sorted(
        [
            f"{first_disk} rbps={MIB} wbps=max riops=max wiops=max",
            f"{second_disk} rbps=max wbps=max riops=max wiops=300",
        ]
    )
    journal = systemd.run(["journalctl", "-u", UNIT, "-o", "cat", "--no-pager"]).stdout
    assert "Permission denied" not in journal and "Read-only file system" not in journal


def test_hook_writes_every_cgroup_file_inside_the_units_sandbox(
    package, kube_bundle, first_disk, systemd, tmp_path
):
    """The OCI hook writes every kind of cgroup file nri-sla knows (the plugin writes a
    subset). Run with each sandbox setting of the installed unit (systemd-run -p, read
    from the unit file: a setting added later is covered too), it must still land all
    of them in a running container's scope."""
    _pod, ctr = kube_bundle.pod_container("sandboxed")
    result, container = kube_bundle.start(ctr)
    assert container is not None, result.stderr
    sandbox = [arg for key, value in package.sandbox() for arg in ("-p", f"{key}={value}")]
    assert "ProtectSystem=strict" in sandbox and "NoNewPrivileges=yes" in sandbox
    # The hook reads the bundle's config.json: outside /tmp, which PrivateTmp= hides.
    bundle = Path("/run/nri-sla-vm-bundles") / container.id
    bundle.mkdir(parents=True)
    sla = (
        f"cpu: {{limit: 0.25, period: 50ms}}\nnuma: {{nodes: '0'}}\n"
        f"memory: {{high: 80Mi, max: 112Mi}}\n"
        f"io:\n  weight: 300\n  max: [{{device: '{first_disk}', read-bps: 2Mi}}]\n"
    )
    (bundle / "config.json").write_text(
        json.dumps(
            {
                **kube_bundle.bundle.config(["/bin/sleep", "1"], {}, container.cgroups_path),
                "annotations": {**ctr.annotations, "sla.nri.io/pod": sla},
            }
        )
    )
    state = json.dumps(
        {
            "ociVersion": "1.0.2",
            "id": container.id,
            "status": "creating",
            "pid": kube_bundle.pid(container),
            "bundle": str(bundle),
        }
    )
    systemd_run = ["systemd-run", "--wait", "--pipe", "--collect", "--quiet", *sandbox]
    hook = systemd.run(
        [*systemd_run, "/usr/bin/nri-sla", "hook", "--stage", "createRuntime", "--timeout", "100"],
        input=state,
        timeout=200,
    )
    assert hook.returncode == 0, hook.stdout + hook.stderr
    got = container.values(
        ["cpu.max", "cpuset.mems", "memory.high", "memory.max", "io.weight", "io.max"]
    )
    assert got == {
        "cpu.max": "12500 50000",
        "cpuset.mems": "0",
        "memory.high": str(80 * MIB),
        "memory.max": str(112 * MIB),
        "io.weight": "default 300",
        "io.max": f"{first_disk} rbps={2 * MIB} wbps=max riops=max wiops=max",
    }
    # ... and the sandbox was in force: / read-only, only the two DAC capabilities left.
    probe = systemd.run(
        [*systemd_run, "/bin/sh", "-c", "grep CapBnd /proc/self/status; touch /etc/nri-sla-probe"]
    )
    assert "CapBnd:\t0000000000000006" in probe.stdout
    assert "Read-only file system" in probe.stderr


def test_watchdog_is_fed_and_stop_is_clean(service, systemd):
    """WatchdogSec=30 as shipped: nri-sla pings every 15 s from its event loop, and
    systemd takes the pings (NotifyAccess=main) after READY=1 too; then `systemctl stop`
    ends it with STOPPING=1 and exit status 0."""
    assert systemd.unit_properties(UNIT, "WatchdogUSec")["WatchdogUSec"] == "30s"
    entered = int(service.ready["ActiveEnterTimestampMonotonic"])
    # systemd stamps WatchdogTimestamp with each ping it accepts.
    now = systemd.wait_for(
        "a watchdog ping after READY=1",
        lambda: (
            int(
                (p := systemd.unit_properties(UNIT, *STATE, "WatchdogTimestampMonotonic"))[
                    "WatchdogTimestampMonotonic"
                ]
            )
            > entered
            and p
        ),
        timeout=60,
        unit=UNIT,
    )
    assert now["ActiveState"] == "active" and now["MainPID"] == service.ready["MainPID"]
    assert now["NRestarts"] == "0"

    # systemd says at debug level what the main process told it and how it ended (an
    # inactive unit is unloaded, so `systemctl show` has nothing left to tell).
    assert systemd.run(["systemctl", "log-level", "debug"]).returncode == 0
    try:
        started = time.monotonic()
        res = systemd.run(["systemctl", "stop", UNIT], timeout=60)
        seconds = time.monotonic() - started
    finally:
        systemd.run(["systemctl", "log-level", "info"])
    assert res.returncode == 0, res.stderr
    pid = service.ready["MainPID"]
    log = systemd.journal(UNIT)
    assert f"Got notification message from PID {pid} (STOPPING=1" in log, log[-3000:]
    # Exited by itself after SIGTERM: not killed (TimeoutStopSec=15 would send SIGKILL;
    # a SIGTERM death counts as "clean" for systemd but shows as code=killed here).
    assert "Main process exited, code=exited, status=0/SUCCESS" in log, log[-3000:]
    assert systemd.unit_properties(UNIT, "ActiveState")["ActiveState"] == "inactive"
    assert seconds < 15
    print(f"evidence: systemctl stop took {seconds:.1f} s")
