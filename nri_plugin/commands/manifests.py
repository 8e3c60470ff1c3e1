"""Kubernetes manifests in, pods out: what `explain`, `validate` and the demo read.

Accepts Pods, Lists of them, and the workload kinds that carry a pod template
(Deployment, StatefulSet, DaemonSet, ReplicaSet, Job, CronJob), in one or more YAML
documents per file.

Manifests are read through the hardened YAML reader the annotations use
(nri_plugin.text.safeyaml) with bounds sized for Kubernetes objects: the file's size is
checked while reading (a FIFO or /dev/zero cannot make it read on), anchors and aliases
(billion laughs), tags and duplicate keys are refused, and nesting, values and documents
are capped, so a hostile manifest costs bounded time and memory and every problem is one
ManifestError line naming the file.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nri_plugin.errors import InvalidInput
from nri_plugin.granted import DEFAULT_CPU_PERIOD_US, SHARES_PER_CPU, GrantedResources
from nri_plugin.text.fields import FieldProblem
from nri_plugin.text.quantities import parse_count, parse_cpu, parse_size
from nri_plugin.text.safeyaml import YamlProblem, load_all

MAX_MANIFEST_BYTES = 4 * 1024 * 1024
# Far beyond real objects (a Deployment is ~10 levels and a few hundred values; a CRD's
# schema can reach ~30 levels), far below what costs real memory (~100 bytes per value).
MAX_MANIFEST_DEPTH = 64
MAX_MANIFEST_NODES = 256 * 1024
MAX_MANIFEST_DOCUMENTS = 4096
_TEMPLATED = {"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job",
              "ReplicationController"}


class ManifestError(InvalidInput, ValueError):
    """A manifest nri-sla cannot read: one line naming the file (and the object)."""


GPU_RESOURCE = "nvidia.com/gpu"  # the NVIDIA device plugin's extended resource
MIN_SHARES = 2  # kubelet: cpu shares of a container without a CPU request
MIN_QUOTA_US = 1000  # kubelet: the smallest CFS quota it sets


@dataclass(frozen=True)
class ContainerResources:
    """A container's `resources` (requests default to limits, as the API server does)."""

    cpu_request_millis: int | None = None
    cpu_limit_millis: int | None = None
    memory_limit: int | None = None
    gpus: int = 0  # limits nvidia.com/gpu

    def kubelet_grant(self, cdi_devices: tuple[str, ...] = (),
                      env_gpus: str | None = None) -> GrantedResources:
        """What the kubelet hands the runtime for these resources (shares from the request,
        quota from the limit at the 100ms period), plus a device plugin's CDI names and
        NVIDIA_VISIBLE_DEVICES from the env (reported, never a grant)."""
        shares = max(MIN_SHARES, (self.cpu_request_millis or 0) * SHARES_PER_CPU // 1000)
        quota = period = None
        if self.cpu_limit_millis:
            period = DEFAULT_CPU_PERIOD_US
            quota = max(MIN_QUOTA_US, self.cpu_limit_millis * period // 1000)
        return GrantedResources(cpu_quota=quota, cpu_period=period, cpu_shares=shares,
                                memory_limit=self.memory_limit, env_gpus=env_gpus,
                                cdi_devices=cdi_devices)


@dataclass(frozen=True)
class PodSpec:
    """The parts of a pod nri-sla reads."""

    source: str  # "file.yaml: Deployment/web" for messages
    namespace: str
    name: str
    annotations: dict[str, str]
    # Every container the runtime creates for the pod, in that order: the init containers
    # (CreateContainer comes for them too, and the pod's SLA applies), then the others.
    containers: tuple[str, ...]
    environments: dict[str, dict[str, str]]  # container -> literal env values
    resources: dict[str, ContainerResources]  # container -> its resources
    init_containers: frozenset[str] = frozenset()  # the names of spec.initContainers


def _mapping(value: Any, what: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ManifestError(f"{what} must be a mapping")
    return value


def _pod_from(template: dict[str, Any], meta: dict[str, Any], source: str) -> PodSpec:
    pod_meta = _mapping(template.get("metadata"), f"{source}: metadata")
    spec = _mapping(template.get("spec"), f"{source}: spec")
    annotations = _mapping(pod_meta.get("annotations"), f"{source}: metadata.annotations")
    names, envs, resources = [], {}, {}
    init: list[str] = []
    for field, unnamed in (("initContainers", "init-container"), ("containers", "container")):
        containers = spec.get(field) or []
        if not isinstance(containers, list):
            raise ManifestError(f"{source}: spec.{field} must be a list")
        for i, container in enumerate(containers):
            where = f"{source}: spec.{field}[{i}]"
            container = _mapping(container, where)
            name = str(container.get("name", f"{unnamed}-{i}"))
            (init if field == "initContainers" else names).append(name)
            env = container.get("env") or []
            if not isinstance(env, list):
                raise ManifestError(f"{where}.env must be a list")
            envs[name] = {str(e.get("name")): str(e.get("value", "")) for e in env
                          if isinstance(e, dict) and "value" in e}
            resources[name] = _resources(_mapping(container.get("resources"), where), where)
    return PodSpec(
        source=source,
        namespace=str(pod_meta.get("namespace") or meta.get("namespace") or "default"),
        name=str(pod_meta.get("name") or meta.get("name") or "unnamed"),
        annotations={str(k): str(v) for k, v in annotations.items()},
        containers=(*init, *names),
        environments=envs,
        resources=resources,
        init_containers=frozenset(init),
    )


def _resources(spec: dict[str, Any], where: str) -> ContainerResources:
    limits = _mapping(spec.get("limits"), f"{where}.resources.limits")
    requests = {**limits, **_mapping(spec.get("requests"), f"{where}.resources.requests")}

    def quantity(section: dict[str, Any], name: str, parse: Any, what: str) -> Any:
        if section.get(name) is None:
            return None
        try:
            return parse(section[name])
        except FieldProblem as exc:
            raise ManifestError(f"{where}.resources.{what}.{name} {exc}") from None

    def millis(section: dict[str, Any], what: str) -> int | None:
        cpus = quantity(section, "cpu", parse_cpu, what)
        return None if cpus is None else round(cpus * 1000)

    return ContainerResources(
        cpu_request_millis=millis(requests, "requests"), cpu_limit_millis=millis(limits, "limits"),
        memory_limit=quantity(limits, "memory", parse_size, "limits"),
        gpus=quantity(limits, GPU_RESOURCE, parse_count, "limits") or 0)


def _pods_in(doc: Any, source: str) -> Iterator[PodSpec]:
    if doc is None:
        return
    if not isinstance(doc, dict):
        raise ManifestError(f"{source}: not a mapping (a Kubernetes object)")
    kind = doc.get("kind")
    if not isinstance(kind, str):
        return  # not a Kubernetes object nri-sla reads (and not hashable, maybe)
    meta = _mapping(doc.get("metadata"), f"{source}: metadata")
    where = f"{source}: {kind}/{_short(meta.get('name', '?'))}"
    if kind == "Pod":
        yield _pod_from(doc, meta, where)
    elif kind.endswith("List"):
        items = doc.get("items") or []
        if not isinstance(items, list):
            raise ManifestError(f"{where}: items must be a list")
        for i, item in enumerate(items):
            yield from _pods_in(item, f"{source}: items[{i}]")
    elif kind in _TEMPLATED:
        template = _mapping(_mapping(doc.get("spec"), where).get("template"), where)
        yield _pod_from(template, meta, where)
    elif kind == "CronJob":
        job = _mapping(_mapping(doc.get("spec"), where).get("jobTemplate"), where)
        template = _mapping(_mapping(job.get("spec"), where).get("template"), where)
        yield _pod_from(template, meta, where)


def _short(value: object) -> str:
    """A manifest value in a message: one line, at most 63 characters (a name's limit)."""
    text = str(value)
    text = text if len(text) <= 63 else text[:60] + "..."
    return text if text.isprintable() else repr(text)


def _read(path: Path) -> str:
    try:
        with path.open("rb") as file:
            data = file.read(MAX_MANIFEST_BYTES + 1)  # bounded even for a FIFO or device
    except OSError as exc:
        raise ManifestError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if len(data) > MAX_MANIFEST_BYTES:
        raise ManifestError(f"{path}: larger than {MAX_MANIFEST_BYTES} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ManifestError(f"{path}: cannot read: not UTF-8 text (byte {exc.start})") \
            from None


def load_pods(path: str | Path) -> list[PodSpec]:
    """Every pod (or pod template) in a manifest file. Raises ManifestError, whose
    message is one line naming the file."""
    path = Path(path)
    text = _read(path)
    try:
        docs = load_all(text, max_bytes=MAX_MANIFEST_BYTES, max_depth=MAX_MANIFEST_DEPTH,
                        max_nodes=MAX_MANIFEST_NODES, max_documents=MAX_MANIFEST_DOCUMENTS)
    except YamlProblem as exc:
        raise ManifestError(f"{path}: {exc}") from None
    pods: list[PodSpec] = []
    for i, doc in enumerate(docs):
        pods.extend(_pods_in(doc, f"{path}" if len(docs) == 1 else f"{path}[{i}]"))
    return pods
