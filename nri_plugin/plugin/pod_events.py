"""What nri-sla tells a pod's readers (`kubectl describe pod`, `kubectl events`): Kubernetes
Events on the pod, about one of its containers, for

* `SLARefused` (Warning): the container was not created, or not started (hard SLA): the
  refusal the runtime also returns;
* `SLAClamped` (Warning): a soft SLA (or a resize) applied other than asked: what and why;
* `SLADrift` (Warning): an enforced value changed behind nri-sla's back: put back (hard)
  or only reported (soft); `SLADriftRepaired` (Normal) once it holds again,
  `SLADriftRepairFailed` (Warning) when it could not be put back;
* `SLAUnenforced` (Warning): created while nri-sla was not registered, running without
  its SLA until recreated.

Each message names only that container's request, what it was given and the node policy,
as the refusal the runtime returns does. Sent by ops.kube_sender's thread, aggregated and
rate-limited as the kubelet's are; the messages are rendered there too. `pod_events`
makes them from the node config's `events` section: `NO_EVENTS` when off.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from nri_plugin.config.values import EventsConfig
from nri_plugin.core.decision import Decision
from nri_plugin.ops.kube_api import ApiServer, InvolvedPod
from nri_plugin.ops.metrics import MetricsSink
from nri_plugin.plugin.errors import EventsUnavailable
from nri_plugin.plugin.registry import ContainerEntry

if TYPE_CHECKING:
    from nri_plugin.ops.kube_sender import EventRecorder, Message

log = logging.getLogger("nri_sla.events")


class PodEvents:
    """The plugin's events (see the module's docstring); with no recorder, nothing."""

    def __init__(self, recorder: EventRecorder | None = None) -> None:
        self.recorder = recorder

    def _record(self, pod: InvolvedPod, event_type: str, reason: str, message: Message) -> None:
        if self.recorder is not None:
            self.recorder.record(pod, event_type, reason, message)

    def decided(
        self, namespace: str, pod: str, uid: str, container: str, decision: Decision
    ) -> None:
        """A CreateContainer decision: refused or warned (an enforced one says nothing)."""
        if self.recorder is None or decision.outcome not in ("refused", "warned"):
            return
        who = InvolvedPod(namespace, pod, uid, container)
        if decision.outcome == "refused":
            self._record(
                who,
                "Warning",
                "SLARefused",
                lambda: f"container not created: {decision.error_text}",
            )
        else:
            self._record(who, "Warning", "SLAClamped", lambda: _clamped(decision.warnings))

    def start_refused(
        self, namespace: str, pod: str, uid: str, container: str, problems: Sequence[str]
    ) -> None:
        """Hard mode: a direct cgroup write failed at StartContainer."""
        self._record(
            InvolvedPod(namespace, pod, uid, container),
            "Warning",
            "SLARefused",
            "container not started: " + "; ".join(problems),
        )

    def resized(
        self, namespace: str, pod: str, uid: str, container: str, warnings: Sequence[str]
    ) -> None:
        """A resize (UpdateContainer) that clamped the SLA to the new limits."""
        if warnings:
            self._record(
                InvolvedPod(namespace, pod, uid, container),
                "Warning",
                "SLAClamped",
                "resize: " + _clamped(warnings),
            )

    def drift(
        self, entry: ContainerEntry, setting: str, expected: str, found: str, repair: bool
    ) -> None:
        self._record(
            _involved(entry),
            "Warning",
            "SLADrift",
            f"{setting} is {found}, the SLA sets {expected}: "
            + ("putting it back" if repair else "not put back (soft mode)"),
        )

    def repaired(self, entry: ContainerEntry, how: str) -> None:
        self._record(
            _involved(entry), "Normal", "SLADriftRepaired", f"drifted settings put back ({how})"
        )

    def repair_failed(self, entry: ContainerEntry, why: str) -> None:
        self._record(
            _involved(entry),
            "Warning",
            "SLADriftRepairFailed",
            f"drifted settings not put back: {why}",
        )

    def unenforced(self, namespace: str, pod: str, uid: str, container: str) -> None:
        self._record(
            InvolvedPod(namespace, pod, uid, container),
            "Warning",
            "SLAUnenforced",
            "created while nri-sla was not registered: runs without its SLA "
            "until the container is recreated",
        )

    def close(self) -> None:
        if self.recorder is not None:
            self.recorder.close()


NO_EVENTS = PodEvents()


def _clamped(warnings: Sequence[str]) -> str:
    return "SLA not applied as asked: " + "; ".join(warnings)


def _involved(entry: ContainerEntry) -> InvolvedPod:
    return InvolvedPod(entry.namespace, entry.pod_name, entry.pod_uid, entry.name)


def pod_events(config: EventsConfig, metrics: MetricsSink) -> PodEvents:
    """The events `config` asks for: on (`enabled: true`, or `auto` where the service
    account is found), else NO_EVENTS. Raises EventsUnavailable for `true` without one."""
    if config.enabled is False:
        return NO_EVENTS
    server = ApiServer.in_cluster(config.service_account)
    if server is None:
        if config.enabled:
            raise EventsUnavailable(
                f"events.enabled is true, but no service account: KUBERNETES_SERVICE_HOST "
                f"unset or no token in {config.service_account}"
            )
        log.info("Kubernetes Events off: no service account (events.enabled: auto)")
        return NO_EVENTS
    # Here, not at the top: a plugin without events never loads the sender (with
    # ops.kube_events, 0.1 MiB: ops.kube_api says why).
    from nri_plugin.ops.kube_sender import EventRecorder

    # The kubelet's node name (the chart sets NODE_NAME from spec.nodeName).
    node = os.environ.get("NODE_NAME") or os.uname().nodename
    log.info("Kubernetes Events on: API server %s:%d, node %s", server.host, server.port, node)
    return PodEvents(
        EventRecorder(
            server,
            metrics,
            host=node,
            queue_size=config.queue_size,
            qps=config.qps,
            burst=config.burst,
        )
    )
