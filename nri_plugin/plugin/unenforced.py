"""Containers created while no nri-sla was registered, as Synchronize finds them.

NRI fails open: a container created while the plugin was away (the runtime restarted
before it came back, it was down, or it missed the runtime's deadline for that very
container) runs without its SLA and without a record. `UnenforcedContainers` reports
each live one whose pod asks an SLA for it: one "created unenforced" warning and one
`nri_sla_unenforced_containers_total` increment per container per process. They stay
unenforced until recreated (nothing can add their devices or a record now:
docs/reliability.md). A container whose spec runs the nri-sla OCI hook (the fallback of
docs/install.md) was enforced, or refused, by the hook and is not reported.
"""

from __future__ import annotations

import logging

from nri_plugin.config import NodeConfig
from nri_plugin.core.decision import parse_sla
from nri_plugin.hookspec import is_sla_hook
from nri_plugin.nri.pb import nri_pb2 as pb
from nri_plugin.ops.logsetup import log_event
from nri_plugin.ops.metrics import MetricsSink
from nri_plugin.sla.errors import SlaError

log = logging.getLogger("nri_sla.plugin")

LIVE_STATES = (pb.CONTAINER_CREATED, pb.CONTAINER_RUNNING, pb.CONTAINER_PAUSED)


def hook_enforced(container: pb.Container) -> bool:
    """The container's spec runs the nri-sla OCI hook: it enforced or refused the SLA."""
    hooks = container.hooks
    return any(is_sla_hook(h.path, h.args) for stage in (hooks.create_runtime,
               hooks.prestart, hooks.create_container) for h in stage)


class UnenforcedContainers:
    """The live containers already reported (each is reported once per process)."""

    def __init__(self, metrics: MetricsSink) -> None:
        self.metrics = metrics
        self._reported: set[str] = set()

    def report(self, config: NodeConfig, applied_key: str, pods: list[pb.PodSandbox],
               containers: list[pb.Container]) -> int:
        """Log and count the new ones; returns how many there are now."""
        by_id = {p.id: p for p in pods}
        now: set[str] = set()
        for ctr in containers:
            pod = by_id.get(ctr.pod_sandbox_id)
            if ctr.state not in LIVE_STATES or pod is None \
                    or applied_key in ctr.annotations or hook_enforced(ctr):
                continue
            try:
                asked = parse_sla(config, pod.annotations, ctr.name) is not None
            except SlaError:
                asked = True  # invalid: nri-sla would have refused it
            if not asked:
                continue
            now.add(ctr.id)
            if ctr.id in self._reported:
                continue
            log_event(log, logging.WARNING, "created unenforced", container=ctr.id,
                      namespace=pod.namespace, pod=pod.name, container_name=ctr.name)
            self.metrics.count_unenforced()
        self._reported = now  # the gone ones forgotten: bounded by the live containers
        return len(now)
