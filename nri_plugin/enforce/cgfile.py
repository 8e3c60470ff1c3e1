"""One cgroup file write, checked and read back: the core of every nri-sla cgroup writer.

`write_checked` refuses anything but a resource-control file inside the container's own
cgroup, writes the value, reads it back and compares it the way the kernel normalises it
(readback.py). The plugin's writers (cgroupfs.py: cgroupspy for v1 I/O) pass their own
byte movers; the OCI hook (hook/writes.py) uses the plain write(2) below. Plain strings
and os.path only: the hook runs this for every container with an SLA, from a cached
decision too, where pathlib or dataclasses would cost more than the writes themselves.
"""

from __future__ import annotations

import errno
import os

from nri_plugin.enforce.cgpaths import UNIFIED, within
from nri_plugin.enforce.errors import CgroupWriteError
from nri_plugin.enforce.readback import PAGE_SIZE, values_match

TYPE_CHECKING = False  # typing costs the hook start-up time; only checkers need it
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    # (ok, value read back, error, the file's path once the checks found it)
    Checked = tuple[bool, str | None, CgroupWriteError | None, str | None]

# Files nri-sla may write on v2: resource controls only; never cgroup.procs/cgroup.*.
# (On v1 a file must carry its controller's prefix, which rules out tasks/cgroup.procs.)
V2_PREFIXES = ("cpu.", "cpuset.", "memory.", "io.", "pids.", "hugetlb.", "rdma.", "misc.")

HINTS = {
    errno.EINVAL: "the kernel rejected the value (out of range, or conflicts with the parent)",
    errno.ENODEV: "the device is not usable here (a partition, or not a block device)",
    errno.ENOENT: "no such file: the controller or feature is missing on this kernel",
    errno.EACCES: "permission denied (needs root or a delegated cgroup)",
    errno.EPERM: "operation not permitted (needs root or a delegated cgroup)",
    errno.EBUSY: "busy (the cgroup's current use conflicts with the value)",
    errno.ERANGE: "value out of range for this file",
}


def os_reason(e: OSError) -> str:
    """The OS error with a hint at the usual cause on cgroupfs."""
    base = e.strerror or str(e)
    hint = HINTS.get(e.errno or 0)
    return f"{base} ({hint})" if hint else base


def target(version: int, controller: str, name: str, value: str,
           dirs: Mapping[str, str]) -> str:
    """The file to write, after every check; raises CgroupWriteError.

    `dirs` are the container's dirs (v1: controller -> dir; v2: {UNIFIED: dir}).
    """
    if not name or "/" in name or "\0" in name or name in (".", ".."):
        raise CgroupWriteError(name, value, "file must be a plain file name")
    if version == 1:
        if not name.startswith(controller + "."):
            raise CgroupWriteError(name, value,
                                   f"file does not belong to controller {controller!r}")
        if controller not in dirs:
            raise CgroupWriteError(name, value,
                                   f"cgroup v1 controller {controller!r} is not mounted")
        base = dirs[controller]
    else:
        if not name.startswith(V2_PREFIXES):
            raise CgroupWriteError(name, value, "not a resource control file (allowed "
                                   f"prefixes: {', '.join(V2_PREFIXES)})")
        base = dirs[UNIFIED]
    path = os.path.join(base, name)
    if not os.path.isdir(base):
        raise CgroupWriteError(path, value,
                               "cgroup directory does not exist (container not created?)")
    if not os.path.exists(path) and not os.path.islink(path):
        # Checked up front: an O_CREAT open (cgroupspy's) on cgroupfs answers a misleading
        # EACCES for a file the kernel does not provide.
        raise CgroupWriteError(path, value, HINTS[errno.ENOENT])
    # The container dir came from a validated path, but check the final file too: a
    # symlink planted in a delegated subtree must not redirect the write elsewhere.
    if os.path.islink(path) or not within(os.path.realpath(path), os.path.realpath(base)):
        raise CgroupWriteError(path, value, f"resolves outside {base}")
    return path


def write_value(path: str, value: str) -> None:
    """One write(2) of the whole value: cgroup files parse each write separately.

    O_TRUNC as runc (and cgroupspy's open "w") use it: cgroupfs ignores it, while a test's
    plain-file tree must not keep the tail of a longer previous value.
    """
    fd = os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_CLOEXEC)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def read_value(path: str) -> str:
    with open(path, encoding="utf-8", errors="replace") as fh:
        return fh.read()


def write_checked(version: int, controller: str, name: str, value: str,
                  dirs: Mapping[str, str],
                  write: Callable[[str, str], None] = write_value,
                  read: Callable[[str], str] = read_value,
                  page_size: int = PAGE_SIZE) -> Checked:
    """Check, write, read back, compare; every failure is a CgroupWriteError in the result,
    never an exception. `write(path, value)` and `read(path)` move the bytes."""
    try:
        path = target(version, controller, name, value, dirs)
    except CgroupWriteError as e:
        return False, None, e, None
    try:
        write(path, value)
    except OSError as e:
        return False, None, CgroupWriteError(path, value, os_reason(e)), path
    try:
        read_back = read(path)
    except OSError as e:
        return False, None, CgroupWriteError(
            path, value, f"read-back failed: {os_reason(e)}"), path
    if values_match(name, value, read_back, page_size):
        return True, read_back.strip(), None, path
    return False, read_back.strip(), CgroupWriteError(
        path, value, f"read back {read_back.strip()!r}, which does not match"), path
