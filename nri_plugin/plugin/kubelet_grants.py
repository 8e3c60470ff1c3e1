"""KubeletGrants: the device ids the kubelet's PodResources API reports for a container,
and the CDI names of its DRA claims, as more grant evidence (docs/sla.md, "The GPU
grant"; resolve_grant reads the CDI names of the kinds in `gpu.grant-cdi-kinds`).

The runtime's own evidence (CDI devices, device nodes, device-list mounts) covers the
NVIDIA device plugin's cdi-cri, volume-mounts and device-node strategies. Its envvar
strategy leaves only `NVIDIA_VISIBLE_DEVICES`, which a pod could have written itself: for
such a container (GPU env, no runtime evidence) the kubelet's books are asked which GPUs
it really holds. A call runs on the plugin's event loop inside containerd's request
deadline, so it is short (`CALL_TIMEOUT`) and a failing kubelet costs one warning a
minute, never the container: the grant is then the runtime's evidence alone.

The client (grpcio: about 8 MiB of the plugin's memory) is imported at the first lookup,
so a node where no container's GPU evidence is its env alone never loads it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from nri_plugin.granted import GrantedResources
from nri_plugin.kubelet.errors import KubeletApiError
from nri_plugin.ops.logsetup import log_event
from nri_plugin.posixfs import issock

if TYPE_CHECKING:
    from nri_plugin.kubelet.podresources import PodResourcesClient

log = logging.getLogger("nri_sla.plugin.kubelet")

CALL_TIMEOUT = 0.5  # s; containerd gives the whole CreateContainer 2 s
WARN_EVERY = 60.0  # s between warnings about a kubelet that does not answer

Key = tuple[str, str, str]  # (namespace, pod name, container name)


def asks_kubelet(granted: GrantedResources) -> bool:
    """Only the env names GPUs: the kubelet's books say whether they were granted."""
    return granted.env_gpus is not None and not (
        granted.cdi_devices or granted.gpu_devices or granted.device_mounts
    )


class KubeletGrants:
    """PodResources lookups for the plugin; `socket` "" turns them off."""

    def __init__(
        self, socket: str, resources: Iterable[str], timeout: float = CALL_TIMEOUT
    ) -> None:
        self.socket = socket
        self.patterns = tuple(resources)
        self.timeout = timeout
        self._client: PodResourcesClient | None = None
        self._warned_at = -WARN_EVERY
        self._failures = 0

    def for_container(self, namespace: str, pod: str, container: str) -> tuple[str, ...]:
        """The GPU device ids the kubelet granted this container; () when it has none, or
        the kubelet cannot be asked."""
        client = self._connect()
        if client is None:
            return ()
        from nri_plugin.kubelet.podresources import granted_device_ids

        try:
            devices = client.get(namespace, pod)
        except KubeletApiError as exc:
            self._failed(exc)
            return ()
        self._failures = 0
        if devices is None:
            return ()
        return (
            *granted_device_ids(devices.devices(container), self.patterns),
            *devices.claim_devices(container),
        )

    def for_all(self) -> Mapping[Key, tuple[str, ...]]:
        """Every container's GPU device ids in one List (Synchronize)."""
        client = self._connect()
        if client is None:
            return {}
        from nri_plugin.kubelet.podresources import granted_device_ids

        try:
            pods = client.list()
        except KubeletApiError as exc:
            self._failed(exc)
            return {}
        self._failures = 0
        return {
            (p.namespace, p.name, name): ids
            for p in pods
            for name, resources in p.containers.items()
            if (ids := (*granted_device_ids(resources, self.patterns), *p.claim_devices(name)))
        }

    def _connect(self) -> PodResourcesClient | None:
        if not self.socket or not issock(self.socket):
            return None  # no kubelet on this node (or not mounted here): nothing to ask
        from nri_plugin.kubelet.podresources import PodResourcesClient  # grpc: see above

        if self._client is None:
            self._client = PodResourcesClient(self.socket, self.timeout)
        return self._client

    def _failed(self, exc: KubeletApiError) -> None:
        self._failures += 1
        now = time.monotonic()
        if now - self._warned_at >= WARN_EVERY:
            self._warned_at = now
            log_event(
                log,
                logging.WARNING,
                "kubelet PodResources unavailable; GPU grants from the runtime's evidence only",
                error=str(exc),
                failures=self._failures,
            )
