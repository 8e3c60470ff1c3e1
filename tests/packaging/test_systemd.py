"""packaging/systemd/: nri-sla.service and nri-sla-device-plugin.service: key settings,
`systemd-analyze verify` and the security exposure of both."""

import subprocess
from pathlib import Path

import pytest

UNITS = Path(__file__).resolve().parents[2] / "packaging" / "systemd"
UNIT = UNITS / "nri-sla.service"
DEVICE_PLUGIN_UNIT = UNITS / "nri-sla-device-plugin.service"


@pytest.fixture(scope="module")
def unit(pk):
    return pk.parse_unit(UNIT)


def one(unit, section, key):
    values = unit[section][key]
    assert len(values) == 1, f"{key} set {len(values)} times"
    return values[0]


def test_lifecycle_follows_containerd(unit):
    assert one(unit, "Unit", "After") == "containerd.service"
    assert one(unit, "Unit", "PartOf") == "containerd.service"
    assert "BindsTo" not in unit["Unit"]
    assert one(unit, "Install", "WantedBy") == "containerd.service"
    assert one(unit, "Unit", "StartLimitIntervalSec") == "0"


def test_service_type_and_watchdog(unit):
    svc = unit["Service"]
    assert one(unit, "Service", "Type") == "notify"
    assert one(unit, "Service", "NotifyAccess") == "main"
    assert one(unit, "Service", "WatchdogSec") == "30"
    assert one(unit, "Service", "Restart") == "always"
    assert svc["ExecStart"] == ["/usr/bin/nri-sla run --config /etc/nri-sla/config.yaml"]
    # `systemctl reload` is SIGHUP (a reload, never a stop: tests/plugin/test_plugin_reload)
    assert one(unit, "Service", "ExecReload") == "/bin/kill -HUP $MAINPID"
    # A node without NRI makes `systemctl start` fail in bounded time, then Restart= retries.
    assert one(unit, "Service", "TimeoutStartSec") == "30"


def test_hardening_keeps_cgroupfs_and_nri_socket_writable(unit):
    assert one(unit, "Service", "ProtectSystem") == "strict"
    rw = one(unit, "Service", "ReadWritePaths").split()
    assert "/sys/fs/cgroup" in rw and "-/run/nri" in rw
    for key in ("ProtectHome", "PrivateTmp", "NoNewPrivileges", "ProtectKernelModules"):
        assert one(unit, "Service", key) == "yes", key
    # these would make /sys/fs/cgroup read-only; /dev must stay the host's
    for key in ("ProtectControlGroups", "ProtectKernelTunables", "PrivateDevices"):
        assert key not in unit["Service"], key
    assert one(unit, "Service", "RestrictAddressFamilies").split() == [
        "AF_UNIX",
        "AF_INET",
        "AF_INET6",
    ]
    caps = one(unit, "Service", "CapabilityBoundingSet").split()
    assert caps and set(caps) <= {"CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH"}


def test_device_plugin_unit(pk):
    dp = pk.parse_unit(DEVICE_PLUGIN_UNIT)
    assert one(dp, "Service", "ExecStart") == (
        "/usr/bin/nri-sla device-plugin --config /etc/nri-sla/config.yaml"
    )
    assert one(dp, "Service", "Type") == "simple"  # `device-plugin` sends no sd_notify
    assert one(dp, "Service", "Restart") == "always"
    assert one(dp, "Unit", "StartLimitIntervalSec") == "0"
    # re-registers by itself after a kubelet restart: not stopped with the kubelet
    assert "PartOf" not in dp["Unit"] and "BindsTo" not in dp["Unit"]
    assert one(dp, "Install", "WantedBy") == "multi-user.target"
    assert one(dp, "Service", "ProtectSystem") == "strict"
    assert one(dp, "Service", "ReadWritePaths") == "-/var/lib/kubelet/device-plugins"
    assert "PrivateDevices" not in dp["Service"]  # NVML and the device nodes are in /dev
    assert one(dp, "Service", "RestrictAddressFamilies") == "AF_UNIX"
    assert one(dp, "Service", "CapabilityBoundingSet") == ""


@pytest.mark.parametrize("path", [UNIT, DEVICE_PLUGIN_UNIT], ids=lambda p: p.name)
def test_systemd_analyze_verify(tmp_path, pk, path):
    analyze = pk.need_tool("systemd-analyze", "systemd")
    if not pk.VENV_NRI_SLA.exists():
        pytest.skip(f"{pk.VENV_NRI_SLA} missing: install the project (pip install -e .)")
    # verify checks that ExecStart= exists: point it at this environment's nri-sla.
    copy = tmp_path / path.name
    copy.write_text(path.read_text().replace("/usr/bin/nri-sla", str(pk.VENV_NRI_SLA)))
    res = subprocess.run([analyze, "verify", str(copy)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    # Unknown or misplaced keys are only warnings (exit 0): fail on them too.
    complaints = [ln for ln in res.stderr.splitlines() if str(copy) in ln]
    assert not complaints, "\n".join(complaints)


@pytest.mark.parametrize("path", [UNIT, DEVICE_PLUGIN_UNIT], ids=lambda p: p.name)
def test_systemd_analyze_security_exposure(tmp_path, pk, path):
    analyze = pk.need_tool("systemd-analyze", "systemd")
    copy = tmp_path / path.name
    copy.write_text(path.read_text())
    res = subprocess.run(
        [analyze, "security", "--offline=yes", "--no-pager", str(copy)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if "--offline" in res.stderr and res.returncode != 0:
        pytest.skip("systemd-analyze security --offline needs systemd >= 252")
    line = next(ln for ln in res.stdout.splitlines() if "Overall exposure level" in ln)
    score = float(line.split("level for")[1].split(":")[1].split()[0])
    assert score <= 4.0, line  # "OK" band; an unhardened unit scores 9.6


def test_runtime_directory_holds_the_status_socket(unit):
    """ProtectSystem=strict makes /run read-only: the unit gives the plugin /run/nri-sla,
    where the status socket goes by default, and keeps it (the hook's cache) on stop."""
    from nri_plugin.config.values import NodeConfig

    assert one(unit, "Service", "RuntimeDirectory") == "nri-sla"
    assert one(unit, "Service", "RuntimeDirectoryPreserve") == "yes"
    assert NodeConfig().status.socket == "/run/nri-sla/status.sock"
