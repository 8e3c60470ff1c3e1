"""Kubernetes manifests in, pods out: what `explain`, `validate` and the demo read.

Accepts Pods, Lists of them, and the workload kinds that carry a pod template
(Deployment, StatefulSet, DaemonSet, ReplicaSet, Job, CronJob), in one or more YAML
documents per file.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

MAX_MANIFEST_BYTES = 4 * 1024 * 1024
_TEMPLATED = {"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job",
              "ReplicationController"}


class ManifestError(ValueError):
    pass


@dataclass(frozen=True)
class PodSpec:
    """The parts of a pod nri-sla reads."""

    source: str  # "file.yaml: Deployment/web" for messages
    namespace: str
    name: str
    annotations: dict[str, str]
    containers: tuple[str, ...]
    environments: dict[str, dict[str, str]]  # container -> literal env values


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
    containers = spec.get("containers") or []
    if not isinstance(containers, list):
        raise ManifestError(f"{source}: spec.containers must be a list")
    names, envs = [], {}
    for i, container in enumerate(containers):
        container = _mapping(container, f"{source}: spec.containers[{i}]")
        name = str(container.get("name", f"container-{i}"))
        names.append(name)
        envs[name] = {str(e.get("name")): str(e.get("value", "")) for e in
                      container.get("env") or [] if isinstance(e, dict) and "value" in e}
    return PodSpec(
        source=source,
        namespace=str(pod_meta.get("namespace") or meta.get("namespace") or "default"),
        name=str(pod_meta.get("name") or meta.get("name") or "unnamed"),
        annotations={str(k): str(v) for k, v in annotations.items()},
        containers=tuple(names),
        environments=envs,
    )


def _pods_in(doc: Any, source: str) -> Iterator[PodSpec]:
    if doc is None:
        return
    doc = _mapping(doc, source)
    kind = doc.get("kind")
    meta = _mapping(doc.get("metadata"), f"{source}: metadata")
    where = f"{source}: {kind}/{meta.get('name', '?')}"
    if kind == "Pod":
        yield _pod_from(doc, meta, where)
    elif kind == "List" or (isinstance(kind, str) and kind.endswith("List")):
        for i, item in enumerate(doc.get("items") or []):
            yield from _pods_in(item, f"{source}: items[{i}]")
    elif kind in _TEMPLATED:
        template = _mapping(_mapping(doc.get("spec"), where).get("template"), where)
        yield _pod_from(template, meta, where)
    elif kind == "CronJob":
        job = _mapping(_mapping(doc.get("spec"), where).get("jobTemplate"), where)
        template = _mapping(_mapping(job.get("spec"), where).get("template"), where)
        yield _pod_from(template, meta, where)


def load_pods(path: str | Path) -> list[PodSpec]:
    """Every pod (or pod template) in a manifest file. Raises ManifestError."""
    path = Path(path)
    try:
        if path.stat().st_size > MAX_MANIFEST_BYTES:
            raise ManifestError(f"{path}: larger than {MAX_MANIFEST_BYTES} bytes")
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ManifestError(f"{path}: cannot read: {exc}") from exc
    try:
        docs = list(yaml.safe_load_all(text))
    except yaml.YAMLError as exc:
        raise ManifestError(f"{path}: not valid YAML: {exc}") from exc
    pods: list[PodSpec] = []
    for i, doc in enumerate(docs):
        pods.extend(_pods_in(doc, f"{path}" if len(docs) == 1 else f"{path}[{i}]"))
    return pods
