"""Direct cgroup writes with read-back, for cgroup v1 (per-controller dirs) and v2.

Each CgroupWrite is one write(2) of one value to one file in the container's own cgroup,
followed by a read-back compared semantically (readback.py). Nothing escapes as OSError:
a failure is a CgroupWriteError inside the WriteResult (or raised by raise_for_failures).

v1 I/O goes through cgroupspy's controller objects (CpuController, CpuSetController,
MemoryController, BlkIOController) bound to our own resolved directories. We do not use
cgroupspy's Node tree: it derives the controller from the mount dir's name, so it cannot
serve a co-mounted "cpu,cpuacct" hierarchy or a mount elsewhere than /sys/fs/cgroup/<name>.
We also do not use its typed descriptors for writing: CommaDashSetFile wants Python ints
rather than a kernel list string, blkio.bfq.weight is absent, and the write_*_device
throttle descriptors carry a trailing space in their file names. Controllers cgroupspy
lacks (pids, hugetlb, ...) use plain file writes.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from nri_sla.enforce.errors import CgroupWriteError
from nri_sla.enforce.nodefacts import UNIFIED, CgroupFacts, CgroupPaths, container_cgroup_paths
from nri_sla.enforce.readback import PAGE_SIZE, values_match

# Files nri-sla may write: resource controls only; never cgroup.procs/tasks/cgroup.*.
_V2_PREFIXES = ("cpu.", "cpuset.", "memory.", "io.", "pids.", "hugetlb.", "rdma.", "misc.")

_HINTS = {
    errno.EINVAL: "the kernel rejected the value (out of range, or conflicts with the parent)",
    errno.ENODEV: "the device is not usable here (a partition, or not a block device)",
    errno.ENOENT: "no such file: the controller or feature is missing on this kernel",
    errno.EACCES: "permission denied (needs root or a delegated cgroup)",
    errno.EPERM: "operation not permitted (needs root or a delegated cgroup)",
    errno.EBUSY: "busy (the cgroup's current use conflicts with the value)",
    errno.ERANGE: "value out of range for this file",
}


@dataclass(frozen=True)
class CgroupWrite:
    """One value for one file: controller "cpu", file "cpu.cfs_quota_us", value "50000"."""

    controller: str
    file: str
    value: str


@dataclass(frozen=True)
class WriteResult:
    """The outcome of one CgroupWrite: the value read back, or the error."""

    write: CgroupWrite
    ok: bool
    read_back: str | None
    error: CgroupWriteError | None = None
    path: Path | None = None


def _os_reason(e: OSError) -> str:
    base = e.strerror or str(e)
    hint = _HINTS.get(e.errno or 0)
    return f"{base} ({hint})" if hint else base


def raise_for_failures(results: Iterable[WriteResult]) -> None:
    """Hard enforcement: raise the first failure's CgroupWriteError."""
    for r in results:
        if not r.ok:
            raise r.error or CgroupWriteError(r.path or r.write.file, r.write.value, "failed")


class _Writer:
    """Shared logic; subclasses say which dir a write goes to and how bytes move."""

    page_size = PAGE_SIZE

    def _dir_for(self, write: CgroupWrite) -> Path:
        raise NotImplementedError

    def _check_file(self, write: CgroupWrite) -> None:
        raise NotImplementedError

    def _do_write(self, write: CgroupWrite, target: Path) -> None:
        _raw_write(target, write.value)

    def _do_read(self, write: CgroupWrite, target: Path) -> str:
        return target.read_text()

    def _target(self, write: CgroupWrite) -> Path:
        name = write.file
        if not name or "/" in name or "\0" in name or name in (".", ".."):
            raise CgroupWriteError(write.file, write.value, "file must be a plain file name")
        self._check_file(write)
        base = self._dir_for(write)
        if not base.is_dir():
            raise CgroupWriteError(
                base / name, write.value, "cgroup directory does not exist (container not created?)"
            )
        target = base / name
        if not target.exists() and not target.is_symlink():
            # Checked up front: cgroupspy opens with O_CREAT, which cgroupfs answers with a
            # misleading EACCES for a file the kernel does not provide.
            raise CgroupWriteError(target, write.value, _HINTS[errno.ENOENT])
        # The container dir came from a validated path, but check the final file too: a
        # symlink planted in a delegated subtree must not redirect the write elsewhere.
        if target.is_symlink() or not target.resolve().is_relative_to(base.resolve()):
            raise CgroupWriteError(target, write.value, f"resolves outside {base}")
        return target

    def apply_one(self, write: CgroupWrite) -> WriteResult:
        try:
            target = self._target(write)
        except CgroupWriteError as e:
            return WriteResult(write, False, None, e, e.path)
        try:
            self._do_write(write, target)
        except OSError as e:
            return WriteResult(
                write, False, None, CgroupWriteError(target, write.value, _os_reason(e)), target
            )
        try:
            read = self._do_read(write, target)
        except OSError as e:
            err = CgroupWriteError(target, write.value, f"read-back failed: {_os_reason(e)}")
            return WriteResult(write, False, None, err, target)
        if values_match(write.file, write.value, read, self.page_size):
            return WriteResult(write, True, read.strip(), None, target)
        err = CgroupWriteError(
            target, write.value, f"read back {read.strip()!r}, which does not match"
        )
        return WriteResult(write, False, read.strip(), err, target)

    def apply(self, writes: Iterable[CgroupWrite]) -> list[WriteResult]:
        """Write each value in order, read it back; keep going after a failure (soft mode
        wants every outcome; hard mode calls raise_for_failures)."""
        return [self.apply_one(w) for w in writes]


def _raw_write(target: Path, value: str) -> None:
    # One write(2) of the whole value: cgroup files parse each write separately.
    fd = os.open(target, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


class _DirRef:
    """The one attribute cgroupspy's Controller needs from a node: full_path (bytes)."""

    def __init__(self, path: Path) -> None:
        self.full_path = os.fsencode(path)


class CgroupV1Writer(_Writer):
    """Writes into the container's per-controller dirs of a v1 (or hybrid) host."""

    def __init__(self, paths: CgroupPaths) -> None:
        if paths.version != 1:
            raise ValueError("CgroupV1Writer needs cgroup v1 paths")
        self.paths = paths
        self._controllers: dict[str, object] = {}

    def _dir_for(self, write: CgroupWrite) -> Path:
        if write.controller not in self.paths.dirs:
            raise CgroupWriteError(
                write.file, write.value, f"cgroup v1 controller {write.controller!r} is not mounted"
            )
        return self.paths.dirs[write.controller]

    def _check_file(self, write: CgroupWrite) -> None:
        if not write.file.startswith(write.controller + "."):
            raise CgroupWriteError(
                write.file,
                write.value,
                f"file does not belong to controller {write.controller!r}",
            )

    def _controller(self, write: CgroupWrite, target: Path) -> object | None:
        from cgroupspy import controllers as cs  # lazy: only direct v1 writes pay for it

        classes = {
            "cpu": cs.CpuController,
            "cpuacct": cs.CpuAcctController,
            "cpuset": cs.CpuSetController,
            "memory": cs.MemoryController,
            "blkio": cs.BlkIOController,
            "devices": cs.DevicesController,
        }
        cls = classes.get(write.controller)
        if cls is None:
            return None
        key = f"{write.controller}:{target.parent}"
        if key not in self._controllers:
            self._controllers[key] = cls(_DirRef(target.parent))
        return self._controllers[key]

    def _do_write(self, write: CgroupWrite, target: Path) -> None:
        ctl = self._controller(write, target)
        if ctl is None:
            _raw_write(target, write.value)
        else:
            ctl.set_property(write.file.encode(), write.value)  # type: ignore[attr-defined]

    def _do_read(self, write: CgroupWrite, target: Path) -> str:
        ctl = self._controller(write, target)
        if ctl is None:
            return target.read_text()
        return ctl.get_property(write.file.encode())  # type: ignore[attr-defined, no-any-return]


class CgroupV2Writer(_Writer):
    """Writes into the container's single dir on a cgroup v2 host."""

    def __init__(self, path: Path | CgroupPaths) -> None:
        if isinstance(path, CgroupPaths):
            if path.version != 2:
                raise ValueError("CgroupV2Writer needs cgroup v2 paths")
            path = path.dirs[UNIFIED]
        self.path = Path(path)

    def _dir_for(self, write: CgroupWrite) -> Path:
        return self.path

    def _check_file(self, write: CgroupWrite) -> None:
        if not write.file.startswith(_V2_PREFIXES):
            raise CgroupWriteError(
                write.file,
                write.value,
                f"not a resource control file (allowed prefixes: {', '.join(_V2_PREFIXES)})",
            )


def writer_for(paths: CgroupPaths) -> CgroupV1Writer | CgroupV2Writer:
    """The writer matching the paths' cgroup version."""
    return CgroupV1Writer(paths) if paths.version == 1 else CgroupV2Writer(paths)


def apply_to_container(
    cgroups_path: str, writes: Iterable[CgroupWrite], facts: CgroupFacts
) -> list[WriteResult]:
    """Resolve a container's cgroups_path (cgroupfs or systemd form) and apply writes there."""
    return writer_for(container_cgroup_paths(cgroups_path, facts)).apply(writes)
