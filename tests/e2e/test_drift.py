"""The SLA over a container's whole life, against a real containerd: values changed
behind nri-sla's back are repaired (hard) or reported (soft) within a watch interval,
a CPU-bound container at its quota shows throttling, and `nri-sla status` reads it all
from the running plugin.

The repair of a runtime-applied value goes through containerd for real: nri-sla sends a
plugin-initiated UpdateContainers, containerd runs `runc update` with the container's
spec. A direct write (cgroup v1 blkio throttle, which NRI cannot carry) is rewritten by
nri-sla itself.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.e2e.e2e_cgroup import whole_disk
from tests.e2e.e2e_metrics import free_port, scrape

pytestmark = pytest.mark.e2e
PLUGIN = "50-nri-sla"
INTERVAL = 1  # seconds: the node config's smallest watch interval
NODE_CONFIG = f"""\
enforcement: hard
cgroup: {{driver: cgroupfs}}
nri: {{reconnect-max-seconds: 1}}
watch: {{interval-seconds: {INTERVAL}}}
"""


@pytest.fixture
def watching_plugin(cluster, plugins, sla_plugin_argv):
    """nri-sla with a one-second drift watch, its status socket and metrics endpoint."""
    status = cluster.base / "status.sock"
    port = free_port()
    config = cluster.base / "nri-sla.yaml"
    config.write_text(
        NODE_CONFIG + f"state-dir: {cluster.base / 'nri-sla-state'}\nstatus: {{socket: {status}}}\n"
    )
    proc = plugins.start(
        [
            *sla_plugin_argv,
            "--config",
            str(config),
            "--socket",
            str(cluster.nri_sock),
            "--metrics-address",
            f"127.0.0.1:{port}",
        ],
        "nri-sla",
    )
    cluster.wait_plugin_synchronized(PLUGIN)
    proc.wait_output(r"synchronized: 0 pods")
    proc.status = status
    proc.metrics_port = port
    return proc


def status(plugin, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "nri_plugin.cli", "status", "--socket", str(plugin.status), *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def metric(plugin, name: str, **labels: str) -> float | None:
    value = scrape(plugin.metrics_port).get(name, **labels)
    if value is None:
        print(f"evidence: no {name}{labels} in the scrape")
    return value


def cgroup_dir(cluster, pc, controller: str) -> Path:
    rel = pc.cgroups_path.lstrip("/")
    root = Path("/sys/fs/cgroup")
    return root / rel if cluster.cgroup_v2 else root / controller / rel


def until(what: str, condition, timeout: float = 15.0) -> float:
    start = time.monotonic()
    while not condition():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"{what}: not within {timeout}s")
        time.sleep(0.1)
    took = time.monotonic() - start
    print(f"evidence: {what} after {took:.1f}s")
    return took


def test_drift_of_a_direct_write_and_a_runtime_value_is_repaired(cluster, watching_plugin):
    disk = whole_disk()
    if disk is None or cluster.cgroup_v2:
        pytest.skip(
            "needs a cgroup v1 host and a whole disk (a v1 blkio throttle is the "
            "direct write); the v2 drift tests run in tests/vm"
        )
    pc = cluster.run_pod(
        "drift",
        {
            "sla.nri.io/pod": (
                "cpu: {limit: 0.5, period: 100ms}\n"
                f"io:\n  max:\n    - {{device: '{disk}', read-bps: 10Mi}}\n"
            )
        },
    )
    quota = cgroup_dir(cluster, pc, "cpu") / "cpu.cfs_quota_us"
    rule = cgroup_dir(cluster, pc, "blkio") / "blkio.throttle.read_bps_device"
    assert quota.read_text().strip() == "50000"
    assert rule.read_text().split() == [disk, "10485760"]
    time.sleep(2 * INTERVAL)  # passes over a container that holds: nothing to do
    # Behind nri-sla's back: the quota the runtime applied is lifted, the throttle rule
    # nri-sla wrote is dropped (what a systemd daemon-reload or another agent does).
    quota.write_text("-1")
    rule.write_text(f"{disk} 0")
    until(
        "the blkio rule rewritten by nri-sla",
        lambda: rule.read_text().split() == [disk, "10485760"],
        4 * INTERVAL + 5,
    )
    until(
        "the quota restored through containerd (runc update)",
        lambda: quota.read_text().strip() == "50000",
        4 * INTERVAL + 10,
    )
    log = watching_plugin
    print("evidence: plugin log:", *log.wait_output(r"msg=drift "), sep="\n  ")
    log.wait_output(r"drift repair requested")
    log.wait_output(r"drift repaired.*how=\"?through the runtime")
    cluster.wait_log(r"requested container updates")  # containerd's side of it
    assert metric(log, "nri_sla_drift_detected_total", kind="cpu") == 1
    assert metric(log, "nri_sla_drift_detected_total", kind="io") == 1
    until(
        "the cpu repair counted",
        lambda: metric(log, "nri_sla_drift_repairs_total", kind="cpu", outcome="repaired") == 1,
    )
    assert metric(log, "nri_sla_drift_repairs_total", kind="io", outcome="repaired") == 1
    shown = status(log, "--json")
    assert shown.returncode == 0, shown.stderr
    (row,) = json.loads(shown.stdout)["containers"]
    assert row["drifted"] == 0 and row["sla"] == "hard cpu=0.5 io.max=1dev"


def test_soft_drift_is_reported_and_left(cluster, watching_plugin):
    pc = cluster.run_pod(
        "soft",
        {
            "sla.nri.io/pod": (
                "enforcement: soft\ncpu: {limit: 0.5, period: 100ms}\nmemory: {max: 256Mi}\n"
            )
        },
    )
    memory = cgroup_dir(cluster, pc, "memory") / (
        "memory.max" if cluster.cgroup_v2 else "memory.limit_in_bytes"
    )
    # Lowered (v1 refuses a memory limit above memory.memsw.limit_in_bytes, which
    # containerd set to the same 256Mi).
    memory.write_text(str(128 << 20))
    until(
        "the drift reported",
        lambda: metric(watching_plugin, "nri_sla_drift_detected_total", kind="memory") == 1,
        4 * INTERVAL + 5,
    )
    time.sleep(3 * INTERVAL)
    assert memory.read_text().strip() == str(128 << 20)  # soft: left as found
    assert metric(watching_plugin, "nri_sla_drift_detected_total", kind="memory") == 1
    table = status(watching_plugin)
    print("evidence: nri-sla status:", table.stdout, sep="\n")
    assert table.returncode == 0, table.stderr
    assert f"holds '{128 << 20}', SLA '{256 << 20}' (set through the runtime)" in table.stdout


def test_a_cpu_bound_container_at_its_quota_shows_throttling(cluster, watching_plugin):
    # 5 ms of quota per 100 ms period: used up even when a loaded machine gives the loop
    # a fraction of a CPU.
    pc = cluster.run_pod(
        "busy",
        {"sla.nri.io/pod": "cpu: {limit: 0.05, period: 100ms}\n"},
        command=("/bin/sh", "-c", "while :; do :; done"),
    )
    assert cluster.cgroup(pc).cpu_quota == 5000
    who = {"namespace": "nri-e2e", "pod": "busy", "container": "work"}
    until(
        "throttling above 50% in the metrics",
        lambda: (
            (metric(watching_plugin, "nri_sla_container_cpu_throttled_ratio", **who) or 0) > 0.5
        ),
        6 * INTERVAL + 10,
    )
    table = status(watching_plugin)
    print("evidence: nri-sla status:", table.stdout, sep="\n")
    line = next(x for x in table.stdout.splitlines() if x.startswith("nri-e2e/busy"))
    throttled = float(line.split("%")[0].split()[-1])
    assert throttled > 50, line


def test_status_says_in_one_line_when_the_plugin_is_gone(cluster, watching_plugin):
    watching_plugin.stop()
    gone = status(watching_plugin)
    assert gone.returncode == 4 and gone.stdout == ""
    assert (
        gone.stderr == f"nri-sla status: nri-sla is not running (nothing serves "
        f"{watching_plugin.status})\n"
    )
