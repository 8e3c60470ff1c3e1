"""Kubernetes manifests in, pods out: what `explain`, `validate` and the demo read.

Accepts Pods, Lists of them, and the workload kinds that carry a pod template
(Deployment, StatefulSet, DaemonSet, ReplicaSet, Job, CronJob), in one or more YAML
documents per file (`-`: standard input). A document that cannot be used is reported on
its own and the file's other documents are read.

Manifests are read through the hardened YAML reader the annotations use
(nri_plugin.text.safeyaml) with bounds sized for Kubernetes objects: the file's size is
checked while reading (a FIFO or /dev/zero cannot make it read on), anchors and aliases
(billion laughs), tags and duplicate keys are refused, and nesting, values, documents and
containers are capped, so a hostile manifest costs bounded time and memory and every problem is one
ManifestError line naming the file.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nri_plugin.errors import InvalidInput
from nri_plugin.granted import DEFAULT_CPU_PERIOD_US, SHARES_PER_CPU, GrantedResources
from nri_plugin.text.errors import FieldProblem, YamlProblem
from nri_plugin.text.quantities import parse_count, parse_cpu, parse_size
from nri_plugin.text.safeyaml import load_all

MAX_MANIFEST_BYTES = 4 * 1024 * 1024
# Far beyond real objects (a Deployment is ~10 levels and a few hundred values; a CRD's
# schema can reach ~30 levels), far below what costs real memory (~100 bytes per value).
MAX_MANIFEST_DEPTH = 64
MAX_MANIFEST_NODES = 256 * 1024
MAX_MANIFEST_DOCUMENTS = 4096
# Containers per manifest file, all documents together: a `kubectl get pods -A -o yaml`
# of a large cluster fits (the 4 MiB file holds ~1,500 pods), a file of `- {}` does not.
MAX_MANIFEST_CONTAINERS = 10_000
_TEMPLATED = {
    "Deployment",
    "StatefulSet",
    "DaemonSet",
    "ReplicaSet",
    "Job",
    "ReplicationController",
}


class ManifestError(InvalidInput, ValueError):
    """A manifest nri-sla cannot read: one line naming the file (and the object)."""


class ManifestTooLarge(ManifestError):
    """A manifest past the work bound: the whole file is refused, not one document."""


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

    def kubelet_grant(
        self, cdi_devices: tuple[str, ...] = (), env_gpus: str | None = None
    ) -> GrantedResources:
        """What the kubelet hands the runtime for these resources (shares from the request,
        quota from the limit at the 100ms period), plus a device plugin's CDI names and
        NVIDIA_VISIBLE_DEVICES from the env (reported, never a grant)."""
        shares = max(MIN_SHARES, (self.cpu_request_millis or 0) * SHARES_PER_CPU // 1000)
        quota = period = None
        if self.cpu_limit_millis:
            period = DEFAULT_CPU_PERIOD_US
            quota = max(MIN_QUOTA_US, self.cpu_limit_millis * period // 1000)
        return GrantedResources(
            cpu_quota=quota,
            cpu_period=period,
            cpu_shares=shares,
            memory_limit=self.memory_limit,
            env_gpus=env_gpus,
            cdi_devices=cdi_devices,
        )


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
    # A workload's (Deployment, Job, ...) own annotation keys, not its pod template's.
    workload_annotations: tuple[str, ...] = ()
    template: str = ""  # where a workload holds its pod template: spec.template, ...


def _mapping(value: Any, what: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ManifestError(f"{what} must be a mapping")
    return value


def _pod_from(
    template: dict[str, Any],
    meta: dict[str, Any],
    source: str,
    budget: _Budget,
    workload: dict[str, Any] | None = None,
    template_path: str = "",
) -> PodSpec:
    """`workload`: the annotations on a workload's own metadata (the runtime never sees
    them; validate warns about nri-sla's keys there); `template_path`: where the
    workload holds `template`."""
    pod_meta = _mapping(template.get("metadata"), f"{source}: metadata")
    spec = _mapping(template.get("spec"), f"{source}: spec")
    annotations = _mapping(pod_meta.get("annotations"), f"{source}: metadata.annotations")
    names: list[str] = []
    init: list[str] = []
    envs, resources = {}, {}
    for field, unnamed in (("initContainers", "init-container"), ("containers", "container")):
        containers = spec.get(field) or []
        if not isinstance(containers, list):
            raise ManifestError(f"{source}: spec.{field} must be a list")
        budget.take(len(containers))
        for i, container in enumerate(containers):
            where = f"{source}: spec.{field}[{i}]"
            container = _mapping(container, where)
            name = str(container.get("name", f"{unnamed}-{i}"))
            (init if field == "initContainers" else names).append(name)
            env = container.get("env") or []
            if not isinstance(env, list):
                raise ManifestError(f"{where}.env must be a list")
            envs[name] = {
                str(e.get("name")): str(e.get("value", ""))
                for e in env
                if isinstance(e, dict) and "value" in e
            }
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
        workload_annotations=tuple(str(k) for k in workload or ()),
        template=template_path,
    )


def _resources(spec: dict[str, Any], where: str) -> ContainerResources:
    limits = _mapping(spec.get("limits"), f"{where}.resources.limits")
    requests = _mapping(spec.get("requests"), f"{where}.resources.requests")

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

    # Limits first: a request left out defaults to the limit (as the API server does), and
    # a bad limit is named as the limit it is.
    cpu_limit = millis(limits, "limits")
    cpu_request = millis(requests, "requests")
    return ContainerResources(
        cpu_request_millis=cpu_limit if cpu_request is None else cpu_request,
        cpu_limit_millis=cpu_limit,
        memory_limit=quantity(limits, "memory", parse_size, "limits"),
        gpus=quantity(limits, GPU_RESOURCE, parse_count, "limits") or 0,
    )


def _pods_in(doc: Any, source: str, budget: _Budget) -> Iterator[PodSpec]:
    if doc is None:
        return
    if not isinstance(doc, dict):
        raise ManifestError(f"{source}: not a mapping (a Kubernetes object)")
    kind = doc.get("kind")
    if not isinstance(kind, str):
        return  # not a Kubernetes object nri-sla reads (and not hashable, maybe)
    meta = _mapping(doc.get("metadata"), f"{source}: metadata")
    where = f"{source}: {short(kind)}/{short(meta.get('name', '?'))}"
    if kind == "Pod":
        yield _pod_from(doc, meta, where, budget)
    elif kind.endswith("List"):
        items = doc.get("items") or []
        if not isinstance(items, list):
            raise ManifestError(f"{where}: items must be a list")
        for i, item in enumerate(items):
            yield from _pods_in(item, f"{source}: items[{i}]", budget)
    elif kind in _TEMPLATED or kind == "CronJob":
        path = "spec.jobTemplate.spec" if kind == "CronJob" else "spec"
        spec: Any = doc
        for step in path.split("."):
            spec = _mapping(spec.get(step), f"{where}: {path}")
        template = _mapping(spec.get("template"), f"{where}: {path}.template")
        own = _mapping(meta.get("annotations"), f"{where}: metadata.annotations")
        yield _pod_from(
            template, meta, where, budget, workload=own, template_path=f"{path}.template"
        )


def short(value: object) -> str:
    """A manifest value in a message: one line, at most 63 characters (a name's limit)."""
    text = str(value)
    text = text if len(text) <= 63 else text[:60] + "..."
    return text if text.isprintable() else repr(text)


STDIN = "-"
STDIN_NAME = "<stdin>"


class _Budget:
    """The containers one manifest may still hold: validate and explain do work per
    container, so a manifest of a few `- {}` per line stops at once, not after an hour."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.left = MAX_MANIFEST_CONTAINERS

    def take(self, count: int) -> None:
        self.left -= count
        if self.left < 0:
            raise ManifestTooLarge(
                f"{self.source}: holds more than {MAX_MANIFEST_CONTAINERS} "
                "containers; at most that many are checked per manifest"
            )


def source_name(path: str | Path) -> str:
    return STDIN_NAME if str(path) == STDIN else str(path)


def _read(path: str | Path) -> str:
    name = source_name(path)
    try:
        if name == STDIN_NAME:
            data = sys.stdin.buffer.read(MAX_MANIFEST_BYTES + 1)
        else:
            with Path(path).open("rb") as file:
                data = file.read(MAX_MANIFEST_BYTES + 1)  # bounded even for a FIFO or device
    except OSError as exc:
        raise ManifestError(f"{name}: cannot read: {exc.strerror or exc}") from None
    if len(data) > MAX_MANIFEST_BYTES:
        raise ManifestError(f"{name}: larger than {MAX_MANIFEST_BYTES} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ManifestError(f"{name}: cannot read: not UTF-8 text (byte {exc.start})") from None


@dataclass(frozen=True)
class Document:
    """One YAML document of a manifest: its pods, or why it cannot be used (the file's
    other documents are read all the same)."""

    source: str
    pods: tuple[PodSpec, ...] = ()
    error: str = ""


def load_documents(path: str | Path) -> list[Document]:
    """Every document of a manifest file (`-`: standard input). Raises ManifestError,
    one line naming the file, when the file as a whole cannot be read: unreadable, not
    YAML, past a bound (ManifestTooLarge)."""
    name = source_name(path)
    text = _read(path)
    try:
        docs = load_all(
            text,
            max_bytes=MAX_MANIFEST_BYTES,
            max_depth=MAX_MANIFEST_DEPTH,
            max_nodes=MAX_MANIFEST_NODES,
            max_documents=MAX_MANIFEST_DOCUMENTS,
        )
    except YamlProblem as exc:
        raise ManifestError(f"{name}: {exc}") from None
    budget = _Budget(name)
    documents: list[Document] = []
    for i, doc in enumerate(docs):
        source = name if len(docs) == 1 else f"{name}[{i}]"
        try:
            documents.append(Document(source, tuple(_pods_in(doc, source, budget))))
        except ManifestTooLarge:
            raise
        except ManifestError as exc:
            documents.append(Document(source, error=str(exc)))
    return documents


def load_pods(path: str | Path) -> list[PodSpec]:
    """Every pod (or pod template) in a manifest file. Raises ManifestError, whose
    message is one line naming the file (the first document that cannot be used)."""
    pods: list[PodSpec] = []
    for document in load_documents(path):
        if document.error:
            raise ManifestError(document.error)
        pods.extend(document.pods)
    return pods
