"""Parse /proc/<pid>/mountinfo (only what cgroup detection needs; /proc/<pid>/cgroup is
cgpaths.parse_proc_cgroup, which the hook's cached run needs without `re`).

mountinfo line layout (proc(5)):
``ID PARENT MAJ:MIN ROOT MOUNT-POINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER-OPTIONS``.
ROOT is the part of the filesystem visible at MOUNT-POINT; for a cgroup mount it is the
cgroup (relative to our cgroup namespace) that appears as the mount's top directory, which
matters when the agent runs inside a container with its own cgroup mount.
"""

from __future__ import annotations

import re

from nri_plugin.enforce.errors import CgroupFactsError
from nri_plugin.value import Frozen

_OCTAL_ESCAPE = re.compile(r"\\([0-7]{3})")

# v1 super options that are mount flags, not controller names.
_NOT_CONTROLLERS = frozenset(
    {
        "rw",
        "ro",
        "relatime",
        "noatime",
        "nosuid",
        "nodev",
        "noexec",
        "clone_children",
        "noprefix",
        "xattr",
        "cpuset_v2_mode",
        "favordynmods",
    }
)


class CgroupMount(Frozen):
    """One cgroup or cgroup2 mount."""

    mount_point: str  # as the kernel lists it: absolute and normalised
    root: str  # hierarchy path visible at mount_point ("/" on a host)
    fstype: str  # "cgroup" (v1) or "cgroup2"
    controllers: tuple[str, ...]  # v1 controllers (and "name=..." hierarchies); () for v2


def _unescape(field: str) -> str:
    # The kernel escapes space, tab, newline and backslash in paths as \ooo.
    return _OCTAL_ESCAPE.sub(lambda m: chr(int(m.group(1), 8)), field)


def parse_mountinfo(text: str) -> list[CgroupMount]:
    """Return the cgroup/cgroup2 mounts listed in a mountinfo text, in file order."""
    mounts: list[CgroupMount] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        fields = line.split()
        try:
            sep = fields.index("-")
        except ValueError:
            raise CgroupFactsError(
                f"mountinfo line {lineno}: no ' - ' separator: {line!r}"
            ) from None
        if sep < 6 or len(fields) < sep + 3:
            raise CgroupFactsError(f"mountinfo line {lineno}: too few fields: {line!r}")
        fstype = fields[sep + 1]
        if fstype not in ("cgroup", "cgroup2"):
            continue
        controllers: tuple[str, ...] = ()
        if fstype == "cgroup":
            opts = fields[sep + 3].split(",")
            controllers = tuple(
                o
                for o in opts
                if o.startswith("name=") or ("=" not in o and o not in _NOT_CONTROLLERS)
            )
        mounts.append(
            CgroupMount(
                mount_point=_unescape(fields[4]),
                root=_unescape(fields[3]),
                fstype=fstype,
                controllers=controllers,
            )
        )
    return mounts
