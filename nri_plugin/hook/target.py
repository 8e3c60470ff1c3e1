"""Who the container is, as far as the annotations in its config.json tell.

containerd's CRI sets io.kubernetes.cri.*; CRI-O copies kubelet's labels
(io.kubernetes.container.name, io.kubernetes.pod.namespace) and its own
io.kubernetes.cri-o.* keys. Pod sandboxes (pause containers) never get an SLA.
"""

from __future__ import annotations

from nri_plugin.value import Value

NAME_KEYS = ("io.kubernetes.cri.container-name", "io.kubernetes.container.name")
NAMESPACE_KEYS = ("io.kubernetes.cri.sandbox-namespace", "io.kubernetes.pod.namespace")
POD_KEYS = ("io.kubernetes.cri.sandbox-name", "io.kubernetes.pod.name")
TYPE_KEYS = ("io.kubernetes.cri.container-type", "io.kubernetes.cri-o.ContainerType")


class Target(Value):
    __slots__ = ("id", "name", "namespace", "pod", "sandbox")

    def __init__(self, id: str, name: str, namespace: str, sandbox: bool,
                 pod: str = "") -> None:
        self.id = id
        self.name = name
        self.namespace = namespace
        self.sandbox = sandbox
        self.pod = pod


def identify(container_id: str, annotations: dict[str, str]) -> Target:
    name = next((annotations[k] for k in NAME_KEYS if annotations.get(k)), container_id)
    namespace = next((annotations[k] for k in NAMESPACE_KEYS if annotations.get(k)), "")
    pod = next((annotations[k] for k in POD_KEYS if annotations.get(k)), "")
    sandbox = any(annotations.get(k) == "sandbox" for k in TYPE_KEYS)
    return Target(id=container_id, name=name, namespace=namespace, sandbox=sandbox, pod=pod)


def has_sla(annotations: dict[str, str], name: str) -> bool:
    """Cheap pre-check before importing the SLA parser (and yaml): may there be an SLA for
    this container? `<prefix>/pod` or `<prefix>/container.<name>` under any prefix (the
    node config may change `sla.nri.io`; the parser decides). Pod annotations reach every
    container, so another container's `container.<other>` key alone does not count."""
    mine = "/container." + name
    return any(k.endswith("/pod") or k.endswith(mine) for k in annotations)
