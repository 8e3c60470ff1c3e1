"""The node's cgroup hierarchies and one container's directories, as the hook needs them.

Same rules and messages as `nri_sla.enforce.nodefacts` (container_cgroup_paths and
safe_join; tests/hook/test_cache.py compares the two), but with plain strings and
os.path: pathlib and dataclasses cost more start-up time than a cached hook run spends
on everything else. Hierarchies come from `detect_cgroup_facts` on a cold run and from the
decision cache afterwards (nri_sla/hook/cache.py).
"""

from __future__ import annotations

import os

from nri_sla.enforce.errors import CgroupFactsError, CgroupPathError
from nri_sla.enforce.systemd import is_systemd_form, systemd_cgroup_path
from nri_sla.hook.values import Value

UNIFIED = "unified"  # the single hierarchy's key on cgroup v2 (as in nodefacts)


class NodeCgroups(Value):
    """Version and hierarchies: name -> (resolved mount dir, mount root)."""

    __slots__ = ("hierarchies", "root", "version")

    def __init__(self, version: int, root: str,
                 hierarchies: dict[str, tuple[str, str]]) -> None:
        self.version = version
        self.root = root  # the configured cgroup root, for messages
        self.hierarchies = hierarchies

    @classmethod
    def from_facts(cls, facts: object) -> NodeCgroups:
        """From nodefacts.CgroupFacts (what a cold run detected)."""
        found = facts.controllers()  # type: ignore[attr-defined]
        return cls(facts.version, str(facts.root),  # type: ignore[attr-defined]
                   {name: (str(h.path), h.mount_root) for name, h in found.items()})

    def to_json(self) -> dict:
        return {"version": self.version, "root": self.root,
                "hierarchies": [[n, p, r] for n, (p, r) in self.hierarchies.items()]}

    @classmethod
    def from_json(cls, doc: dict) -> NodeCgroups:
        """Raises ValueError/TypeError/KeyError on a malformed document (a cache miss)."""
        version = doc["version"]
        if version not in (1, 2) or not isinstance(doc["root"], str):
            raise ValueError("bad cgroup facts")
        hierarchies: dict[str, tuple[str, str]] = {}
        for name, path, mount_root in doc["hierarchies"]:
            if not all(isinstance(x, str) for x in (name, path, mount_root)):
                raise ValueError("bad hierarchy")
            hierarchies[name] = (path, mount_root)
        return cls(version, doc["root"], hierarchies)

    def cpu_mount(self) -> str:
        """v1 cpu hierarchy's mount dir (RT ancestors stop there)."""
        found = self.hierarchies.get("cpu")
        if found is None:
            raise CgroupFactsError(
                f"cgroup v1 controller 'cpu' is not mounted under {self.root}")
        return found[0]


class ContainerDirs(Value):
    """A container's cgroup directories: v1 controller -> dir, v2 {UNIFIED: dir}."""

    __slots__ = ("cgroups_path", "dirs", "roots", "version")

    def __init__(self, cgroups_path: str, version: int, dirs: dict[str, str],
                 roots: dict[str, str]) -> None:
        self.cgroups_path = cgroups_path
        self.version = version
        self.dirs = dirs
        self.roots = roots

    def dir(self, controller: str = UNIFIED) -> str:
        key = UNIFIED if self.version == 2 else controller
        try:
            return self.dirs[key]
        except KeyError:
            raise CgroupFactsError(
                f"no {controller!r} hierarchy for cgroups path {self.cgroups_path!r}"
            ) from None

    @classmethod
    def from_paths(cls, paths: object) -> ContainerDirs:
        """From nodefacts.CgroupPaths (the /proc/<pid>/cgroup fallback of a cold run)."""
        return cls(paths.cgroups_path, paths.version,  # type: ignore[attr-defined]
                   {k: str(v) for k, v in paths.dirs.items()},  # type: ignore[attr-defined]
                   {k: str(v) for k, v in paths.roots.items()})  # type: ignore[attr-defined]


def within(path: str, base: str) -> bool:
    """PurePath.is_relative_to for absolute, normalised strings."""
    return path == base or path.startswith(base.rstrip("/") + "/")


def safe_join(hierarchy: str, relative: str, cgroups_path: str) -> str:
    """hierarchy/relative, refusing `..`, NUL bytes and symlinks below the hierarchy."""
    if "\0" in relative:
        raise CgroupPathError(cgroups_path, "contains a NUL byte")
    parts = [p for p in relative.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise CgroupPathError(cgroups_path, "'..' would leave the cgroup hierarchy")
    base = os.path.realpath(hierarchy)
    path = base
    for part in parts:
        path = os.path.join(path, part)
        if os.path.islink(path):
            raise CgroupPathError(cgroups_path, f"{path} is a symlink")
    if not within(os.path.realpath(path), base):
        raise CgroupPathError(cgroups_path, f"{path} resolves outside {base}")
    return path


def relative_path(cgroups_path: str) -> str:
    if not cgroups_path:
        raise CgroupPathError(cgroups_path, "empty cgroups path")
    if is_systemd_form(cgroups_path):
        return systemd_cgroup_path(cgroups_path)
    if ":" in cgroups_path and not cgroups_path.startswith("/"):
        raise CgroupPathError(
            cgroups_path, "neither an absolute cgroupfs path nor systemd 'slice:prefix:name'"
        )
    return "/" + cgroups_path.lstrip("/")


def container_dirs(cgroups_path: str, node: NodeCgroups) -> ContainerDirs:
    """The container's dirs for an OCI linux.cgroupsPath (cgroupfs or systemd form)."""
    relative = relative_path(cgroups_path)
    dirs: dict[str, str] = {}
    roots: dict[str, str] = {}
    for name, (path, _) in node.hierarchies.items():
        if name.startswith("name="):
            continue  # named hierarchies (name=systemd) hold no resource controls
        dirs[name] = safe_join(path, relative, cgroups_path)
        roots[name] = path
    if not dirs:
        raise CgroupFactsError(f"no cgroup hierarchies under {node.root}")
    return ContainerDirs(cgroups_path, node.version, dirs, roots)


def weight_files(dirs: ContainerDirs) -> tuple[bool, bool]:
    """(io weight supported, through the bfq files) for this container's cgroup."""
    try:
        d = dirs.dir() if dirs.version == 2 else dirs.dir("blkio")
    except CgroupFactsError:
        return False, False
    plain = "io.weight" if dirs.version == 2 else "blkio.weight"
    bfq = "io.bfq.weight" if dirs.version == 2 else "blkio.bfq.weight"
    has_plain = os.path.exists(os.path.join(d, plain))
    has_bfq = os.path.exists(os.path.join(d, bfq))
    return has_plain or has_bfq, has_bfq and not has_plain
