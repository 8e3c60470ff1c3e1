"""The hook's cgroupfs writes: one write(2) per value, each read back and compared.

The same checks, order and messages as `nri_sla.enforce.cgroupfs` (plain file names only,
resource-control files only, the file must exist and resolve inside the container's
cgroup; `CgroupWriteError` texts; the kernel's normalisations via enforce.readback), but
without pathlib or dataclasses, because this runs for every container with an SLA, from a
cached decision too. Writes are (controller, file, value) tuples.
"""

from __future__ import annotations

import errno
import os

from nri_sla.enforce.errors import CgroupFactsError, CgroupWriteError
from nri_sla.enforce.readback import PAGE_SIZE, values_match
from nri_sla.hook.cgdirs import UNIFIED, ContainerDirs, within
from nri_sla.hook.values import Value

# Files nri-sla may write on v2: resource controls only; never cgroup.procs/cgroup.*.
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

TYPE_CHECKING = False  # typing costs start-up time; only checkers need it
if TYPE_CHECKING:
    Write = tuple[str, str, str]  # controller, file, value


class Result(Value):
    __slots__ = ("error", "ok", "read_back", "write")

    def __init__(self, write: Write, ok: bool, read_back: str | None = None,
                 error: CgroupWriteError | None = None) -> None:
        self.write = write
        self.ok = ok
        self.read_back = read_back
        self.error = error


def os_reason(e: OSError) -> str:
    base = e.strerror or str(e)
    hint = HINTS.get(e.errno or 0)
    return f"{base} ({hint})" if hint else base


def target(write: Write, dirs: ContainerDirs) -> str:
    """The file to write, after every check; raises CgroupWriteError."""
    controller, name, value = write
    if not name or "/" in name or "\0" in name or name in (".", ".."):
        raise CgroupWriteError(name, value, "file must be a plain file name")
    if dirs.version == 1:
        if not name.startswith(controller + "."):
            raise CgroupWriteError(name, value,
                                   f"file does not belong to controller {controller!r}")
        if controller not in dirs.dirs:
            raise CgroupWriteError(name, value,
                                   f"cgroup v1 controller {controller!r} is not mounted")
        base = dirs.dirs[controller]
    else:
        if not name.startswith(V2_PREFIXES):
            raise CgroupWriteError(name, value, "not a resource control file (allowed "
                                   f"prefixes: {', '.join(V2_PREFIXES)})")
        base = dirs.dirs[UNIFIED]
    path = os.path.join(base, name)
    if not os.path.isdir(base):
        raise CgroupWriteError(path, value,
                               "cgroup directory does not exist (container not created?)")
    if not os.path.exists(path) and not os.path.islink(path):
        # Checked up front: an O_CREAT open on cgroupfs answers a misleading EACCES.
        raise CgroupWriteError(path, value, HINTS[errno.ENOENT])
    # A symlink planted in a delegated subtree must not redirect the write elsewhere.
    if os.path.islink(path) or not within(os.path.realpath(path), os.path.realpath(base)):
        raise CgroupWriteError(path, value, f"resolves outside {base}")
    return path


def read_file(path: str) -> str:
    with open(path, encoding="utf-8", errors="replace") as fh:
        return fh.read()


def apply_one(write: Write, dirs: ContainerDirs) -> Result:
    try:
        path = target(write, dirs)
    except CgroupWriteError as e:
        return Result(write, False, None, e)
    value = write[2]
    try:
        # One write(2) of the whole value: cgroup files parse each write separately.
        # O_TRUNC as runc (and cgroupspy's open "w") use it: cgroupfs ignores it, while a
        # test's plain-file tree must not keep the tail of a longer previous value.
        fd = os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_CLOEXEC)
        try:
            os.write(fd, value.encode())
        finally:
            os.close(fd)
    except OSError as e:
        return Result(write, False, None, CgroupWriteError(path, value, os_reason(e)))
    try:
        read = read_file(path)
    except OSError as e:
        return Result(write, False, None,
                      CgroupWriteError(path, value, f"read-back failed: {os_reason(e)}"))
    if values_match(write[1], value, read, PAGE_SIZE):
        return Result(write, True, read.strip())
    return Result(write, False, read.strip(), CgroupWriteError(
        path, value, f"read back {read.strip()!r}, which does not match"))


def apply(writes: list[Write], dirs: ContainerDirs) -> list[Result]:
    """Every write in order, each read back; keeps going after a failure."""
    return [apply_one(w, dirs) for w in writes]


def drift(writes: list[Write], dirs: ContainerDirs) -> list[str]:
    """Verify-only mode: one text per setting whose file does not hold the planned value."""
    problems = []
    for controller, name, value in writes:
        try:
            path = os.path.join(dirs.dir(controller), name)
            read = read_file(path)
        except (OSError, CgroupFactsError) as exc:  # the setting cannot hold
            problems.append(f"{controller}/{name}: cannot read ({exc})")
            continue
        if not values_match(name, value, read):
            problems.append(f"{path}: expected {value!r}, found {read.strip()!r}")
    return problems
