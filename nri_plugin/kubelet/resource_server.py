"""The DevicePlugin service of one extended resource (`nvidia.com/gpu`, or one MIG
profile's `nvidia.com/mig-1g.10gb` under the mixed strategy), on a socket of its own in
the kubelet's device-plugin directory: ListAndWatch, GetPreferredAllocation, Allocate,
and serving and registering that socket. The tables it answers from, and when to serve
and register again, are GpuDevicePlugin's (nri_plugin.kubelet.deviceplugin)."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Sequence
from concurrent import futures
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import grpc

from nri_plugin.kubelet.devices import Device, DeviceTable
from nri_plugin.kubelet.errors import KubeletApiError
from nri_plugin.kubelet.pb import deviceplugin_v1beta1_pb2 as pb
from nri_plugin.kubelet.pb import deviceplugin_v1beta1_pb2_grpc as pb_grpc
from nri_plugin.kubelet.plugin_metrics import DevicePluginMetrics
from nri_plugin.kubelet.selection import preferred_gpus
from nri_plugin.plan.errors import PlacementError
from nri_plugin.plan.gpu_injection import ENV_VISIBLE, ChosenGpus, GpuInjection, gpu_injection

if TYPE_CHECKING:
    from nri_plugin.config.convert import GpuInjectionMode

log = logging.getLogger("nri_sla.kubelet.deviceplugin")

API_VERSION = "v1beta1"
MAX_CONTAINER_REQUESTS = 64  # containers in one Allocate / GetPreferredAllocation
MAX_DEVICE_IDS = 256  # device ids in one container request (nodes have a handful of GPUs)
MAX_ID_CHARS = 63  # the API's limit for a device id
STREAM_POLL_SECONDS = 1.0  # how soon a ListAndWatch stream notices its client has gone

Identity = tuple[tuple[int, int, int], ...]


class _BadRequest(Exception):
    """A request the plugin refuses with INVALID_ARGUMENT (message for the kubelet)."""


def file_identity(*paths: Path) -> Identity | None:
    """Which files these are now (None when one is missing). The change time tells a
    re-created file from the old one whose inode number the filesystem handed out again."""
    try:
        stats = [os.stat(p) for p in paths]
    except OSError:
        return None
    return tuple((st.st_dev, st.st_ino, st.st_ctime_ns) for st in stats)


class Settings(Protocol):
    """Read only (the plugin's settings are frozen)."""

    @property
    def socket_dir(self) -> Path: ...

    @property
    def injection(self) -> GpuInjectionMode: ...

    @property
    def dev_root(self) -> Path: ...

    @property
    def register_timeout(self) -> float: ...

    @property
    def kubelet_socket(self) -> Path: ...


class Owner(Protocol):
    """What a ResourceServer asks of the plugin that runs it (GpuDevicePlugin)."""

    @property
    def settings(self) -> Settings: ...

    @property
    def metrics(self) -> DevicePluginMetrics: ...

    @property
    def stopping(self) -> bool: ...

    def table(self, resource: str) -> DeviceTable: ...

    def wait_change(self, resource: str, seen: int, timeout: float) -> tuple[int, DeviceTable]: ...


class ResourceServer(pb_grpc.DevicePluginServicer):
    """One resource's DevicePlugin service and socket."""

    def __init__(self, owner: Owner, resource: str, socket_name: str) -> None:
        self.owner = owner
        self.resource = resource
        self.socket_name = socket_name
        self.served: Identity | None = None  # our socket and kubelet.sock when registered
        self._server: grpc.Server | None = None

    @property
    def socket_path(self) -> Path:
        return self.owner.settings.socket_dir / self.socket_name

    @property
    def preferred_available(self) -> bool:
        """GetPreferredAllocation is offered for whole GPUs (topology-scored)."""
        return self.owner.table(self.resource).whole_gpus

    # -- the DevicePlugin service ----------------------------------------------------
    def GetDevicePluginOptions(self, request, context):
        return pb.DevicePluginOptions(
            pre_start_required=False, get_preferred_allocation_available=self.preferred_available
        )

    def ListAndWatch(self, request, context):
        sent = -1
        while context.is_active() and not self.owner.stopping:
            version, table = self.owner.wait_change(self.resource, sent, STREAM_POLL_SECONDS)
            if version != sent:
                sent = version
                self.owner.metrics.lists_sent.labels(resource=self.resource).inc()
                yield pb.ListAndWatchResponse(devices=table.devices())

    def GetPreferredAllocation(self, request, context):
        table = self.owner.table(self.resource)
        try:
            answers = [
                self._preferred(table, r)
                for r in _bounded(
                    request.container_requests, "container requests", MAX_CONTAINER_REQUESTS
                )
            ]
        except _BadRequest as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"GetPreferredAllocation: {exc}")
        self.owner.metrics.preferred_allocations.labels(resource=self.resource).inc()
        return pb.PreferredAllocationResponse(
            container_responses=[
                pb.ContainerPreferredAllocationResponse(deviceIDs=ids) for ids in answers
            ]
        )

    def Allocate(self, request, context):
        table = self.owner.table(self.resource)
        metrics = self.owner.metrics
        try:
            grants = [
                self._resolve(table, r.devices_ids, "devices_ids", allow_empty=False)
                for r in _bounded(
                    request.container_requests, "container requests", MAX_CONTAINER_REQUESTS
                )
            ]
            response = pb.AllocateResponse(
                container_responses=[self._allocation(g) for g in grants]
            )
        except _BadRequest as exc:
            metrics.allocation(self.resource, "invalid")
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"Allocate: {exc}")
        except PlacementError as exc:  # a device node missing on this host
            metrics.allocation(self.resource, "failed")
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"Allocate: {exc}")
        metrics.allocation(self.resource, "ok", sum(len(g) for g in grants))
        return response

    def PreStartContainer(self, request, context):
        return pb.PreStartContainerResponse()

    def _preferred(
        self, table: DeviceTable, r: pb.ContainerPreferredAllocationRequest
    ) -> list[str]:
        available = self._resolve(
            table, r.available_deviceIDs, "available_deviceIDs", allow_empty=False
        )
        must = self._resolve(
            table, r.must_include_deviceIDs, "must_include_deviceIDs", allow_empty=True
        )
        outside = [d.id for d in must if d not in available]
        if outside:
            raise _BadRequest(
                f"must_include_deviceIDs {', '.join(outside)} not among available_deviceIDs"
            )
        if not len(must) <= r.allocation_size <= len(available):
            raise _BadRequest(
                f"allocation_size {r.allocation_size} must be from "
                f"{len(must)} (must_include_deviceIDs) to {len(available)} "
                "(available_deviceIDs)"
            )
        if not table.whole_gpus:  # MIG devices: the pinned ones, then the kubelet's order
            rest = [d for d in available if d not in must]
            return [d.id for d in [*must, *rest][: r.allocation_size]]
        by_gpu = {d.gpu.index: d for d in available}
        chosen = preferred_gpus(
            table.inventory, [d.gpu for d in available], [d.gpu for d in must], r.allocation_size
        )
        return [by_gpu[g.index].id for g in chosen]

    def _resolve(
        self, table: DeviceTable, ids: Sequence[str], what: str, allow_empty: bool
    ) -> list[Device]:
        if not ids and not allow_empty:
            raise _BadRequest(f"{what} is empty")
        _bounded(ids, what, MAX_DEVICE_IDS)
        devices: list[Device] = []
        for i in ids:
            device = table.by_id.get(i)
            if device is None:
                shown = i if len(i) <= MAX_ID_CHARS else i[:MAX_ID_CHARS] + "..."
                raise _BadRequest(
                    f"{what}: unknown device id {shown!r} (not one of the "
                    f"{len(table.by_id)} {self.resource} devices nri-sla "
                    "advertises)"
                )
            if device in devices:
                raise _BadRequest(f"{what}: device id {i!r} given twice")
            devices.append(device)
        return devices

    def _allocation(self, devices: Sequence[Device]) -> pb.ContainerAllocateResponse:
        settings = self.owner.settings
        whole = tuple(d.gpu for d in devices if d.mig is None)
        parts = (
            [gpu_injection(ChosenGpus(gpus=whole), settings.injection, dev_root=settings.dev_root)]
            if whole
            else []
        )
        parts += [
            gpu_injection(
                ChosenGpus(gpus=(d.gpu,), mig=d.mig), settings.injection, dev_root=settings.dev_root
            )
            for d in devices
            if d.mig
        ]
        injection = _merged(parts)
        return pb.ContainerAllocateResponse(
            envs=dict(injection.env),
            cdi_devices=[pb.CDIDevice(name=n) for n in injection.cdi_devices],
            devices=[
                pb.DeviceSpec(
                    container_path=d.path,
                    permissions="rw",
                    host_path=str(settings.dev_root / d.path.removeprefix("/dev/")),
                )
                for d in injection.devices
            ],
        )

    # -- serving and registering ---------------------------------------------------------
    def serve(self) -> None:
        """Serve DevicePlugin on our socket (a stale one is replaced)."""
        self.stop()
        path = self.socket_path
        path.unlink(missing_ok=True)
        server = grpc.server(
            futures.ThreadPoolExecutor(
                max_workers=16, thread_name_prefix=f"device-plugin-{self.socket_name}"
            )
        )
        pb_grpc.add_DevicePluginServicer_to_server(self, server)
        try:
            server.add_insecure_port(f"unix://{path}")
        except RuntimeError as exc:
            raise KubeletApiError(f"cannot serve the device plugin on {path}: {exc}") from None
        server.start()
        self._server = server

    def register(self) -> None:
        """Register with the kubelet (KubeletApiError when it does not take us)."""
        s = self.owner.settings
        if not s.kubelet_socket.exists():
            raise KubeletApiError(
                f"registering {self.resource} with the kubelet: "
                f"{s.kubelet_socket} does not exist (is the kubelet running?)"
            )
        request = pb.RegisterRequest(
            version=API_VERSION,
            endpoint=self.socket_name,
            resource_name=self.resource,
            options=pb.DevicePluginOptions(
                get_preferred_allocation_available=self.preferred_available
            ),
        )
        with grpc.insecure_channel(
            f"unix://{s.kubelet_socket}", options=[("grpc.enable_http_proxy", 0)]
        ) as channel:
            try:
                pb_grpc.RegistrationStub(channel).Register(
                    request, timeout=s.register_timeout, wait_for_ready=True
                )
            except grpc.RpcError as exc:
                details = " ".join((exc.details() or "").split())[:200]
                raise KubeletApiError(
                    f"registering {self.resource} with the kubelet at "
                    f"{s.kubelet_socket} failed: {exc.code().name}: "
                    f"{details}"
                ) from None
        self.served = self.identity()
        table = self.owner.table(self.resource)
        log.info(
            "registered %s with the kubelet: %d %s on %s",
            self.resource,
            len(table.by_id),
            "GPU(s)" if table.whole_gpus else "MIG device(s)",
            self.socket_path,
        )

    def identity(self) -> Identity | None:
        return file_identity(self.socket_path, self.owner.settings.kubelet_socket)

    def stop(self, grace: float | None = None) -> None:
        if self._server is not None:
            self._server.stop(grace=grace).wait()
            self._server = None


def _merged(parts: Sequence[GpuInjection]) -> GpuInjection:
    """One container's injection for several devices: names and nodes of each, once."""
    if len(parts) == 1:
        return parts[0]
    env: dict[str, str] = {}
    for p in parts:
        for key, value in p.env.items():
            env[key] = f"{env[key]},{value}" if key == ENV_VISIBLE and key in env else value
    nodes = {d.path: d for p in parts for d in p.devices}
    return GpuInjection(
        env=env,
        devices=tuple(nodes.values()),
        cdi_devices=tuple(dict.fromkeys(n for p in parts for n in p.cdi_devices)),
    )


def _bounded(items: Iterable, what: str, limit: int) -> list:
    items = list(items)
    if len(items) > limit:
        raise _BadRequest(f"{len(items)} {what}, more than the {limit} nri-sla accepts")
    return items
