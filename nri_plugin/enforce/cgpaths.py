"""Where a container's cgroup lives: the one implementation of nri-sla's cgroup path rules.

An OCI linux.cgroupsPath (cgroupfs `/a/b` or systemd `slice:prefix:name`) becomes one
directory per hierarchy, refusing anything that would leave the hierarchy (`..`, NUL
bytes, symlinks below it). Plain strings and os.path only: the OCI hook runs this for every
container start, from a cached decision too, where importing pathlib or dataclasses would
cost more than the rest of the run. `nodefacts` wraps these functions in its Path-based
API (CgroupPaths) for the plugin; the hook (hook/cgdirs.py) uses them directly.
"""

from __future__ import annotations

import os

from nri_plugin.enforce.errors import CgroupFactsError, CgroupPathError
from nri_plugin.enforce.systemd import is_systemd_form, systemd_cgroup_path

UNIFIED = "unified"  # key of the single hierarchy on cgroup v2

TYPE_CHECKING = False  # typing costs the hook start-up time; only checkers need it
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import TypeVar

    D = TypeVar("D")


def within(path: str, base: str) -> bool:
    """PurePath.is_relative_to for absolute, normalised path strings."""
    return path == base or path.startswith(base.rstrip("/") + "/")


def safe_join(hierarchy: str, relative: str, cgroups_path: str) -> str:
    """hierarchy/relative, refusing anything that would leave the hierarchy.

    Refused: ".." components, NUL bytes, and symlinks anywhere below the hierarchy
    (cgroupfs never has symlinks, so one is an attack or a mistake). "." and empty
    components are dropped, so "/a//b/." is "/a/b". The result starts at the resolved
    hierarchy (a mount reached through a symlink, as v1's `cpu -> cpu,cpuacct`).
    """
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
    """The container's path inside every hierarchy, from either cgroupsPath form.

    The form of the string decides (runc does the same: a systemd-driver runtime always
    sends slice:prefix:name), so a node whose default driver was detected wrongly still
    gets the right directories.
    """
    if not cgroups_path:
        raise CgroupPathError(cgroups_path, "empty cgroups path")
    if is_systemd_form(cgroups_path):
        return systemd_cgroup_path(cgroups_path)
    if ":" in cgroups_path and not cgroups_path.startswith("/"):
        raise CgroupPathError(
            cgroups_path, "neither an absolute cgroupfs path nor systemd 'slice:prefix:name'"
        )
    # cgroupfs: absolute inside every hierarchy. A relative one is taken from the hierarchy
    # root too (containerd and CRI-O always send absolute paths).
    return "/" + cgroups_path.lstrip("/")


def container_dirs(
    cgroups_path: str, hierarchies: Mapping[str, str], root: str
) -> tuple[dict[str, str], dict[str, str]]:
    """(dirs, roots) for an OCI linux.cgroupsPath: hierarchy name -> the container's dir,
    and the hierarchy mount dir it must stay under. `hierarchies` maps name -> mount dir
    (v1: per controller, v2: {UNIFIED: root}); `root` names the cgroup root in messages."""
    relative = relative_path(cgroups_path)
    dirs: dict[str, str] = {}
    roots: dict[str, str] = {}
    for name, path in hierarchies.items():
        if name.startswith("name="):
            continue  # named hierarchies (name=systemd) hold no resource controls
        dirs[name] = safe_join(path, relative, cgroups_path)
        roots[name] = path
    if not dirs:
        raise CgroupFactsError(f"no cgroup hierarchies under {root}")
    return dirs, roots


def strip_mount_root(path: str, mount_root: str, label: str) -> str:
    """A /proc/<pid>/cgroup path relative to a mount that shows only a subtree (an agent in
    a container sees its own cgroup as the mount's top)."""
    if mount_root in ("", "/"):
        return path
    root = mount_root.rstrip("/")
    if path == root or path.startswith(root + "/"):
        return path[len(root):] or "/"
    raise CgroupPathError(label, f"cgroup {path} is outside the mounted subtree {mount_root}")


def dir_of(dirs: Mapping[str, D], version: int, controller: str, cgroups_path: str) -> D:
    """One container dir: v1 by controller; v2 has a single dir whatever the controller."""
    key = UNIFIED if version == 2 else controller
    try:
        return dirs[key]
    except KeyError:
        raise CgroupFactsError(
            f"no {controller!r} hierarchy for cgroups path {cgroups_path!r}"
        ) from None
