"""The kubelet's device books, simulated: the one accountant of a node's GPUs.

At admission the kubelet's device manager gives each container as many of the device
plugin's advertised, unallocated devices as its `nvidia.com/gpu` limit says, asks the
plugin to Allocate them, and puts the answer (env, mounts, device nodes, annotations,
CDI devices) into the container's CRI CreateContainer request. Its books (pod, container
-> device ids) are what the PodResources API reports (built here straight into that API's
messages, which `podresources_server.py` serves); a pod's devices are free again once the
pod is gone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from nri_plugin.errors import Refused
from nri_plugin.kubelet.pb import podresources_v1_pb2 as pr
from nri_plugin.nri.pb import nri_pb2 as pb
from nri_plugin.simulated.deviceplugin import ContainerAllocation, DevicePlugin
from nri_plugin.simulated.runtime import DEFAULT_ENV, make_container

# Which of the free devices to give (the kubelet asks GetPreferredAllocation when the
# plugin offers it): (free ids in advertised order, how many) -> the ids.
Chooser = Callable[[Sequence[str], int], Sequence[str]]


class AdmissionRefused(Refused):
    """The kubelet cannot admit the pod: not enough free devices."""


@dataclass(frozen=True)
class Grant:
    """One container's devices in the kubelet's books, and the plugin's answer."""

    pod_uid: str
    namespace: str
    pod: str
    container: str
    device_ids: tuple[str, ...]
    allocation: ContainerAllocation
    claims: tuple[pr.DynamicResource, ...] = ()  # prepared DRA claims (dra.py)


def _lowest(free: Sequence[str], count: int) -> Sequence[str]:
    return free[:count]


class Kubelet:
    def __init__(self, plugin: DevicePlugin, choose: Chooser = _lowest) -> None:
        self.plugin = plugin
        self._choose = choose
        self._books: dict[tuple[str, str], Grant] = {}  # (pod uid, container) -> grant

    def allocated(self) -> set[str]:
        return {i for g in self._books.values() for i in g.device_ids}

    def admit(self, pod_uid: str, namespace: str, pod: str, container: str, count: int) -> Grant:
        """The container's `count` devices (none: an empty grant, not booked)."""
        key = (pod_uid, container)
        if key in self._books:
            return self._books[key]
        free = [i for i in self.plugin.device_ids() if i not in self.allocated()]
        if count > len(free):
            raise AdmissionRefused(
                f"pod {namespace}/{pod}: Allocate failed due to requested number of devices "
                f"unavailable for {self.plugin.resource}. Requested: {count}, "
                f"Available: {len(free)}"
            )
        if not count:
            return Grant(pod_uid, namespace, pod, container, (), ContainerAllocation())
        ids = tuple(self._choose(free, count))
        grant = Grant(pod_uid, namespace, pod, container, ids, self.plugin.allocate(ids))
        self._books[key] = grant
        return grant

    def prepare(
        self,
        pod_uid: str,
        namespace: str,
        pod: str,
        container: str,
        claims: tuple[pr.DynamicResource, ...],
    ) -> Grant:
        """The container's DRA claims, prepared by their drivers (no device-plugin
        devices): booked, and reported in PodResources."""
        grant = Grant(pod_uid, namespace, pod, container, (), ContainerAllocation(), claims)
        self._books[(pod_uid, container)] = grant
        return grant

    def remove_pod(self, pod_uid: str) -> None:
        for key in [k for k in self._books if k[0] == pod_uid]:
            del self._books[key]

    def pod_resources(self) -> tuple[pr.PodResources, ...]:
        """The books as PodResources List answers them: each pod holding devices, with
        its containers that hold some, in admission order."""
        pods: dict[str, list[Grant]] = {}
        # list(): one copy under the GIL, as a server thread may read while a test admits
        for grant in list(self._books.values()):
            pods.setdefault(grant.pod_uid, []).append(grant)
        return tuple(
            pr.PodResources(
                name=grants[0].pod,
                namespace=grants[0].namespace,
                containers=[
                    pr.ContainerResources(
                        name=g.container,
                        devices=[
                            pr.ContainerDevices(
                                resource_name=self.plugin.resource, device_ids=g.device_ids
                            )
                        ]
                        if g.device_ids
                        else [],
                        dynamic_resources=g.claims,
                    )
                    for g in grants
                ],
            )
            for grants in pods.values()
        )

    def allocatable(self) -> tuple[pr.ContainerDevices, ...]:
        """What GetAllocatableResources reports: every device the plugin advertises."""
        return (
            pr.ContainerDevices(
                resource_name=self.plugin.resource, device_ids=self.plugin.device_ids()
            ),
        )


def container_request(
    pod: pb.PodSandbox, name: str, grant: Grant, env: Iterable[str] = DEFAULT_ENV, **kw: Any
) -> pb.Container:
    """The CRI CreateContainer request for a container with its grant, as the kubelet
    sends it (the allocation's env after the pod spec's, its annotations, mounts, device
    nodes and CDI devices); other arguments as make_container takes them."""
    alloc = grant.allocation
    annotations = {**kw.pop("annotations", {}), **alloc.annotations}
    return make_container(
        pod,
        name,
        env=[*env, *(f"{k}={v}" for k, v in alloc.envs.items())],
        annotations=annotations,
        cdi_devices=alloc.cdi_devices,
        devices=[
            pb.LinuxDevice(path=d.path, type=d.type, major=d.major, minor=d.minor)
            for d in alloc.devices
        ],
        mounts=[
            pb.Mount(
                destination=m.destination, source=m.source, type=m.type, options=list(m.options)
            )
            for m in alloc.mounts
        ],
        **kw,
    )
