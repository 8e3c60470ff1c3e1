"""What the plugin needs of Kubernetes Events before it knows they are on: the pod an
event is about (`InvolvedPod`, named in the plugin's calls whether or not events are on)
and the API server of the pod's service account (`ApiServer.in_cluster`: None outside a
pod). The Event objects and the recorder's correlation (ops.kube_events) and the sender
(ops.kube_sender) are imported only once there is a service account to send with: 0.1
MiB of a plugin's memory otherwise (docs/benchmarks.md, "Plugin memory")."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class InvolvedPod:
    """The pod an event is about, as the runtime named it (NRI's PodSandbox), and the
    container in it ("": the pod itself)."""

    namespace: str
    name: str
    uid: str
    container: str = ""

    def reference(self) -> dict[str, str]:
        ref = {
            "apiVersion": "v1",
            "kind": "Pod",
            "namespace": self.namespace,
            "name": self.name,
            "uid": self.uid,
        }
        if self.container:
            ref["fieldPath"] = f"spec.containers{{{self.container}}}"
        return ref


@dataclass(frozen=True, slots=True)
class ApiServer:
    """Where the events go and who sends them."""

    host: str
    port: int
    token_path: str
    ca_path: str

    @classmethod
    def in_cluster(
        cls, service_account: str, environ: Mapping[str, str] = os.environ
    ) -> ApiServer | None:
        """The pod's API server and service account; None outside a pod (no
        KUBERNETES_SERVICE_HOST, or no token in `service_account`)."""
        host = environ.get("KUBERNETES_SERVICE_HOST", "")
        port = environ.get("KUBERNETES_SERVICE_PORT", "443")
        token = os.path.join(service_account, "token")
        if not host or not port.isdigit() or not os.path.isfile(token):
            return None
        return cls(host, int(port), token, os.path.join(service_account, "ca.crt"))
