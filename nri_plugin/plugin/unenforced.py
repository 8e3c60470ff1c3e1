"""Containers created while no nri-sla was registered, as Synchronize finds them.

NRI fails open: a container created while the plugin was away (the runtime restarted
before it came back, it was down, or it missed the runtime's deadline for that very
container) runs without its SLA and without a record. `UnenforcedContainers` reports
each live one whose pod asks an SLA for it, once per container per process: one
`nri_sla_unenforced_containers_total` increment each, one "created unenforced" warning
each for the first `NAMED` new ones of a Synchronize and one "created unenforced, more"
line with how many others there are (a reconnect to a node of thousands must not write
thousands of lines), and every one of them, named, in the status document (`nri-sla
status`) until it is removed: the registry's entry says it (ContainerEntry.unenforced),
no book here keeps a container. They stay unenforced until recreated (nothing can add
their devices or a record now: docs/reliability.md). A container whose spec runs the
nri-sla OCI hook (the fallback of docs/install.md) was enforced, or refused, by the hook
and is not reported.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from nri_plugin.config.values import NodeConfig
from nri_plugin.core.decision import parse_sla
from nri_plugin.core.restored import LiveContainer
from nri_plugin.hookspec import is_sla_hook
from nri_plugin.nri.pb import nri_pb2 as pb
from nri_plugin.ops.logsetup import log_event
from nri_plugin.ops.metrics import MetricsSink
from nri_plugin.plugin.pod_events import NO_EVENTS, PodEvents
from nri_plugin.plugin.registry import ContainerRegistry
from nri_plugin.plugin.synced import SyncedPod
from nri_plugin.sla.errors import SlaError

log = logging.getLogger("nri_sla.plugin")

LIVE_STATES = (pb.CONTAINER_CREATED, pb.CONTAINER_RUNNING, pb.CONTAINER_PAUSED)
# New containers named one line each per Synchronize; the others in one line, the
# metric and the status document.
NAMED = 32


def hook_enforced(container: pb.Container) -> bool:
    """The container's spec runs the nri-sla OCI hook: it enforced or refused the SLA."""
    if not container.HasField("hooks"):  # most: a spec without OCI hooks (3 us less)
        return False
    hooks = container.hooks
    return any(
        is_sla_hook(h.path, h.args)
        for stage in (hooks.create_runtime, hooks.prestart, hooks.create_container)
        for h in stage
    )


# What the report needs of a live container without a record: its name, and whether its
# spec runs the nri-sla OCI hook (hook_enforced).
Unrecorded = tuple[str, bool]


@dataclass(frozen=True, slots=True)
class Unenforced:
    """One container created unenforced, as the status document names it."""

    id: str
    namespace: str
    pod: str
    container: str

    def to_json(self) -> dict[str, str]:
        return {
            "id": self.id,
            "namespace": self.namespace,
            "pod": self.pod,
            "container": self.container,
        }


class UnenforcedContainers:
    """Reports the live containers created unenforced. Which ones they are is the
    registry's (ContainerEntry.unenforced): each is reported once per process, and
    forgotten with its entry."""

    def __init__(
        self, registry: ContainerRegistry, metrics: MetricsSink, events: PodEvents = NO_EVENTS
    ) -> None:
        self.registry = registry
        self.metrics = metrics
        self.events = events  # an Event on each new one's pod

    @property
    def containers(self) -> list[Unenforced]:
        """Every live container created unenforced, for the status document."""
        return sorted(
            (
                Unenforced(e.id, e.namespace, e.pod_name, e.name)
                for e in self.registry
                if e.unenforced
            ),
            key=lambda u: (u.namespace, u.pod, u.container, u.id),
        )

    def report(
        self,
        config: NodeConfig,
        pod_of: Mapping[str, SyncedPod],
        values: list[LiveContainer],
        unrecorded: Mapping[str, Unrecorded],
    ) -> list[str]:
        """Log and count the new ones among the live containers (`values`: what restore
        read of each; `unrecorded`: container id -> what it read of each without a
        record); returns the ids of all of them, new or reported before, for the
        registry's new entries to say so. Runs before the registry is rebuilt: a
        container it knew without a plan (and not as unenforced) asks no SLA and is not
        read again. (One with a plan but no record got an answer the runtime never
        applied: reported.)"""
        now: list[str] = []
        new: list[Unenforced] = []
        for value in values:
            pod = pod_of.get(value.pod)
            if pod is None or value.record is not None:
                continue
            entry = self.registry.get(value.id)
            if entry is not None and entry.unenforced:
                now.append(value.id)
                continue
            name, hooked = unrecorded[value.id]
            if (entry is not None and entry.decided_plan is None) or hooked:
                continue
            if not _asks_sla(config, pod.annotations, name):
                continue
            now.append(value.id)
            new.append(Unenforced(value.id, pod.namespace, pod.name, name))
            self.events.unenforced(pod.namespace, pod.name, pod.uid, name)
        for found in new[:NAMED]:
            log_event(
                log,
                logging.WARNING,
                "created unenforced",
                container=found.id,
                namespace=found.namespace,
                pod=found.pod,
                container_name=found.container,
            )
        if len(new) > NAMED:
            log_event(
                log,
                logging.WARNING,
                "created unenforced, more",
                containers=len(new) - NAMED,
                named=NAMED,
                see="nri-sla status",
            )
        if new:
            self.metrics.count_unenforced(len(new))
        return now


def _asks_sla(config: NodeConfig, pod_annotations: Mapping[str, str], name: str) -> bool:
    try:
        return parse_sla(config, pod_annotations, name) is not None
    except SlaError:
        return True  # invalid: nri-sla would have refused it
