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

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from nri_plugin.enforce import cgfile
from nri_plugin.enforce.cgpaths import UNIFIED
from nri_plugin.enforce.errors import CgroupWriteError
from nri_plugin.enforce.nodefacts import CgroupFacts, CgroupPaths, container_cgroup_paths
from nri_plugin.enforce.readback import PAGE_SIZE


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


def raise_for_failures(results: Iterable[WriteResult]) -> None:
    """Hard enforcement: raise the first failure's CgroupWriteError."""
    for r in results:
        if not r.ok:
            raise r.error or CgroupWriteError(r.path or r.write.file, r.write.value, "failed")


class _Writer:
    """The checks, write and read-back are cgfile.write_checked (shared with the OCI hook);
    subclasses say where the container's dirs are and how bytes move."""

    page_size = PAGE_SIZE
    version = 0

    def _dirs(self) -> dict[str, str]:
        raise NotImplementedError

    def _do_write(self, write: CgroupWrite, target: Path) -> None:
        cgfile.write_value(str(target), write.value)

    def _do_read(self, write: CgroupWrite, target: Path) -> str:
        return cgfile.read_value(str(target))

    def apply_one(self, write: CgroupWrite) -> WriteResult:
        ok, read, err, path = cgfile.write_checked(
            self.version, write.controller, write.file, write.value, self._dirs(),
            lambda p, _: self._do_write(write, Path(p)), lambda p: self._do_read(write, Path(p)),
            self.page_size)
        return WriteResult(write, ok, read, err,
                           Path(path) if path is not None else err.path if err else None)

    def apply(self, writes: Iterable[CgroupWrite]) -> list[WriteResult]:
        """Write each value in order, read it back; keep going after a failure (soft mode
        wants every outcome; hard mode calls raise_for_failures)."""
        return [self.apply_one(w) for w in writes]


class _DirRef:
    """The one attribute cgroupspy's Controller needs from a node: full_path (bytes)."""

    def __init__(self, path: Path) -> None:
        self.full_path = os.fsencode(path)


class CgroupV1Writer(_Writer):
    """Writes into the container's per-controller dirs of a v1 (or hybrid) host."""

    version = 1

    def __init__(self, paths: CgroupPaths) -> None:
        if paths.version != 1:
            raise ValueError("CgroupV1Writer needs cgroup v1 paths")
        self.paths = paths
        self._dir_strings = {name: str(d) for name, d in paths.dirs.items()}
        self._controllers: dict[str, object] = {}

    def _dirs(self) -> dict[str, str]:
        return self._dir_strings

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
            cgfile.write_value(str(target), write.value)
        else:
            ctl.set_property(write.file.encode(), write.value)  # type: ignore[attr-defined]

    def _do_read(self, write: CgroupWrite, target: Path) -> str:
        ctl = self._controller(write, target)
        if ctl is None:
            return cgfile.read_value(str(target))
        return ctl.get_property(write.file.encode())  # type: ignore[attr-defined, no-any-return]


class CgroupV2Writer(_Writer):
    """Writes into the container's single dir on a cgroup v2 host."""

    version = 2

    def __init__(self, path: Path | CgroupPaths) -> None:
        if isinstance(path, CgroupPaths):
            if path.version != 2:
                raise ValueError("CgroupV2Writer needs cgroup v2 paths")
            path = path.dirs[UNIFIED]
        self.path = Path(path)

    def _dirs(self) -> dict[str, str]:
        return {UNIFIED: str(self.path)}


def writer_for(paths: CgroupPaths) -> CgroupV1Writer | CgroupV2Writer:
    """The writer matching the paths' cgroup version."""
    return CgroupV1Writer(paths) if paths.version == 1 else CgroupV2Writer(paths)


def apply_to_container(
    cgroups_path: str, writes: Iterable[CgroupWrite], facts: CgroupFacts
) -> list[WriteResult]:
    """Resolve a container's cgroups_path (cgroupfs or systemd form) and apply writes there."""
    return writer_for(container_cgroup_paths(cgroups_path, facts)).apply(writes)
