"""What a Synchronize's restore keeps of a pod the runtime reported.

The runtime's messages are decoded one at a time and dropped (nri.wire.LazyMessages): a
kept message would keep its whole parse.
"""

from __future__ import annotations

from dataclasses import dataclass

from nri_plugin.nri.pb import nri_pb2 as pb
from nri_plugin.nri.stub import map_as_dict


@dataclass(frozen=True, slots=True)
class SyncedPod:
    """What the restore keeps of a pod a Synchronize reported: what the registry's entries
    and the report of containers created unenforced read of its message (a kept message
    would keep its whole parse)."""

    id: str
    namespace: str
    name: str
    uid: str
    annotations: dict[str, str]

    @classmethod
    def of(cls, pod: pb.PodSandbox) -> SyncedPod:
        return cls(pod.id, pod.namespace, pod.name, pod.uid, map_as_dict(pod.annotations))
