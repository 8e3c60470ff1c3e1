"""Each distinct SLA annotation of a manifest parsed once (`validate`, `explain`).

A manifest can hold many containers under one pod's annotations (or many replicas of
one template). The SLA parser's own caches are shared by the whole process and bounded
(nri_plugin.sla.cache), so a manifest of many distinct annotations would evict its own
entries and parse them again; this map is keyed by the texts themselves, per manifest,
holds every one of them once, and nothing outlives the manifest it was read from.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from nri_plugin.commands.manifests import PodSpec
from nri_plugin.config.values import NodeConfig
from nri_plugin.sla import ENFORCEMENT_ALIAS, Sla
from nri_plugin.sla.errors import SlaError

# What a container's SLA depends on: nri-sla's annotations of its pod (keys and texts)
# and its own container key's name when it has one ("" when the pod's SLA is its SLA).
SlaKey = tuple[tuple[tuple[str, str], ...], str]


@dataclass
class ParsedSlas:
    """One manifest's SLAs by what they depend on."""

    config: NodeConfig
    known: dict[SlaKey, tuple[Sla | None, SlaError | None]] = field(default_factory=dict)

    def key(self, pod: PodSpec, name: str) -> SlaKey:
        head = self.config.annotation_prefix + "/"
        mine = tuple(
            sorted(
                (k, v)
                for k, v in pod.annotations.items()
                if k.startswith(head) or k == ENFORCEMENT_ALIAS
            )
        )
        return mine, (name if f"{head}container.{name}" in pod.annotations else "")

    def sla(self, pod: PodSpec, name: str) -> tuple[Sla | None, SlaError | None]:
        """The container's SLA (None: it has none) or why it is refused, as the node's
        decision path finds them (nri_plugin.core.decision.parse_sla)."""
        from nri_plugin.core.decision import parse_sla

        key = self.key(pod, name)
        if key not in self.known:
            try:
                self.known[key] = parse_sla(self.config, pod.annotations, name), None
            except SlaError as exc:
                self.known[key] = None, exc
        return self.known[key]
