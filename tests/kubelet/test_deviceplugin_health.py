"""The device plugin driven by the fake kubelet (both stub flavours) through what a node
lives through, with the fake NVML behind it as `nri-sla device-plugin` runs it (rescans
and the health thread): an NVML outage, a lost GPU and its recovery, a GPU NVML stops
counting, a kubelet that comes late or restarts. Every list the kubelet gets is checked
(never fewer devices than advertised) and the times are measured (docs/device-plugin.md,
"Health, outages and re-registration", quotes them)."""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from nri_plugin.kubelet.deviceplugin import GpuDevicePlugin, PluginSettings
from nri_plugin.simulated.hardware import FakeNvml, build_sysfs, dgx_like_gpus, dgx_like_pci
from nri_plugin.topology.health_monitor import GpuHealthMonitor
from nri_plugin.topology.inventory import InventoryReader
from nri_plugin.topology.watched import WatchedInventory

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
RESCAN = 0.2  # s between inventory rescans (gpu.rescan-interval)
HEALTH = 0.05  # s each health poll waits (gpu.health-interval)


class Node:
    """The plugin over a fake NVML, run as the command runs it: run() with rescans in
    one thread, follow_health() in another."""

    def __init__(self, sock_dir, tmp_path, **settings) -> None:
        self.nvml = FakeNvml(dgx_like_gpus())
        sysfs = build_sysfs(
            tmp_path / "sys", nodes=2, cores_per_node=8, threads=2, pci=dgx_like_pci()
        )
        self.gpus = WatchedInventory(
            InventoryReader("nvml", sysfs_root=sysfs, nvml=self.nvml), GpuHealthMonitor(self.nvml)
        )
        inventory = self.gpus.read()
        self.ids = [g.uuid for g in inventory.gpus]
        self.plugin = GpuDevicePlugin(PluginSettings(socket_dir=sock_dir, **settings), inventory)
        self.threads = [
            threading.Thread(target=self.plugin.run, args=(self.gpus.read, RESCAN), daemon=True),
            threading.Thread(
                target=self.plugin.follow_health, args=(self.gpus, HEALTH), daemon=True
            ),
        ]
        for t in self.threads:
            t.start()

    def stop(self) -> None:
        self.plugin.stop()
        for t in self.threads:
            t.join(10)
            assert not t.is_alive()
        self.gpus.close()


@pytest.fixture
def node(sock_dir, tmp_path):
    started: list[Node] = []

    def start(**settings) -> Node:
        started.append(Node(sock_dir, tmp_path, **settings))
        return started[-1]

    yield start
    for n in started:
        n.stop()


def health(listed: dict) -> dict[str, str]:
    return {d["ID"]: d["health"] for d in listed["devices"]}


def wait_for(
    kubelet, want: Callable[[dict[str, str]], bool], seen: list[dict], timeout: float = 10
) -> dict:
    """Lists until one satisfies `want` (each kept in `seen`); that list."""
    deadline = time.monotonic() + timeout
    while True:
        listed = kubelet.next_list(timeout=max(0.1, deadline - time.monotonic()))
        seen.append(listed)
        if want(health(listed)):
            return listed


@pytest.mark.slow
def test_nvml_outage_lists_every_gpu_unhealthy_then_healthy(make_kubelet, node):
    kubelet = make_kubelet()
    n = node(watch_interval=0.1)
    kubelet.registration()
    seen = [kubelet.next_list()]
    assert set(health(seen[0]).values()) == {"Healthy"}
    n.nvml.fail_init = 999  # nvmlInit fails: every read of the inventory fails for 3 s
    failed_at = time.monotonic()
    down = wait_for(kubelet, lambda h: set(h.values()) == {"Unhealthy"}, seen)
    time.sleep(3 - (time.monotonic() - failed_at))
    n.nvml.fail_init = None
    back_at = time.monotonic()
    up = wait_for(kubelet, lambda h: set(h.values()) == {"Healthy"}, seen)
    assert all(set(health(listed)) == set(n.ids) for listed in seen)  # never fewer
    # within a rescan or two of each change (RESCAN = 0.2 s), the fake kubelet's clock
    print(
        f"NVML outage: {len(seen)} lists of 8; all Unhealthy {down['at'] - failed_at:.2f} s "
        f"after it began, all Healthy {up['at'] - back_at:.2f} s after it ended"
    )
    assert down["at"] - failed_at < 1.5 and up["at"] - back_at < 1.5


@pytest.mark.slow
def test_a_lost_gpu_stays_unhealthy_and_recovers(make_kubelet, node):
    kubelet = make_kubelet()
    n = node(watch_interval=0.1)
    kubelet.registration()
    seen = [kubelet.next_list()]
    n.nvml.gpus[5].lost = True  # every NVML call about it answers GPU_IS_LOST
    lost_at = time.monotonic()
    down = wait_for(kubelet, lambda h: h[n.ids[5]] == "Unhealthy", seen)
    # many rescans later it is still listed, Unhealthy: no list without it comes
    with pytest.raises(AssertionError, match="timed out"):
        kubelet.next_list(timeout=10 * RESCAN)
    n.nvml.gpus[5].lost = False  # back (a reset, a driver reload)
    back_at = time.monotonic()
    up = wait_for(kubelet, lambda h: h[n.ids[5]] == "Healthy", seen)
    assert all(set(health(listed)) == set(n.ids) for listed in seen)
    assert [h for i, h in health(down).items() if i != n.ids[5]] == ["Healthy"] * 7
    print(
        f"lost GPU: {len(seen)} lists of 8; Unhealthy {down['at'] - lost_at:.2f} s after "
        f"it was lost, Healthy {up['at'] - back_at:.2f} s after it came back"
    )
    assert down["at"] - lost_at < 1.0 and up["at"] - back_at < 1.5


def test_a_gpu_nvml_stops_counting_stays_listed_unhealthy(make_kubelet, node):
    kubelet = make_kubelet()
    n = node(watch_interval=0.1)
    kubelet.registration()
    seen = [kubelet.next_list()]
    n.nvml.gpus.pop()  # GPU 7 fell off the bus: NVML counts 7 GPUs
    listed = wait_for(kubelet, lambda h: h[n.ids[7]] == "Unhealthy", seen)
    assert set(health(listed)) == set(n.ids)
    assert all(set(health(listed)) == set(n.ids) for listed in seen)


@pytest.mark.slow
def test_a_late_kubelet_is_registered_with_within_2s(make_kubelet, node, sock_dir):
    # the command's back-off: 1 s doubling to 30 s between attempts. Each attempt here
    # gives up after 0.5 s, so that after 9 s without a kubelet the plugin is in its wait
    # of 8 s (from 9 s to 17 s); kubelet.sock appearing ends that wait
    n = node(register_timeout=0.5)
    time.sleep(9)
    kubelet = make_kubelet()  # returns once kubelet.sock is served
    appeared = time.monotonic()
    request, registered_at = kubelet.timed_registration(timeout=30)
    assert request["resource_name"] == "nvidia.com/gpu"
    print(f"late kubelet: registered {registered_at - appeared:.2f} s after kubelet.sock appeared")
    assert registered_at - appeared < 2.0
    first = kubelet.next_list()
    assert set(health(first)) == set(n.ids)
    # a kubelet restart (sockets wiped, kubelet.sock served anew): registered again
    restarted = time.monotonic()
    kubelet.command("restart")
    _, again_at = kubelet.timed_registration(timeout=10)
    print(f"kubelet restart: registered again {again_at - restarted:.2f} s after it")
    assert again_at - restarted < 2.0
    assert (sock_dir / "nri-sla-gpu.sock").is_socket()


def test_a_snapshot_broken_after_start_keeps_the_last_lists(make_kubelet, sock_dir, tmp_path):
    # gpu.inventory as a snapshot file: the operator's input, so a broken one is invalid
    # (SnapshotError), not a host read that failed (InventoryError); a rescan that meets
    # it fails all the same: counted, and the last lists stay.
    snapshot = tmp_path / "node.yaml"
    shutil.copy(EXAMPLES / "dgx-like.yaml", snapshot)
    reader = InventoryReader("snapshot", snapshot=snapshot)
    plugin = GpuDevicePlugin(
        PluginSettings(socket_dir=sock_dir, watch_interval=0.05), reader.read()
    )
    kubelet = make_kubelet()
    thread = threading.Thread(target=plugin.run, args=(reader.read, 0.05), daemon=True)
    thread.start()
    try:
        kubelet.registration()
        assert set(health(kubelet.next_list()).values()) == {"Healthy"}
        before = plugin.table("nvidia.com/gpu").devices()
        snapshot.write_text("version: [\n")
        deadline = time.monotonic() + 10
        while not _sample(plugin, "nri_sla_device_plugin_inventory_read_failures_total"):
            assert time.monotonic() < deadline and thread.is_alive()
            time.sleep(0.05)
        assert thread.is_alive() and plugin.table("nvidia.com/gpu").devices() == before
    finally:
        plugin.stop()
        thread.join(10)
    assert not thread.is_alive()


def _sample(plugin: GpuDevicePlugin, name: str) -> float:
    return plugin.metrics.registry.get_sample_value(name) or 0.0
