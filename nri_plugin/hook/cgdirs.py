"""The node's cgroup hierarchies and one container's directories, as the hook holds them.

The path rules are `nri_plugin.enforce.cgpaths` (the plugin's too, through nodefacts); what
is the hook's own here: plain-string values (pathlib and dataclasses cost more start-up
time than a cached hook run spends on everything else) and their (de)serialisation for
the decision cache. Hierarchies come from `detect_cgroup_facts` on a cold run and from
the decision cache afterwards (nri_plugin/hook/cache.py).
"""

from __future__ import annotations

import os

from nri_plugin.enforce import cgpaths
from nri_plugin.enforce.cgpaths import UNIFIED, dir_of
from nri_plugin.enforce.errors import CgroupFactsError
from nri_plugin.hook.values import Value


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
        return dir_of(self.dirs, self.version, controller, self.cgroups_path)

    @classmethod
    def from_paths(cls, paths: object) -> ContainerDirs:
        """From nodefacts.CgroupPaths (the /proc/<pid>/cgroup fallback of a cold run)."""
        return cls(paths.cgroups_path, paths.version,  # type: ignore[attr-defined]
                   {k: str(v) for k, v in paths.dirs.items()},  # type: ignore[attr-defined]
                   {k: str(v) for k, v in paths.roots.items()})  # type: ignore[attr-defined]


def container_dirs(cgroups_path: str, node: NodeCgroups) -> ContainerDirs:
    """The container's dirs for an OCI linux.cgroupsPath (cgroupfs or systemd form)."""
    hierarchies = {name: path for name, (path, _) in node.hierarchies.items()}
    dirs, roots = cgpaths.container_dirs(cgroups_path, hierarchies, node.root)
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
