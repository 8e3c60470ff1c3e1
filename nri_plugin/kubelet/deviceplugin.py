"""`nri-sla device-plugin`: the node's GPU device plugin for the kubelet (API v1beta1).

nri-sla's topology choice becomes the kubelet's grant: the kubelet asks
GetPreferredAllocation which GPUs to give (answered by the project's GPU selection),
records its choice in its own books (PodResources, checkpoints) and asks Allocate what the
runtime must add to the container for exactly those GPUs. Device ids are real ones (GPU
and MIG UUIDs, or PCI bus ids where the inventory has no UUIDs) so the kubelet,
PodResources and GPU monitoring name the same devices the container opens.

Life cycle, as the kubelet expects of a device plugin: serve DevicePlugin for each
resource (nri_plugin.kubelet.devices says which) on a socket in the kubelet's
device-plugin directory, then Register each on kubelet.sock there. A restarting kubelet
wipes that directory; the plugin notices a socket is gone (or kubelet.sock is a new
file), serves again and re-registers. While registration fails it retries with back-off,
but a kubelet.sock that appears or is replaced ends the wait at once (a short poll of the
file, KUBELET_POLL_SECONDS).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from nri_plugin.kubelet.devices import DeviceTable, build_tables
from nri_plugin.kubelet.errors import KubeletApiError, MigLayoutError
from nri_plugin.kubelet.plugin_metrics import DevicePluginMetrics
from nri_plugin.kubelet.resource_server import ResourceServer, file_identity
from nri_plugin.topology.errors import InventoryError, SnapshotError
from nri_plugin.topology.gpus import GpuInventory
from nri_plugin.topology.watched import WatchedInventory

if TYPE_CHECKING:
    from nri_plugin.config.convert import GpuInjectionMode, MigStrategy

log = logging.getLogger("nri_sla.kubelet.deviceplugin")

KUBELET_SOCKET = "kubelet.sock"
DEFAULT_SOCKET_DIR = "/var/lib/kubelet/device-plugins"
DEFAULT_SOCKET_NAME = "nri-sla-gpu.sock"
DEFAULT_RESOURCE_NAME = "nvidia.com/gpu"
KUBELET_POLL_SECONDS = 0.2  # how often a registration back-off looks at kubelet.sock


@dataclass(frozen=True)
class PluginSettings:
    """Where the plugin serves, what it advertises and how GPUs reach containers."""

    socket_dir: Path = Path(DEFAULT_SOCKET_DIR)
    resource_name: str = DEFAULT_RESOURCE_NAME
    injection: GpuInjectionMode = "cdi"  # the node config's gpu.injection
    mig_strategy: MigStrategy = "none"  # device-plugin.mig-strategy
    socket_name: str = DEFAULT_SOCKET_NAME  # the whole-GPU resource's socket
    dev_root: Path = Path("/dev")  # where the device nodes of `devices` mode are
    register_timeout: float = 10.0  # s to wait for kubelet.sock to answer Register
    watch_interval: float = 1.0  # s between checks that the kubelet still knows us
    retry_max: float = 30.0  # longest wait between registration attempts

    @property
    def kubelet_socket(self) -> Path:
        return self.socket_dir / KUBELET_SOCKET

    def socket_name_of(self, resource: str) -> str:
        """`socket_name` for the main resource, nri-sla-<name>.sock for MIG profiles."""
        if resource == self.resource_name:
            return self.socket_name
        return f"nri-sla-{resource.partition('/')[2]}.sock"


class GpuDevicePlugin:
    """The advertised tables, one ResourceServer per resource, and their life cycle
    (serve, register, watch, rescan, stop). Raises MigLayoutError when the inventory
    does not fit the MIG strategy."""

    def __init__(
        self,
        settings: PluginSettings,
        inventory: GpuInventory,
        health: Mapping[str, bool] | None = None,
        metrics: DevicePluginMetrics | None = None,
    ) -> None:
        self.settings = settings
        self.metrics = metrics or DevicePluginMetrics()
        self._health: dict[str, bool] = dict(health or {})
        self._tables = build_tables(
            inventory, settings.mig_strategy, settings.resource_name, self._health
        )
        self._versions = dict.fromkeys(self._tables, 0)  # bumped when a list changes
        self._changed = threading.Condition()
        self._stop = threading.Event()
        self._servers: dict[str, ResourceServer] = {}
        self._count()

    # -- what the servers read ---------------------------------------------------------
    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def table(self, resource: str) -> DeviceTable:
        return self._tables[resource]

    def wait_change(self, resource: str, seen: int, timeout: float) -> tuple[int, DeviceTable]:
        """The resource's list version and table, once it is not `seen` (or after
        `timeout` s)."""
        with self._changed:
            if self._versions[resource] == seen and not self._stop.is_set():
                self._changed.wait(timeout)
            return self._versions[resource], self._tables[resource]

    # -- inputs -----------------------------------------------------------------------
    def update(
        self, inventory: GpuInventory | None = None, health: Mapping[str, bool] | None = None
    ) -> None:
        """A new inventory and/or health by device id (False: unhealthy; ids not given
        keep their health). Open ListAndWatch streams get their new list when it
        changed. An inventory the MIG strategy cannot advertise keeps the last lists."""
        with self._changed:
            if health is not None:
                self._health.update(health)
            any_table = next(iter(self._tables.values()))
            try:
                tables = build_tables(
                    inventory or any_table.inventory,
                    self.settings.mig_strategy,
                    self.settings.resource_name,
                    self._health,
                    self._tables,
                )
            except MigLayoutError as exc:
                log.warning("%s; keeping the last device lists", exc)
                return
            for name, table in tables.items():
                old = self._tables.get(name)
                if old is None or table.devices() != old.devices():
                    self._versions[name] = self._versions.get(name, -1) + 1
                    log.info(
                        "%s device list changed: %d device(s), unhealthy: %s",
                        name,
                        len(table.by_id),
                        ", ".join(sorted(table.unhealthy)) or "none",
                    )
            self._tables = tables
            self._changed.notify_all()
        self._count()

    def _count(self) -> None:
        self.metrics.advertised(
            {
                name: (len(t.by_id) - len(t.unhealthy), len(t.unhealthy))
                for name, t in self._tables.items()
            }
        )

    # -- life cycle --------------------------------------------------------------------
    def run(
        self, rescan: Callable[[], GpuInventory] | None = None, rescan_interval: float = 0.0
    ) -> None:
        """Serve and stay registered until stop(): re-serve and re-register after a kubelet
        restart, retry a refused registration with back-off (cut short when kubelet.sock
        appears or changes), rescan the inventory every `rescan_interval` s when `rescan`
        is given (a failed rescan keeps the last lists)."""
        s = self.settings
        retry = s.watch_interval
        next_rescan = time.monotonic() + rescan_interval
        while not self._stop.is_set():
            failed = self._register_all()
            if failed:
                log.warning(
                    "%s; retrying in %gs or when %s changes", failed, retry, s.kubelet_socket
                )
                if self._wait_for_kubelet(retry):
                    break
                retry = min(retry * 2, s.retry_max)
                continue
            retry = s.watch_interval
            if self._stop.wait(s.watch_interval):
                break
            if rescan is not None and rescan_interval and time.monotonic() >= next_rescan:
                next_rescan = time.monotonic() + rescan_interval
                try:
                    self.update(inventory=rescan())
                except (InventoryError, SnapshotError) as exc:  # a host's, a file's
                    self.metrics.inventory_failures.inc()
                    log.warning("GPU inventory rescan failed, keeping the last lists: %s", exc)
        self._shutdown()

    def _register_all(self) -> str:
        """Serve and register every resource not registered now; the first failure."""
        for name in list(self._tables):
            server = self._servers.get(name)
            if server is None:
                server = self._servers[name] = ResourceServer(
                    self, name, self.settings.socket_name_of(name)
                )
            if server.served is not None and server.served == server.identity():
                continue
            if server.served is not None:
                log.warning(
                    "the kubelet restarted (%s or %s changed): registering %s again",
                    server.socket_path,
                    self.settings.kubelet_socket,
                    name,
                )
            try:
                server.serve()
                server.register()
            except KubeletApiError as exc:
                server.served = None
                self.metrics.registration(name, False)
                return str(exc)
            self.metrics.registration(name, True)
        return ""

    def _wait_for_kubelet(self, seconds: float) -> bool:
        """Wait up to `seconds`, less when kubelet.sock appears or is replaced; True when
        stop() was called."""
        seen = file_identity(self.settings.kubelet_socket)
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            if self._stop.wait(min(KUBELET_POLL_SECONDS, left)):
                return True
            now = file_identity(self.settings.kubelet_socket)
            if now is not None and now != seen:
                return False
        return self._stop.is_set()

    def follow_health(self, gpus: WatchedInventory, interval: float) -> None:
        """Until stop(): NVML health events (XIDs, lost and recovered GPUs) reach
        ListAndWatch as soon as they come; each poll waits up to `interval` s for them
        (run in a thread)."""
        while not self._stop.is_set():
            if gpus.poll(int(interval * 1000)) and gpus.last is not None:
                self.update(inventory=gpus.with_health(gpus.last))

    def stop(self) -> None:
        """Ask run() to return (safe from a signal handler or another thread)."""
        self._stop.set()
        with self._changed:
            self._changed.notify_all()

    def _shutdown(self) -> None:
        for server in self._servers.values():
            server.stop(grace=1.0)
            server.socket_path.unlink(missing_ok=True)
            log.info(
                "device plugin for %s stopped, %s removed", server.resource, server.socket_path
            )
