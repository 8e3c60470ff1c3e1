"""Node facts for direct enforcement: cgroup version and driver, container cgroup dirs.

Cheap to import (no protobuf, no cgroupspy). The cgroup path rules themselves live in
cgpaths.py (plain strings, shared with the OCI hook's cached runs); this module gives them
the Path-based API. Block-device facts live in blockdev.py and are re-exported here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from nri_plugin.enforce import cgpaths
from nri_plugin.enforce.blockdev import bfq_active, io_scheduler, resolve_block_device
from nri_plugin.enforce.cgpaths import UNIFIED
from nri_plugin.enforce.errors import CgroupFactsError
from nri_plugin.enforce.mountinfo import CgroupMount, parse_mountinfo, parse_proc_cgroup
from nri_plugin.enforce.systemd import is_systemd_form

__all__ = [
    "UNIFIED",
    "CgroupFacts",
    "CgroupPaths",
    "Hierarchy",
    "bfq_active",
    "cgroup_paths_from_proc",
    "container_cgroup_paths",
    "detect_cgroup_facts",
    "io_scheduler",
    "resolve_block_device",
]

DRIVERS = ("cgroupfs", "systemd")
# Controllers nri-sla writes on v1; other mounted ones are still listed in CgroupPaths.
V1_CONTROLLERS = ("cpu", "cpuacct", "cpuset", "memory", "blkio", "pids")


@dataclass(frozen=True)
class Hierarchy:
    """Where one hierarchy is mounted and which part of it that mount shows."""

    path: Path  # resolved mount directory
    mount_root: str = "/"  # cgroup (in our namespace) that the mount's top dir is


@dataclass(frozen=True)
class CgroupFacts:
    """How this node's cgroups are laid out."""

    version: int  # 1 (legacy or hybrid) or 2 (unified)
    driver: str  # "cgroupfs" | "systemd": the node default; each path's form still decides
    root: Path  # usually /sys/fs/cgroup
    # v1: controller name -> hierarchy; v2: {UNIFIED: hierarchy}. Filled by detection; when
    # empty, hierarchies are looked up as directories under root.
    hierarchies: dict[str, Hierarchy] = field(default_factory=dict)

    def hierarchy(self, controller: str = UNIFIED) -> Hierarchy:
        if self.version == 2:
            return self.hierarchies.get(UNIFIED) or Hierarchy(self.root.resolve())
        found = self.hierarchies.get(controller) or _scan_v1(self.root).get(controller)
        if found is None:
            raise CgroupFactsError(
                f"cgroup v1 controller {controller!r} is not mounted under {self.root}"
            )
        return found

    def controllers(self) -> dict[str, Hierarchy]:
        """All hierarchies (v1: by controller; v2: {UNIFIED: ...})."""
        if self.version == 2:
            return {UNIFIED: self.hierarchy()}
        return dict(self.hierarchies) or _scan_v1(self.root)


@dataclass(frozen=True)
class CgroupPaths:
    """A container's cgroup directories (they need not exist yet)."""

    cgroups_path: str  # what the runtime gave us, for messages
    version: int
    dirs: dict[str, Path]  # v1: controller -> dir; v2: {UNIFIED: dir}
    roots: dict[str, Path]  # same keys: the hierarchy mount each dir must stay under

    def dir(self, controller: str = UNIFIED) -> Path:
        return cgpaths.dir_of(self.dirs, self.version, controller, self.cgroups_path)

    @property
    def unified(self) -> Path:
        return self.dir(UNIFIED)


# ---------------------------------------------------------------- detection


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _scan_v1(root: Path) -> dict[str, Hierarchy]:
    """Controllers from directory names under root ("cpu,cpuacct" serves both)."""
    found: dict[str, Hierarchy] = {}
    try:
        entries = sorted(root.iterdir())
    except OSError:
        return found
    for entry in entries:
        if not entry.is_dir():
            continue
        resolved = entry.resolve()
        for name in resolved.name.split(",") + entry.name.split(","):
            if name and name != UNIFIED:
                found.setdefault(name, Hierarchy(resolved))
    return found


def _mounts_under(root: Path, mounts: list[CgroupMount]) -> list[CgroupMount]:
    real = root.resolve()
    return [m for m in mounts if m.mount_point == real or m.mount_point.parent == real]


def _detect_version(root: Path, mounts: list[CgroupMount]) -> int:
    real = root.resolve()
    for m in mounts:
        if m.mount_point == real:
            return 2 if m.fstype == "cgroup2" else 1
    # A tmpfs at root with v1 mounts below it: legacy or hybrid (hybrid's cgroup2 lives at
    # root/unified without controllers, so nri-sla treats the node as v1).
    if any(m.fstype == "cgroup" for m in mounts):
        return 1
    if (root / "cgroup.controllers").exists():
        return 2
    if _scan_v1(root):
        return 1
    raise CgroupFactsError(f"no cgroup hierarchy found at {root} (neither v1 nor v2)")


def _detect_driver(
    version: int, hierarchies: dict[str, Hierarchy], root: Path, proc: Path, hint: str | None
) -> str:
    # 1. The runtime's own cgroups_path says it best: systemd form means the systemd driver.
    if hint:
        return "systemd" if is_systemd_form(hint) else "cgroupfs"
    # 2. Where kubelet put the pods: kubepods.slice (systemd) or kubepods (cgroupfs).
    top = hierarchies.get(UNIFIED if version == 2 else "cpu") or Hierarchy(root)
    if (top.path / "kubepods.slice").is_dir():
        return "systemd"
    if (top.path / "kubepods").is_dir():
        return "cgroupfs"
    # 3. No pods yet: kubelet's own default follows the init system (systemd recommended).
    return "systemd" if _read(proc / "1" / "comm").strip() == "systemd" else "cgroupfs"


def detect_cgroup_facts(
    root: Path = Path("/sys/fs/cgroup"),
    driver: str = "auto",
    version: int | str = "auto",
    *,
    mountinfo: Path = Path("/proc/self/mountinfo"),
    proc: Path = Path("/proc"),
    cgroups_path_hint: str | None = None,
) -> CgroupFacts:
    """Detect version (mounts, then cgroup.controllers) and driver (see _detect_driver)."""
    root = Path(root)
    if driver not in ("auto", *DRIVERS):
        raise CgroupFactsError(
            f"cgroup driver {driver!r}: allowed values are auto, cgroupfs, systemd"
        )
    if str(version) not in ("auto", "1", "2"):
        raise CgroupFactsError(f"cgroup version {version!r}: allowed values are auto, 1, 2")
    if not root.is_dir():
        raise CgroupFactsError(f"cgroup root {root} is not a directory")
    mounts = _mounts_under(root, parse_mountinfo(_read(mountinfo)))
    ver = _detect_version(root, mounts) if str(version) == "auto" else int(version)

    hierarchies: dict[str, Hierarchy] = {}
    if ver == 2:
        v2 = [m for m in mounts if m.fstype == "cgroup2" and m.mount_point == root.resolve()]
        hierarchies[UNIFIED] = Hierarchy(root.resolve(), v2[0].root if v2 else "/")
    else:
        for m in mounts:
            if m.fstype == "cgroup":
                for c in m.controllers:
                    hierarchies.setdefault(c, Hierarchy(m.mount_point.resolve(), m.root))
        if not hierarchies:
            hierarchies = _scan_v1(root)
    drv = (
        driver
        if driver != "auto"
        else _detect_driver(ver, hierarchies, root, proc, cgroups_path_hint)
    )
    return CgroupFacts(version=ver, driver=drv, root=root, hierarchies=hierarchies)


# ---------------------------------------------------------------- container paths


def safe_join(hierarchy: Path, relative: str, cgroups_path: str) -> Path:
    """hierarchy/relative, refusing anything that would leave the hierarchy (the rules:
    cgpaths.safe_join)."""
    return Path(cgpaths.safe_join(str(hierarchy), relative, cgroups_path))


def container_cgroup_paths(cgroups_path: str, facts: CgroupFacts) -> CgroupPaths:
    """The container's dirs for an OCI linux.cgroupsPath (cgroupfs or systemd form; the
    rules: cgpaths.container_dirs)."""
    hierarchies = {name: str(h.path) for name, h in facts.controllers().items()}
    dirs, roots = cgpaths.container_dirs(cgroups_path, hierarchies, str(facts.root))
    return CgroupPaths(cgroups_path, facts.version,
                       {k: Path(v) for k, v in dirs.items()},
                       {k: Path(v) for k, v in roots.items()})


def cgroup_paths_from_proc(pid: int, facts: CgroupFacts, proc: Path = Path("/proc")) -> CgroupPaths:
    """The cgroup dirs of a running process, from /proc/<pid>/cgroup.

    Paths there are relative to the reader's cgroup namespace, as are mount roots in
    mountinfo, so a mount that shows only a subtree (agent in a container) is handled by
    stripping that subtree's path.
    """
    source = proc / str(pid) / "cgroup"
    try:
        text = source.read_text()
    except OSError as e:
        raise CgroupFactsError(f"cannot read {source}: {e.strerror or e}") from None
    entries = parse_proc_cgroup(text)
    dirs: dict[str, Path] = {}
    roots: dict[str, Path] = {}
    label = f"{source}"
    hierarchies = facts.controllers()
    for entry in entries:
        if facts.version == 2:
            if entry.hierarchy_id != 0:
                continue
            names: tuple[str, ...] = (UNIFIED,)
        else:
            if entry.hierarchy_id == 0:
                continue  # the hybrid host's empty v2 line
            names = tuple(c for c in entry.controllers if not c.startswith("name="))
        for name in names:
            h = hierarchies.get(name)
            if h is None:
                continue
            rel = cgpaths.strip_mount_root(entry.path, h.mount_root, label)
            dirs[name] = safe_join(h.path, rel, label)
            roots[name] = h.path
    if not dirs:
        raise CgroupFactsError(f"{source} names no cgroup mounted under {facts.root}")
    return CgroupPaths(label, facts.version, dirs, roots)
