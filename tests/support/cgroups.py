"""Fake cgroup hierarchies, built one way for every suite.

`make_v1_tree`: cgroup v1 as a hybrid host mounts it (one hierarchy per controller, the
systemd named hierarchy, a cgroup2 `unified` mount); `make_v2_tree`: the unified
hierarchy. Each writes the mountinfo naming its mounts beside the root, and
`CgroupTree.add_cgroup` makes a cgroup (a container's, a pod's) the way runc and the
kubelet do, holding what the kernel shows in a new cgroup for the files nri-sla or runc
write. The real kernel's side: tests/enforce (scratch cgroups), tests/hook (runc),
tests/vm (a cgroup v2 guest).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

V1_MOUNTS = (
    ("cpu", "rw,cpu"),
    ("cpuacct", "rw,cpuacct"),
    ("cpuset", "rw,cpuset"),
    ("memory", "rw,memory"),
    ("blkio", "rw,blkio"),
    ("pids", "rw,pids"),
    ("systemd", "rw,xattr,name=systemd"),
)
V2_CONTROLLERS = "cpuset cpu io memory pids"
NO_MEMORY_LIMIT = "9223372036854771712"  # what v1 shows for "no limit" (page-aligned)
RT_BUDGET_US = 950_000  # the kernel's RT runtime at the cpu hierarchy's root

# What the kernel shows in a new v1 cgroup, per controller, for the files nri-sla or runc
# write.
V1_FILES: Mapping[str, Mapping[str, str]] = {
    "cpu": {
        "cpu.cfs_quota_us": "-1",
        "cpu.cfs_period_us": "100000",
        "cpu.rt_runtime_us": "0",
        "cpu.rt_period_us": "1000000",
    },
    "cpuset": {"cpuset.cpus": "", "cpuset.mems": ""},
    "memory": {
        "memory.limit_in_bytes": NO_MEMORY_LIMIT,
        "memory.soft_limit_in_bytes": NO_MEMORY_LIMIT,
    },
    "blkio": {
        "blkio.weight": "500",
        "blkio.bfq.weight": "100",
        **{
            f"blkio.throttle.{k}_device": ""
            for k in ("read_bps", "write_bps", "read_iops", "write_iops")
        },
    },
}
# The same for a new v2 cgroup (io.bfq.weight only where the disk's scheduler is bfq).
V2_FILES: Mapping[str, str] = {
    "cpu.max": "max 100000",
    "cpuset.cpus": "",
    "cpuset.mems": "",
    "memory.max": "max",
    "memory.high": "max",
    "io.max": "",
    "io.weight": "default 100",
    "cgroup.procs": "",
}


def _write(cgroup: Path, files: Mapping[str, str]) -> None:
    for name, value in files.items():
        (cgroup / name).write_text(value + "\n" if value else "")


def mountinfo_line(mid: int, root: str, mount_point: Path, fstype: str, opts: str) -> str:
    return (
        f"{mid} 23 0:{mid} {root} {mount_point} rw,relatime shared:{mid} - {fstype} cgroup {opts}"
    )


@dataclass(frozen=True)
class CgroupTree:
    """A fake cgroup hierarchy: `root` stands for /sys/fs/cgroup, `mountinfo` for the
    /proc/self/mountinfo that names its mounts."""

    root: Path
    mountinfo: Path
    version: int

    def hierarchies(self) -> dict[str, Path]:
        """Where each hierarchy's cgroups live (v2: the one tree, as "unified"; v1: one per
        mount, the hybrid host's cgroup2 mount as "unified")."""
        if self.version == 2:
            return {"unified": self.root}
        return {name: self.root / name for name in (*(m for m, _ in V1_MOUNTS), "unified")}

    def add_cgroup(self, cgroups_path: str, files: Mapping | None = None) -> dict[str, Path]:
        """The cgroup at `cgroups_path` in every hierarchy, as runc creates a container's:
        it (its files reset if it was there) and each missing ancestor hold `files` (default
        V1_FILES per controller / V2_FILES); ancestors that exist stay as they are. Its dir
        per hierarchy (see `hierarchies`)."""
        files = files if files is not None else (V2_FILES if self.version == 2 else V1_FILES)
        dirs = {}
        for key, top in self.hierarchies().items():
            if self.version == 2:  # every controller the root offers, enabled all the way
                offered = (top / "cgroup.subtree_control").read_text().strip()
                wanted = {**files, "cgroup.controllers": offered}
            else:
                wanted = files.get(key, {})
            parts = Path(cgroups_path.strip("/")).parts
            for depth in range(1, len(parts)):
                ancestor = top.joinpath(*parts[:depth])
                if not ancestor.is_dir():
                    ancestor.mkdir()
                    _write(ancestor, wanted)
            d = top.joinpath(*parts)
            d.mkdir(exist_ok=True)
            _write(d, wanted)
            dirs[key] = d
        return dirs


def make_v1_tree(root: Path, *, comount_cpu: bool = False) -> CgroupTree:
    """A hybrid host's hierarchies under `root`, each root cgroup holding the kernel's
    values (the RT budget in cpu); `comount_cpu`: cpu and cpuacct mounted together (cpu
    and cpuacct then link to cpu,cpuacct)."""
    root.mkdir(parents=True, exist_ok=True)
    lines = [f"22 1 0:21 / {root} rw - tmpfs tmpfs rw,mode=755"]
    mounts = [("cpu,cpuacct", "rw,cpu,cpuacct"), *V1_MOUNTS[2:]] if comount_cpu else V1_MOUNTS
    for mid, (name, opts) in enumerate(mounts, 30):
        (root / name).mkdir(exist_ok=True)
        lines.append(mountinfo_line(mid, "/", root / name, "cgroup", opts))
    if comount_cpu:
        for name in ("cpu", "cpuacct"):
            if not (root / name).is_symlink():
                (root / name).symlink_to("cpu,cpuacct")
    (root / "unified").mkdir(exist_ok=True)
    lines.append(mountinfo_line(40, "/", root / "unified", "cgroup2", "rw,nsdelegate"))
    for controller, files in V1_FILES.items():
        _write(root / controller, files)
    (root / "cpu" / "cpu.rt_runtime_us").write_text(f"{RT_BUDGET_US}\n")
    info = root.with_name(f"{root.name}.mountinfo")
    info.write_text("\n".join(lines) + "\n")
    return CgroupTree(root, info, 1)


def make_v2_tree(root: Path, controllers: str = V2_CONTROLLERS) -> CgroupTree:
    """A unified hierarchy at `root` with `controllers` available and enabled for its
    children; again at the same root, the same tree (its cgroups kept)."""
    root.mkdir(parents=True, exist_ok=True)
    for name in ("cgroup.controllers", "cgroup.subtree_control"):
        (root / name).write_text(controllers + "\n")
    info = root.with_name(f"{root.name}.mountinfo")
    info.write_text(mountinfo_line(30, "/", root, "cgroup2", "rw,nsdelegate") + "\n")
    return CgroupTree(root, info, 2)
