"""Reading a container's cgroup files back (cgroup v1 or v2)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")


def cgroup_v2_only() -> bool:
    return (CGROUP_ROOT / "cgroup.controllers").exists()


@dataclass(frozen=True)
class CgroupValues:
    """What the kernel holds for a container (None: no such file on this hierarchy)."""

    cpu_quota: int | None
    cpu_period: int | None
    memory_limit: int | None


def read_file(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def read_cgroup(cgroups_path: str) -> CgroupValues:
    rel = cgroups_path.lstrip("/")
    if cgroup_v2_only():
        d = CGROUP_ROOT / rel
        cpu_max, mem = read_file(d / "cpu.max"), read_file(d / "memory.max")
        quota = period = None
        if cpu_max:
            q, p = cpu_max.split()
            quota, period = (-1 if q == "max" else int(q)), int(p)
        limit = None if mem is None else (-1 if mem == "max" else int(mem))
        return CgroupValues(quota, period, limit)
    q = read_file(CGROUP_ROOT / "cpu" / rel / "cpu.cfs_quota_us")
    p = read_file(CGROUP_ROOT / "cpu" / rel / "cpu.cfs_period_us")
    m = read_file(CGROUP_ROOT / "memory" / rel / "memory.limit_in_bytes")
    return CgroupValues(*(None if v is None else int(v) for v in (q, p, m)))


def whole_disk() -> str | None:
    """MAJ:MIN of a real whole disk (blkio throttling takes whole disks only)."""
    for dev in sorted(Path("/sys/block").iterdir()):
        if (dev / "device").exists() and (dev / "dev").exists():
            return (dev / "dev").read_text().strip()
    return None
