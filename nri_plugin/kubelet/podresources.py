"""A client of the kubelet's PodResources API v1: which devices the kubelet granted to each
container (`List`, `Get`), as plain values: device-plugin device ids by resource, and the
CDI device names of its DRA claims (`dynamic_resources`).

The kubelet's answer is trusted as the grant, but not its size: every answer is bounded
(bytes on the wire, pods, containers per pod, devices per container, id lengths) before
nri-sla builds anything from it. A pod over a bound in a List is left out of it, with a
warning once per pod, and the rest of the List kept: one odd pod does not hide every
other grant. One failure type, KubeletApiError, with a one-line message naming the
socket.
"""

from __future__ import annotations

import fnmatch
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import grpc

from nri_plugin.kubelet.errors import KubeletApiError
from nri_plugin.kubelet.pb import podresources_v1_pb2 as pb
from nri_plugin.kubelet.pb import podresources_v1_pb2_grpc as pb_grpc
from nri_plugin.ops.logsetup import log_event
from nri_plugin.posixfs import issock

log = logging.getLogger("nri_sla.kubelet")

DEFAULT_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
MAX_MESSAGE_BYTES = 16 * 1024 * 1024  # the kubelet's own default limit for this API
MAX_PODS = 10_000  # far above the kubelet's max-pods (110 by default, 2500 at most tested)
MAX_CONTAINERS = 1_000  # per pod
MAX_DEVICES = 4_096  # device ids per container, over all its resources
MAX_NAME_CHARS = 256  # a device id, resource, pod or container name
MAX_WARNED_PODS = 1_000  # oversized pods remembered so that each is warned about once
# What a kubelet with the KubeletPodResourcesGet gate off (1.27 to 1.33) answers Get with,
# as UNKNOWN; kubelets before 1.27 answer UNIMPLEMENTED. Either way: List.
GET_DISABLED = "Get method disabled"

# container name -> resource name (e.g. "nvidia.com/gpu") -> device ids, in kubelet order
ContainerGrants = Mapping[str, Mapping[str, tuple[str, ...]]]


@dataclass(frozen=True)
class PodDevices:
    """The device-plugin devices the kubelet granted to one pod's containers."""

    namespace: str
    name: str
    containers: ContainerGrants
    # container name -> the CDI device names of its DRA claims, in kubelet order
    claims: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def devices(self, container: str) -> Mapping[str, tuple[str, ...]]:
        """resource name -> device ids of `container` (empty when it has none)."""
        return self.containers.get(container, {})

    def claim_devices(self, container: str) -> tuple[str, ...]:
        """The CDI device names of `container`'s DRA claims."""
        return self.claims.get(container, ())


def granted_device_ids(
    resources: Mapping[str, Sequence[str]], patterns: Sequence[str]
) -> tuple[str, ...]:
    """The device ids of one container's resources whose name matches one of `patterns`
    (resource names, `*` matching any run of characters, e.g. "nvidia.com/mig-*"), in
    resource-name order, each id once."""
    ids: dict[str, None] = {}
    for resource in sorted(resources):
        if any(fnmatch.fnmatchcase(resource, p) for p in patterns):
            ids.update(dict.fromkeys(resources[resource]))
    return tuple(ids)


class PodResourcesClient:
    """A connection to the kubelet's PodResources socket. Not thread-safe to close while
    a call is in flight; each call is bounded by `timeout` seconds."""

    def __init__(self, socket_path: str = DEFAULT_SOCKET, timeout: float = 5.0) -> None:
        self.socket_path = socket_path
        self.timeout = timeout
        self._channel = grpc.insecure_channel(
            f"unix://{socket_path}",
            options=[
                ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                ("grpc.enable_http_proxy", 0),
            ],
        )
        self._stub = pb_grpc.PodResourcesListerStub(self._channel)
        # Kubelets without Get (GET_DISABLED); once seen, get() goes straight to List.
        self._get_unimplemented = False
        self._warned: set[tuple[str, str]] = set()  # oversized pods warned about

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> PodResourcesClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def list(self) -> tuple[PodDevices, ...]:
        """Every pod the kubelet knows, with its containers' device grants."""
        answer = self._call("List", self._stub.List, pb.ListPodResourcesRequest())
        if len(answer.pod_resources) > MAX_PODS:
            raise self._error(
                f"List: {len(answer.pod_resources)} pods, more than the {MAX_PODS} nri-sla reads"
            )
        pods = []
        for p in answer.pod_resources:
            try:
                pods.append(self._pod(p))
            except KubeletApiError as exc:
                self._skipped(p, exc)
        return tuple(pods)

    def _skipped(self, pod: pb.PodResources, exc: KubeletApiError) -> None:
        """A pod over a bound, left out of a List: one warning per pod."""
        key = (pod.namespace[:MAX_NAME_CHARS], pod.name[:MAX_NAME_CHARS])
        if key in self._warned:
            return
        if len(self._warned) >= MAX_WARNED_PODS:
            self._warned.clear()  # bounded: a pod warned about twice at worst
        self._warned.add(key)
        log_event(
            log,
            logging.WARNING,
            "kubelet PodResources: a pod left out of the List; "
            "its containers' device grants are not read",
            error=str(exc),
        )

    def get(self, namespace: str, pod: str) -> PodDevices | None:
        """One pod's grants; None when the kubelet does not know the pod. Uses List on
        kubelets without Get."""
        if not self._get_unimplemented:
            request = pb.GetPodResourcesRequest(pod_name=pod, pod_namespace=namespace)
            try:
                answer = self._stub.Get(request, timeout=self.timeout)
            except grpc.RpcError as exc:
                code = exc.code()
                if code == grpc.StatusCode.UNIMPLEMENTED or (
                    code == grpc.StatusCode.UNKNOWN and GET_DISABLED in (exc.details() or "")
                ):
                    self._get_unimplemented = True
                elif code == grpc.StatusCode.NOT_FOUND or (
                    code == grpc.StatusCode.UNKNOWN and "not found" in (exc.details() or "")
                ):
                    return None  # the kubelet answers an unknown pod with "... not found"
                else:
                    raise self._rpc_error("Get", exc) from None
            else:
                return self._pod(answer.pod_resources)
        return next((p for p in self.list() if (p.namespace, p.name) == (namespace, pod)), None)

    def _call(self, method: str, call, request):
        try:
            return call(request, timeout=self.timeout)
        except grpc.RpcError as exc:
            raise self._rpc_error(method, exc) from None

    def _rpc_error(self, method: str, exc: grpc.RpcError) -> KubeletApiError:
        code = exc.code()
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
            return self._error(f"{method}: no answer within {self.timeout:g}s")
        if code == grpc.StatusCode.UNAVAILABLE and not issock(self.socket_path):
            return self._error(
                "the socket does not exist (is the kubelet running, and is "
                "its pod-resources directory mounted here?)"
            )
        if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
            return self._error(f"{method}: the answer is larger than {MAX_MESSAGE_BYTES} bytes")
        details = " ".join((exc.details() or "").split())[:200]
        return self._error(f"{method} failed: {code.name}: {details}")

    def _error(self, message: str) -> KubeletApiError:
        return KubeletApiError(f"kubelet PodResources API at {self.socket_path}: {message}")

    def _pod(self, pod: pb.PodResources) -> PodDevices:
        where = f"pod {_short(pod.namespace)}/{_short(pod.name)}"
        if len(pod.containers) > MAX_CONTAINERS:
            raise self._error(
                f"{where}: {len(pod.containers)} containers, more than {MAX_CONTAINERS}"
            )
        containers: dict[str, dict[str, tuple[str, ...]]] = {}
        claims: dict[str, tuple[str, ...]] = {}
        for c in pod.containers:
            resources: dict[str, tuple[str, ...]] = {}
            count = 0
            for d in c.devices:
                count += len(d.device_ids)
                if count > MAX_DEVICES:
                    raise self._error(
                        f"{where} container {_short(c.name)}: more than {MAX_DEVICES} devices"
                    )
                ids = resources.get(d.resource_name, ()) + tuple(d.device_ids)
                resources[d.resource_name] = ids
            cdi: list[str] = []
            for claim in c.dynamic_resources:
                for r in claim.claim_resources:
                    count += len(r.cdi_devices)
                    if count > MAX_DEVICES:
                        raise self._error(
                            f"{where} container {_short(c.name)}: more than {MAX_DEVICES} devices"
                        )
                    cdi += (d.name for d in r.cdi_devices)
            too_long = [
                n
                for n in (
                    pod.namespace,
                    pod.name,
                    c.name,
                    *resources,
                    *cdi,
                    *(i for ids in resources.values() for i in ids),
                )
                if len(n) > MAX_NAME_CHARS
            ]
            if too_long:
                raise self._error(
                    f"{where}: a name or device id longer than "
                    f"{MAX_NAME_CHARS} characters: {_short(too_long[0])}"
                )
            containers[c.name] = resources
            if cdi:
                claims[c.name] = tuple(dict.fromkeys(cdi))
        return PodDevices(pod.namespace, pod.name, containers, claims)


def _short(text: str, limit: int = 64) -> str:
    return text if len(text) <= limit else text[:limit] + "..."
