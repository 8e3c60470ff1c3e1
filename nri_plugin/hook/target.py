"""Who the container is, from the keys only its runtime writes (never from a pod's own text).

Pod annotations reach config.json too (containerd copies those its `pod_annotations` globs
match, CRI-O copies all of them, podman takes any `--annotation`), and a pod may name its
annotations like a runtime's keys. So the hook first decides which runtime wrote the spec,
from the container-type key that runtime always sets, and then reads the container's
name and namespace from that runtime's own keys only:

* containerd (CRI): `io.kubernetes.cri.*`, written after the pod annotations it copies;
* CRI-O: `io.kubernetes.cri-o.*` plus kubelet's labels (`io.kubernetes.pod.namespace`,
  `io.kubernetes.container.name`), which CRI-O writes after the pod's annotations, so
  kubelet's value wins. CRI-O sets `io.kubernetes.cri-o.Namespace` on pod sandboxes only:
  in a container's spec it can only be a pod's annotation;
* podman and plain runc: no Kubernetes namespace at all.

The namespace decides the node config's permissions (realtime, io.max, ...). When it
cannot be trusted (both runtimes' keys in one spec, namespace keys that disagree, a
namespace key without any runtime's marker) it is "": only a `*` pattern, a feature open
to every namespace, matches "", so every feature the node grants per namespace is refused
(hard) or dropped (soft), and `distrust` says why.
"""

from __future__ import annotations

from nri_plugin.value import Value

CONTAINERD_PREFIX = "io.kubernetes.cri."
CRIO_PREFIX = "io.kubernetes.cri-o."
CONTAINERD_TYPE = "io.kubernetes.cri.container-type"
CRIO_TYPE = "io.kubernetes.cri-o.ContainerType"
# runtime -> (container-type key, container name, pod namespace, pod name)
RUNTIME_KEYS = {
    "containerd": (CONTAINERD_TYPE, "io.kubernetes.cri.container-name",
                   "io.kubernetes.cri.sandbox-namespace", "io.kubernetes.cri.sandbox-name"),
    "cri-o": (CRIO_TYPE, "io.kubernetes.container.name", "io.kubernetes.pod.namespace",
              "io.kubernetes.pod.name"),
}
# Every key that names a namespace: any of them next to the runtime's own must agree.
NAMESPACE_KEYS = ("io.kubernetes.cri.sandbox-namespace", "io.kubernetes.pod.namespace",
                  "io.kubernetes.cri-o.Namespace")


class Target(Value):
    __slots__ = ("distrust", "id", "name", "namespace", "pod", "sandbox")

    def __init__(self, id: str, name: str, namespace: str, sandbox: bool,
                 pod: str = "", distrust: str = "") -> None:
        self.id = id
        self.name = name
        self.namespace = namespace  # "" when unknown: see the module docstring
        self.sandbox = sandbox
        self.pod = pod
        self.distrust = distrust  # why the namespace keys were not believed, or ""


def _runtime(annotations: dict[str, str]) -> tuple[str, str]:
    """(runtime, distrust): the runtime whose container-type key is set and whose rival's
    keys are absent; ("", why) when the keys contradict each other."""
    containerd = any(k.startswith(CONTAINERD_PREFIX) for k in annotations)
    crio = any(k.startswith(CRIO_PREFIX) for k in annotations)
    if containerd and crio:
        return "", ("the spec carries both containerd's (io.kubernetes.cri.*) and CRI-O's "
                    "(io.kubernetes.cri-o.*) keys")
    if CONTAINERD_TYPE in annotations:
        return "containerd", ""
    if CRIO_TYPE in annotations:
        return "cri-o", ""
    named = [k for k in NAMESPACE_KEYS if k in annotations]
    if named:
        return "", f"{named[0]} is set but no runtime's container-type key is"
    return "", ""


def _show(value: str) -> str:
    return repr(value if len(value) <= 63 else value[:60] + "...")


def identify(container_id: str, annotations: dict[str, str]) -> Target:
    runtime, distrust = _runtime(annotations)
    if runtime:
        type_key, name_key, ns_key, pod_key = RUNTIME_KEYS[runtime]
        namespace = annotations.get(ns_key, "")
        for other in NAMESPACE_KEYS:
            if other != ns_key and annotations.get(other, namespace) != namespace:
                distrust = (f"{other}={_show(annotations[other])} contradicts {runtime}'s "
                            f"{ns_key}={_show(namespace)}")
                namespace = ""
                break
        return Target(id=container_id, name=annotations.get(name_key) or container_id,
                      namespace=namespace, sandbox=annotations.get(type_key) == "sandbox",
                      pod=annotations.get(pod_key, ""), distrust=distrust)
    # No runtime to believe: names only label the logs and pick among the pod's own SLA
    # documents, so any runtime's key will do; the namespace stays unknown.
    keys = RUNTIME_KEYS.values()
    name = next((annotations[k[1]] for k in keys if annotations.get(k[1])), container_id)
    pod = next((annotations[k[3]] for k in keys if annotations.get(k[3])), "")
    sandbox = any(annotations.get(k[0]) == "sandbox" for k in keys)
    return Target(id=container_id, name=name, namespace="", sandbox=sandbox, pod=pod,
                  distrust=distrust)


def has_sla(annotations: dict[str, str], name: str) -> bool:
    """Cheap pre-check before importing the SLA parser (and yaml): may there be an SLA for
    this container? `<prefix>/pod` or `<prefix>/container.<name>` under any prefix (the
    node config may change `sla.nri.io`; the parser decides). Pod annotations reach every
    container, so another container's `container.<other>` key alone does not count."""
    mine = "/container." + name
    return any(k.endswith("/pod") or k.endswith(mine) for k in annotations)
