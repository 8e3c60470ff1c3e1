"""GrantedResources: what the runtime gave a container before nri-sla looked at it.

The kubelet turns a container's resources into the values the runtime applies: CPU quota
and period from limits.cpu, CPU shares from requests.cpu (shares = millicores * 1024 /
1000, at least 2) and the memory limit from limits.memory; a device plugin names the GPUs
it granted (NVIDIA_VISIBLE_DEVICES, CDI device names). Kubernetes (scheduler, LimitRange,
ResourceQuota) accounted exactly these, so an SLA may only tighten them
(nri_plugin.plan.grants). The plugin reads them from the CreateContainer / UpdateContainer
request, the OCI hook from config.json.

Not a dataclass: the hook's warm path builds one from config.json for its cache key, and
`import dataclasses` costs it more than the rest of its work (see value.py). Frozen and
hashable all the same: it is part of the core's reuse key.
"""

from __future__ import annotations

from nri_plugin.value import Value

DEFAULT_CPU_PERIOD_US = 100_000  # the kernel's (and kubelet's) CFS period
SHARES_PER_CPU = 1024  # kubelet: shares = millicores * 1024 / 1000


def _positive(value: int | None) -> int | None:
    # The runtime writes "unlimited" as -1 (quota, memory) or leaves the field out.
    return value if value is not None and value > 0 else None


class GrantedResources(Value):
    """The runtime's limits for one container; None = not set (unlimited)."""

    __slots__ = ("cpu_period", "cpu_quota", "cpu_shares", "gpu_cdi", "gpu_visible",
                 "memory_limit")

    def __init__(self, cpu_quota: int | None = None, cpu_period: int | None = None,
                 cpu_shares: int | None = None, memory_limit: int | None = None,
                 gpu_visible: str | None = None, gpu_cdi: tuple[str, ...] = ()) -> None:
        init = object.__setattr__
        init(self, "cpu_quota", _positive(cpu_quota))
        init(self, "cpu_period", _positive(cpu_period))
        init(self, "cpu_shares", _positive(cpu_shares))
        init(self, "memory_limit", _positive(memory_limit))
        init(self, "gpu_visible", gpu_visible)  # NVIDIA_VISIBLE_DEVICES as the runtime set it
        init(self, "gpu_cdi", tuple(gpu_cdi))  # CDI device names in the request

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"GrantedResources is frozen (cannot set {name})")

    def __hash__(self) -> int:
        return hash(self._fields())

    def key(self) -> tuple:
        """Every field, for the decision caches (the core's reuse key, the hook's cache)."""
        return self._fields()

    @property
    def quota_period(self) -> tuple[int, int] | None:
        """(quota, period) in microseconds; None when the CPU time is not limited."""
        if self.cpu_quota is None:
            return None
        return self.cpu_quota, self.cpu_period or DEFAULT_CPU_PERIOD_US

    @property
    def cpu_request_millis(self) -> int | None:
        """The container's CPU request in millicores: from the shares the kubelet derived
        from requests.cpu (rounded up: the kubelet rounded down), else the quota (a
        runtime without requests), else None (nothing says)."""
        if self.cpu_shares is not None:
            return -(-self.cpu_shares * 1000 // SHARES_PER_CPU)
        qp = self.quota_period
        return -(-qp[0] * 1000 // qp[1]) if qp is not None else None
