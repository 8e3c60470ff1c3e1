"""GpuHealth: whether a GPU may be handed to a new container, and why not.

Three states: `healthy`; `unhealthy` (NVML says the GPU is lost, or it reported a critical
XID error: it needs a reset, and stays unhealthy until this process restarts); `unknown`
(its facts could not be read this time: an NVML call for it failed, or its MIG mode could
not be told). Only a healthy GPU is ever chosen for a new container; containers already
holding a GPU keep it whatever its health.
"""

from __future__ import annotations

from nri_plugin.errors import ProgrammingError
from nri_plugin.value import Frozen

HEALTHY, UNHEALTHY, UNKNOWN = "healthy", "unhealthy", "unknown"
STATES = (HEALTHY, UNHEALTHY, UNKNOWN)
# Which of two states wins when two sources say different things: a GPU is as good as the
# worst thing known of it.
_RANK = {HEALTHY: 0, UNKNOWN: 1, UNHEALTHY: 2}


class GpuHealth(Frozen):
    state: str = HEALTHY
    reason: str = ""  # why not healthy, for people ("XID 79", "NVML: GPU is lost")

    def __post_init__(self) -> None:
        if self.state not in _RANK:
            raise ProgrammingError(f"GPU health {self.state!r} is not one of {', '.join(STATES)}")

    @property
    def healthy(self) -> bool:
        return self.state == HEALTHY

    def worst(self, other: GpuHealth) -> GpuHealth:
        """The worse of the two (self when they rank equal: the first reason stays)."""
        return other if _RANK[other.state] > _RANK[self.state] else self

    def __str__(self) -> str:
        return f"{self.state} ({self.reason})" if self.reason else self.state


GPU_HEALTHY = GpuHealth()


def unhealthy(reason: str) -> GpuHealth:
    return GpuHealth(UNHEALTHY, reason)


def unknown(reason: str) -> GpuHealth:
    return GpuHealth(UNKNOWN, reason)
