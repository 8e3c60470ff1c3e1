"""Detecting the node's cgroup layout (CgroupFacts).

Reads /proc/self/mountinfo and the cgroup root; the values and the path rules themselves
are cgpaths.py (a running process's dirs too: CgroupFacts.process_paths). Runs once per
plugin start and on the OCI hook's cold path (a cached hook run reuses the stored facts):
paths are strings, as in CgroupFacts, so that path is spared importing pathlib (~4% of its
instructions, docs/hook.md "Start-up cost").
"""

from __future__ import annotations

import os
from os.path import dirname, isdir, join, normpath, realpath

from nri_plugin.enforce.cgpaths import UNIFIED, CgroupFacts, Hierarchy, is_systemd_form, scan_v1
from nri_plugin.enforce.errors import CgroupFactsError
from nri_plugin.enforce.mountinfo import CgroupMount, parse_mountinfo

DRIVERS = ("cgroupfs", "systemd")


def _read(path: str) -> str:
    try:
        with open(path) as fh:
            return fh.read()
    except OSError:
        return ""


def _mounts_under(root: str, mounts: list[CgroupMount]) -> list[CgroupMount]:
    real = realpath(root)
    return [m for m in mounts if m.mount_point == real or dirname(m.mount_point) == real]


def _detect_version(root: str, mounts: list[CgroupMount]) -> int:
    real = realpath(root)
    for m in mounts:
        if m.mount_point == real:
            return 2 if m.fstype == "cgroup2" else 1
    # A tmpfs at root with v1 mounts below it: legacy or hybrid (hybrid's cgroup2 lives at
    # root/unified without controllers, so nri-sla treats the node as v1).
    if any(m.fstype == "cgroup" for m in mounts):
        return 1
    if os.path.exists(join(root, "cgroup.controllers")):
        return 2
    if scan_v1(root):
        return 1
    raise CgroupFactsError(f"no cgroup hierarchy found at {root} (neither v1 nor v2)")


def _detect_driver(
    version: int, hierarchies: dict[str, Hierarchy], root: str, proc: str, hint: str | None
) -> str:
    # 1. The runtime's own cgroups_path says it best: systemd form means the systemd driver.
    if hint:
        return "systemd" if is_systemd_form(hint) else "cgroupfs"
    # 2. Where kubelet put the pods: kubepods.slice (systemd) or kubepods (cgroupfs).
    top = (hierarchies.get(UNIFIED if version == 2 else "cpu") or Hierarchy(root)).path
    if isdir(join(top, "kubepods.slice")):
        return "systemd"
    if isdir(join(top, "kubepods")):
        return "cgroupfs"
    # 3. No pods yet: kubelet's own default follows the init system (systemd recommended).
    return "systemd" if _read(join(proc, "1", "comm")).strip() == "systemd" else "cgroupfs"


def detect_cgroup_facts(
    root: str | os.PathLike[str] = "/sys/fs/cgroup",
    driver: str = "auto",
    version: int | str = "auto",
    *,
    mountinfo: str | os.PathLike[str] = "/proc/self/mountinfo",
    proc: str | os.PathLike[str] = "/proc",
    cgroups_path_hint: str | None = None,
) -> CgroupFacts:
    """Detect version (mounts, then cgroup.controllers) and driver (see _detect_driver)."""
    # normalised as Path(root) was ("/sys/fs/cgroup/" -> "/sys/fs/cgroup"): the facts'
    # root is joined into every container path and stored in the hook's cache
    root = normpath(os.fspath(root))
    mountinfo, proc = os.fspath(mountinfo), os.fspath(proc)
    if driver not in ("auto", *DRIVERS):
        raise CgroupFactsError(
            f"cgroup driver {driver!r}: allowed values are auto, cgroupfs, systemd"
        )
    if str(version) not in ("auto", "1", "2"):
        raise CgroupFactsError(f"cgroup version {version!r}: allowed values are auto, 1, 2")
    if not isdir(root):
        raise CgroupFactsError(f"cgroup root {root} is not a directory")
    mounts = _mounts_under(root, parse_mountinfo(_read(mountinfo)))
    ver = _detect_version(root, mounts) if str(version) == "auto" else int(version)

    hierarchies: dict[str, Hierarchy] = {}
    if ver == 2:
        real = realpath(root)
        v2 = [m for m in mounts if m.fstype == "cgroup2" and m.mount_point == real]
        hierarchies[UNIFIED] = Hierarchy(real, v2[0].root if v2 else "/")
    else:
        for m in mounts:
            if m.fstype == "cgroup":
                for c in m.controllers:
                    hierarchies.setdefault(c, Hierarchy(realpath(m.mount_point), m.root))
        if not hierarchies:
            hierarchies = scan_v1(root)
    drv = (
        driver
        if driver != "auto"
        else _detect_driver(ver, hierarchies, root, proc, cgroups_path_hint)
    )
    return CgroupFacts(ver, drv, root, hierarchies)
