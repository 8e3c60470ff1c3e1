"""`nri-sla device-plugin`: the node's GPU device plugin for the kubelet (API v1beta1).

nri-sla's topology choice becomes the kubelet's grant: the kubelet asks
GetPreferredAllocation which GPUs to give (answered by the project's GPU selection),
records its choice in its own books (PodResources, checkpoints) and asks Allocate what the
runtime must add to the container for exactly those GPUs. Device ids are real ones (GPU
UUIDs, or PCI bus ids where the inventory has no UUIDs) so the kubelet, PodResources and
GPU monitoring name the same devices the container opens.

Life cycle, as the kubelet expects of a device plugin: serve DevicePlugin on a socket in
the kubelet's device-plugin directory, then Register on kubelet.sock there. A restarting
kubelet wipes that directory; the plugin notices its socket is gone (or kubelet.sock is a
new file), serves again and re-registers.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path

import grpc

from nri_plugin.kubelet.errors import KubeletApiError
from nri_plugin.kubelet.pb import deviceplugin_v1beta1_pb2 as pb
from nri_plugin.kubelet.pb import deviceplugin_v1beta1_pb2_grpc as pb_grpc
from nri_plugin.kubelet.selection import preferred_gpus
from nri_plugin.plan.gpu_injection import ChosenGpus, gpu_injection
from nri_plugin.plan.placement_values import PlacementError
from nri_plugin.topology.gpus import Gpu, GpuInventory, InventoryError
from nri_plugin.topology.watched import WatchedInventory

log = logging.getLogger("nri_sla.kubelet.deviceplugin")

API_VERSION = "v1beta1"
KUBELET_SOCKET = "kubelet.sock"
DEFAULT_SOCKET_DIR = "/var/lib/kubelet/device-plugins"
DEFAULT_SOCKET_NAME = "nri-sla-gpu.sock"
DEFAULT_RESOURCE_NAME = "nvidia.com/gpu"
HEALTHY, UNHEALTHY = "Healthy", "Unhealthy"
MAX_CONTAINER_REQUESTS = 64  # containers in one Allocate / GetPreferredAllocation
MAX_DEVICE_IDS = 256  # device ids in one container request (nodes have a handful of GPUs)
MAX_ID_CHARS = 63  # the API's limit for a device id
STREAM_POLL_SECONDS = 1.0  # how soon a ListAndWatch stream notices its client has gone


def device_id(gpu: Gpu) -> str:
    """The id the kubelet knows a GPU by: its UUID, else its PCI bus id."""
    return gpu.uuid or gpu.pci_bus_id


@dataclass(frozen=True)
class DeviceTable:
    """The GPUs this plugin advertises, by device id, and which are healthy (by the
    inventory's own health: NVML events, lost or unreadable GPUs; or `health` given by
    id). MIG-enabled GPUs and GPUs in an unknown MIG mode are left out: handing one out
    whole would bypass its MIG instances."""

    inventory: GpuInventory
    by_id: Mapping[str, Gpu]
    unhealthy: frozenset[str]

    @classmethod
    def build(cls, inventory: GpuInventory, health: Mapping[str, bool]) -> DeviceTable:
        by_id = {device_id(g): g for g in inventory.gpus
                 if not g.mig_enabled and not g.mig_unknown}
        return cls(inventory, by_id, frozenset(
            i for i, g in by_id.items() if health.get(i) is False or not g.health.healthy))

    def devices(self) -> list[pb.Device]:
        return [pb.Device(
            ID=i, health=UNHEALTHY if i in self.unhealthy else HEALTHY,
            topology=None if g.numa_node is None else pb.TopologyInfo(
                nodes=[pb.NUMANode(ID=g.numa_node)]))
            for i, g in self.by_id.items()]


@dataclass(frozen=True)
class PluginSettings:
    """Where the plugin serves, what it advertises and how GPUs reach containers."""

    socket_dir: Path = Path(DEFAULT_SOCKET_DIR)
    resource_name: str = DEFAULT_RESOURCE_NAME
    injection: str = "cdi"  # cdi | env | devices (the node config's gpu.injection)
    socket_name: str = DEFAULT_SOCKET_NAME
    dev_root: Path = Path("/dev")  # where the device nodes of `devices` mode are
    register_timeout: float = 10.0  # s to wait for kubelet.sock to answer Register
    watch_interval: float = 1.0  # s between checks that the kubelet still knows us
    retry_max: float = 30.0  # longest wait between registration attempts

    @property
    def socket_path(self) -> Path:
        return self.socket_dir / self.socket_name

    @property
    def kubelet_socket(self) -> Path:
        return self.socket_dir / KUBELET_SOCKET


class _BadRequest(Exception):
    """A request the plugin refuses with INVALID_ARGUMENT (message for the kubelet)."""


class GpuDevicePlugin(pb_grpc.DevicePluginServicer):
    """The DevicePlugin service and its life cycle (serve, register, watch, stop)."""

    def __init__(self, settings: PluginSettings, inventory: GpuInventory,
                 health: Mapping[str, bool] | None = None) -> None:
        self.settings = settings
        self._health: dict[str, bool] = dict(health or {})
        self._table = DeviceTable.build(inventory, self._health)
        self._version = 0  # bumped when the advertised list changes
        self._changed = threading.Condition()
        self._stop = threading.Event()
        self._server: grpc.Server | None = None
        self._served: tuple[tuple[int, int, int], ...] | None = None  # _inodes() when registered

    # -- inputs -----------------------------------------------------------------------
    def update(self, inventory: GpuInventory | None = None,
               health: Mapping[str, bool] | None = None) -> None:
        """A new inventory and/or health by device id (False: unhealthy; ids not given
        keep their health). Open ListAndWatch streams get the new list when it changed."""
        with self._changed:
            if health is not None:
                self._health.update(health)
            table = DeviceTable.build(inventory or self._table.inventory, self._health)
            if table.devices() != self._table.devices():
                self._version += 1
                log.info("device list changed: %d GPU(s), unhealthy: %s", len(table.by_id),
                         ", ".join(sorted(table.unhealthy)) or "none")
                self._changed.notify_all()
            self._table = table

    # -- the DevicePlugin service ----------------------------------------------------
    def GetDevicePluginOptions(self, request, context):
        return pb.DevicePluginOptions(pre_start_required=False,
                                      get_preferred_allocation_available=True)

    def ListAndWatch(self, request, context):
        sent = -1
        while context.is_active() and not self._stop.is_set():
            with self._changed:
                if sent == self._version:
                    self._changed.wait(STREAM_POLL_SECONDS)
                version, table = self._version, self._table
            if version != sent:
                sent = version
                yield pb.ListAndWatchResponse(devices=table.devices())

    def GetPreferredAllocation(self, request, context):
        table = self._table
        try:
            answers = [self._preferred(table, r)
                       for r in _bounded(request.container_requests, "container requests",
                                       MAX_CONTAINER_REQUESTS)]
        except _BadRequest as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"GetPreferredAllocation: {exc}")
        return pb.PreferredAllocationResponse(container_responses=[
            pb.ContainerPreferredAllocationResponse(deviceIDs=[device_id(g) for g in gpus])
            for gpus in answers])

    def Allocate(self, request, context):
        table = self._table
        try:
            grants = [self._resolve(table, r.devices_ids, "devices_ids", allow_empty=False)
                      for r in _bounded(request.container_requests, "container requests",
                                       MAX_CONTAINER_REQUESTS)]
            return pb.AllocateResponse(container_responses=[self._allocation(g)
                                                            for g in grants])
        except _BadRequest as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"Allocate: {exc}")
        except PlacementError as exc:  # a device node missing on this host
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"Allocate: {exc}")

    def PreStartContainer(self, request, context):
        return pb.PreStartContainerResponse()

    def _preferred(self, table: DeviceTable,
                   r: pb.ContainerPreferredAllocationRequest) -> list[Gpu]:
        available = self._resolve(table, r.available_deviceIDs, "available_deviceIDs",
                                  allow_empty=False)
        must = self._resolve(table, r.must_include_deviceIDs, "must_include_deviceIDs",
                             allow_empty=True)
        outside = [device_id(g) for g in must if g not in available]
        if outside:
            raise _BadRequest(f"must_include_deviceIDs {', '.join(outside)} not among "
                              "available_deviceIDs")
        if not len(must) <= r.allocation_size <= len(available):
            raise _BadRequest(f"allocation_size {r.allocation_size} must be from "
                              f"{len(must)} (must_include_deviceIDs) to {len(available)} "
                              "(available_deviceIDs)")
        return preferred_gpus(table.inventory, available, must, r.allocation_size)

    def _resolve(self, table: DeviceTable, ids: Sequence[str], what: str,
                 allow_empty: bool) -> list[Gpu]:
        if not ids and not allow_empty:
            raise _BadRequest(f"{what} is empty")
        _bounded(ids, what, MAX_DEVICE_IDS)
        gpus: list[Gpu] = []
        for i in ids:
            gpu = table.by_id.get(i)
            if gpu is None:
                shown = i if len(i) <= MAX_ID_CHARS else i[:MAX_ID_CHARS] + "..."
                raise _BadRequest(f"{what}: unknown device id {shown!r} (not one of the "
                                  f"{len(table.by_id)} {self.settings.resource_name} "
                                  "devices nri-sla advertises)")
            if gpu in gpus:
                raise _BadRequest(f"{what}: device id {i!r} given twice")
            gpus.append(gpu)
        return gpus

    def _allocation(self, gpus: Sequence[Gpu]) -> pb.ContainerAllocateResponse:
        injection = gpu_injection(ChosenGpus(gpus=tuple(gpus)), self.settings.injection,
                                  dev_root=self.settings.dev_root)
        return pb.ContainerAllocateResponse(
            envs=dict(injection.env),
            cdi_devices=[pb.CDIDevice(name=n) for n in injection.cdi_devices],
            devices=[pb.DeviceSpec(container_path=d.path, permissions="rw",
                                   host_path=str(self.settings.dev_root
                                                 / d.path.removeprefix("/dev/")))
                     for d in injection.devices])

    # -- life cycle --------------------------------------------------------------------
    def serve(self) -> None:
        """Serve DevicePlugin on our socket (a stale one from a previous run is
        replaced)."""
        path = self.settings.socket_path
        path.unlink(missing_ok=True)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=16,
                                                        thread_name_prefix="device-plugin"))
        pb_grpc.add_DevicePluginServicer_to_server(self, server)
        try:
            server.add_insecure_port(f"unix://{path}")
        except RuntimeError as exc:
            raise KubeletApiError(f"cannot serve the device plugin on {path}: {exc}") from None
        server.start()
        self._server = server

    def register(self) -> None:
        """Register with the kubelet (KubeletApiError when it does not take us)."""
        s = self.settings
        request = pb.RegisterRequest(
            version=API_VERSION, endpoint=s.socket_name, resource_name=s.resource_name,
            options=pb.DevicePluginOptions(get_preferred_allocation_available=True))
        with grpc.insecure_channel(f"unix://{s.kubelet_socket}",
                                   options=[("grpc.enable_http_proxy", 0)]) as channel:
            try:
                pb_grpc.RegistrationStub(channel).Register(
                    request, timeout=s.register_timeout, wait_for_ready=True)
            except grpc.RpcError as exc:
                details = " ".join((exc.details() or "").split())[:200]
                raise KubeletApiError(f"registering {s.resource_name} with the kubelet at "
                                      f"{s.kubelet_socket} failed: {exc.code().name}: "
                                      f"{details}") from None
        self._served = self._inodes()
        log.info("registered %s with the kubelet: %d GPU(s) on %s", s.resource_name,
                 len(self._table.by_id), s.socket_path)

    def run(self, rescan: Callable[[], GpuInventory] | None = None,
            rescan_interval: float = 0.0) -> None:
        """Serve and stay registered until stop(): re-serve and re-register after a kubelet
        restart, retry a refused registration with back-off, rescan the inventory every
        `rescan_interval` s when `rescan` is given (a failed rescan keeps the last list)."""
        s = self.settings
        retry = s.watch_interval
        next_rescan = rescan_interval
        clock = 0.0
        while not self._stop.is_set():
            if self._served is None or self._served != self._inodes():
                if self._served is not None:
                    log.warning("the kubelet restarted (%s or %s changed): registering again",
                                s.socket_path, s.kubelet_socket)
                try:
                    self._restart_server()
                    self.register()
                    retry = s.watch_interval
                except KubeletApiError as exc:
                    log.warning("%s; retrying in %gs", exc, retry)
                    self._served = None
                    if self._stop.wait(retry):
                        break
                    retry = min(retry * 2, s.retry_max)
                    continue
            if self._stop.wait(s.watch_interval):
                break
            clock += s.watch_interval
            if rescan is not None and rescan_interval and clock >= next_rescan:
                next_rescan = clock + rescan_interval
                try:
                    self.update(inventory=rescan())
                except InventoryError as exc:
                    log.warning("GPU inventory rescan failed, keeping the last list: %s", exc)
        self._shutdown()

    def follow_health(self, gpus: WatchedInventory, interval: float) -> None:
        """Until stop(): NVML health events (XIDs, lost GPUs) reach ListAndWatch as soon
        as they come; each poll waits up to `interval` s for them (run in a thread)."""
        while not self._stop.is_set():
            if gpus.poll(int(interval * 1000)) and gpus.last is not None:
                self.update(inventory=gpus.with_health(gpus.last))

    def stop(self) -> None:
        """Ask run() to return (safe from a signal handler or another thread)."""
        self._stop.set()
        with self._changed:
            self._changed.notify_all()

    def _restart_server(self) -> None:
        if self._server is not None:
            self._server.stop(grace=None)
        self.serve()

    def _shutdown(self) -> None:
        if self._server is not None:
            self._server.stop(grace=1.0).wait()
            self._server = None
        self.settings.socket_path.unlink(missing_ok=True)
        log.info("device plugin stopped, %s removed", self.settings.socket_path)

    def _inodes(self) -> tuple[tuple[int, int, int], ...] | None:
        """Which files our socket and kubelet.sock are now; None when one is missing.
        The change time tells a re-created file from the old one whose inode number the
        filesystem handed out again."""
        try:
            stats = (os.stat(self.settings.socket_path), os.stat(self.settings.kubelet_socket))
        except OSError:
            return None
        return tuple((st.st_dev, st.st_ino, st.st_ctime_ns) for st in stats)


def _bounded(items: Iterable, what: str, limit: int) -> list:
    items = list(items)
    if len(items) > limit:
        raise _BadRequest(f"{len(items)} {what}, more than the {limit} nri-sla accepts")
    return items
