"""Node real-time budget: the share of the kernel's RT time that SLA containers may take.

The kernel gives the root cgroup `cpu.rt_runtime_us` per `cpu.rt_period_us` (default
950000/1000000). The node config grants SLA containers a fraction of that; each container
takes runtime/period of it. Allocations are keyed by container id so that they can be
released and rebuilt from the runtime's state after a restart.

A grant also says where the kernel holds it once that is known (cgroup v1: the
container's cpu cgroup dir), so that what nri-sla raised in that dir's ancestors
(enforce.rt_ledger) is not given back while the grant lives, even before runc wrote the
container's own budget. The budget is a ledger, not container state: it counts what the
node gave, by owner, for the planner's next grant, the per-pod caps and that give-back.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

from nri_plugin.ops.corelog import CoreLogger
from nri_plugin.plan.errors import RtBudgetExceeded

log = CoreLogger("nri_sla.rt")


@dataclass(frozen=True)
class RtGrant:
    """One container's real-time budget (runtime and period, microseconds), and the cpu
    cgroup dir it lives in (cgroup v1), once known."""

    runtime_us: int
    period_us: int
    cpu_dir: Path | None = None

    @property
    def share(self) -> float:
        return self.runtime_us / self.period_us


def kernel_rt_share(cpu_root: Path = Path("/sys/fs/cgroup/cpu")) -> float:
    """The root cgroup's RT share (v1), or the sysctl's when the cgroup file is absent."""
    for runtime_file, period_file in (
        (cpu_root / "cpu.rt_runtime_us", cpu_root / "cpu.rt_period_us"),
        (Path("/proc/sys/kernel/sched_rt_runtime_us"), Path("/proc/sys/kernel/sched_rt_period_us")),
    ):
        try:
            runtime = int(runtime_file.read_text())
            period = int(period_file.read_text())
        except (OSError, ValueError):
            continue
        return 1.0 if runtime < 0 else runtime / period
    return 0.0


class RtBudget:
    """Thread-safe accounting of RT shares against the node's budget."""

    def __init__(self, total_share: float) -> None:
        self.total_share = total_share
        self._grants: dict[str, RtGrant] = {}
        self._lock = threading.Lock()

    def check(self, owner: str, grant: RtGrant) -> None:
        """Raise RtBudgetExceeded when `grant` would not fit for `owner` now (what it
        holds already counts as free); nothing is recorded."""
        with self._lock:
            self._check(owner, grant)

    def reserve(self, owner: str, grant: RtGrant) -> None:
        """check(), then `owner` holds `grant` (in place of what it held)."""
        with self._lock:
            self._check(owner, grant)
            self._grants[owner] = grant

    def _check(self, owner: str, grant: RtGrant) -> None:
        used = sum(g.share for o, g in self._grants.items() if o != owner)
        if used + grant.share > self.total_share + 1e-9:
            free = max(self.total_share - used, 0.0)
            log.info(
                "RT budget short for %s: needs %.1f%%, %.1f%% free of %.1f%%",
                owner,
                grant.share * 100,
                free * 100,
                self.total_share * 100,
            )
            raise RtBudgetExceeded(
                f"needs {grant.share:.1%} of CPU time as real-time; the node's RT budget "
                f"for SLA containers ({self.total_share:.1%}: node config rt-budget of "
                "the kernel's share) cannot take that much more now"
            )

    def hold(self, owner: str, grant: RtGrant) -> None:
        """Record a grant the kernel holds or is about to (restored from the runtime's
        state, or its cgroup dir now known), even if it overcommits."""
        with self._lock:
            self._grants[owner] = grant

    def share_of(self, owner: str) -> float:
        with self._lock:
            grant = self._grants.get(owner)
            return grant.share if grant is not None else 0.0

    def release(self, owner: str) -> None:
        with self._lock:
            self._grants.pop(owner, None)

    def owners(self) -> tuple[str, ...]:
        with self._lock:
            return tuple(self._grants)

    def cgroup_dirs(self) -> dict[Path, tuple[int, int]]:
        """The cpu cgroup dirs of the grants that know theirs -> (runtime, period): what
        their ancestors must keep (enforce.rt_ledger.RtLedger.give_back's `pending`)."""
        with self._lock:
            return {
                g.cpu_dir: (g.runtime_us, g.period_us)
                for g in self._grants.values()
                if g.cpu_dir is not None
            }
