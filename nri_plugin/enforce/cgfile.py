"""The one cgroup writer: every value nri-sla writes, checked, written and read back.

`CgroupWriter` writes `CgroupWrite`s into one container's cgroup (v1 or v2) for the plugin's
direct writes and the OCI hook alike, and reads them back for verification (`drift`).
Hard mode applies them all or none (`apply(..., undo_on_failure=True)`): each file's value
is read before it is written, and a failure writes the earlier files' old values back,
newest first, so that a refused container is not left half-enforced.
Each write refuses anything but a resource-control file inside the container's own cgroup,
is one write(2) of the whole value, and is read back and compared the way the kernel
normalises it (readback.py). On v1 written bytes move through cgroupspy's controller
objects (bound to our own resolved directories; see docs/cgroups.md for why not its node
tree), for the controllers it knows; every read is one read(2). Plain strings and posix
only: the hook runs this for every container with an SLA, from a cached decision too,
where pathlib or dataclasses would cost more than the writes themselves.
"""

import posix  # not os: nri_plugin/posixfs.py says why

from nri_plugin.enforce.cgpaths import UNIFIED
from nri_plugin.enforce.errors import CgroupWriteError
from nri_plugin.enforce.readback import PAGE_SIZE, restore_value, values_match
from nri_plugin.posixfs import basename, dirname, fsencode, isdir, read_attribute
from nri_plugin.value import Value

TYPE_CHECKING = False  # typing costs the hook start-up time; only checkers need it
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from nri_plugin.enforce.cgpaths import CgroupPaths

# Files nri-sla may write on v2: resource controls only; never cgroup.procs/cgroup.*.
# (On v1 a file must carry its controller's prefix, which rules out tasks/cgroup.procs.)
V2_PREFIXES = ("cpu.", "cpuset.", "memory.", "io.", "pids.", "hugetlb.", "rdma.", "misc.")

NO_SUCH_FILE = "no such file: the controller or feature is missing on this kernel"


def os_reason(e: OSError) -> str:
    """The OS error with a hint at the usual cause on cgroupfs."""
    base = e.strerror or str(e)
    hint = _hints().get(e.errno or 0)
    return f"{base} ({hint})" if hint else base


def _hints() -> dict[int, str]:
    """errno -> the usual cause on cgroupfs. Built when something failed: `errno` is one
    more module to import (~0.2 M instructions) that a run whose writes succeed, as the
    OCI hook's cached run, never needs (docs/hook.md)."""
    import errno

    return {
        errno.EINVAL: "the kernel rejected the value (out of range, or conflicts with the parent)",
        errno.ENODEV: "the device is not usable here (a partition, or not a block device)",
        errno.ENOENT: NO_SUCH_FILE,
        errno.EACCES: "permission denied (needs root or a delegated cgroup)",
        errno.EPERM: "operation not permitted (needs root or a delegated cgroup)",
        errno.EBUSY: "busy (the cgroup's current use conflicts with the value)",
        errno.ERANGE: "value out of range for this file",
    }


def target(version: int, controller: str, name: str, value: str, dirs: "Mapping[str, str]") -> str:
    """The file to write, after every check; raises CgroupWriteError.

    `dirs` are the container's dirs (v1: controller -> dir; v2: {UNIFIED: dir}).
    """
    if not name or "/" in name or "\0" in name or name in (".", ".."):
        raise CgroupWriteError(name, value, "file must be a plain file name")
    if version == 1:
        if not name.startswith(controller + "."):
            raise CgroupWriteError(
                name, value, f"file does not belong to controller {controller!r}"
            )
        if controller not in dirs:
            raise CgroupWriteError(
                name, value, f"cgroup v1 controller {controller!r} is not mounted"
            )
        base = dirs[controller]
    else:
        if not name.startswith(V2_PREFIXES):
            raise CgroupWriteError(
                name,
                value,
                f"not a resource control file (allowed prefixes: {', '.join(V2_PREFIXES)})",
            )
        base = dirs[UNIFIED]
    path = base + "/" + name
    try:
        mode = posix.lstat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        if not isdir(base):
            raise CgroupWriteError(
                path, value, "cgroup directory does not exist (container not created?)"
            ) from None
        # Checked up front: an O_CREAT open (cgroupspy's) on cgroupfs answers a misleading
        # EACCES for a file the kernel does not provide.
        raise CgroupWriteError(path, value, NO_SUCH_FILE) from None
    # The container dir came from a validated path (cgpaths.safe_join), and `name` is a
    # plain name, so only the file itself could lead elsewhere: a symlink planted in a
    # delegated subtree must not redirect the write.
    if mode & 0o170000 == 0o120000:
        raise CgroupWriteError(path, value, f"is a symlink: resolves outside {base}")
    return path


def write_value(path: str, value: str) -> None:
    """One write(2) of the whole value: cgroup files parse each write separately.

    O_TRUNC as runc (and cgroupspy's open "w") use it: cgroupfs ignores it, while a test's
    plain-file tree must not keep the tail of a longer previous value.
    """
    fd = posix.open(path, posix.O_WRONLY | posix.O_TRUNC | posix.O_CLOEXEC)
    try:
        posix.write(fd, value.encode())
    finally:
        posix.close(fd)


def read_value(path: str, limit: int = 1 << 16) -> str:
    """A cgroup file's content (one read(2): cgroupfs hands a whole small file at once;
    no text-file object per read on the hook's path)."""
    return read_attribute(path, limit).decode("utf-8", "replace")


class CgroupWrite(tuple):
    """One value for one file: CgroupWrite("cpu", "cpu.cfs_quota_us", "50000").

    A tuple (cheap, hashable, JSON-able as a list for the hook's decision cache)."""

    __slots__ = ()

    def __new__(cls, controller: str, file: str, value: str) -> "CgroupWrite":
        return tuple.__new__(cls, (controller, file, value))

    @property
    def controller(self) -> str:
        return self[0]

    @property
    def file(self) -> str:
        return self[1]

    @property
    def value(self) -> str:
        return self[2]

    def __repr__(self) -> str:
        return f"CgroupWrite({self[0]!r}, {self[1]!r}, {self[2]!r})"


class WriteResult(Value):
    """The outcome of one CgroupWrite: the value read back, or the error."""

    __slots__ = ("error", "ok", "path", "read_back", "write")

    def __init__(
        self,
        write: CgroupWrite,
        ok: bool,
        read_back: str | None = None,
        error: CgroupWriteError | None = None,
        path: str | None = None,
    ) -> None:
        self.write = write
        self.ok = ok
        self.read_back = read_back
        self.error = error
        self.path = path


class Mismatch(Value):
    """A setting whose file does not hold the planned value: what it holds (`found`), or
    why it could not be read (`error`, `found` None)."""

    __slots__ = ("error", "found", "path", "write")

    def __init__(
        self, write: CgroupWrite, path: str | None, found: str | None, error: str | None = None
    ) -> None:
        self.write = write
        self.path = path
        self.found = found
        self.error = error

    def __str__(self) -> str:
        if self.found is None:
            return f"{self.write.controller}/{self.write.file}: cannot read ({self.error})"
        return f"{self.path}: expected {self.write.value!r}, found {self.found!r}"


# v1 controllers whose files move through cgroupspy (the others: plain write(2)).
CGROUPSPY_CONTROLLERS = ("cpu", "cpuacct", "cpuset", "memory", "blkio", "devices")


class _DirRef:
    """The one attribute cgroupspy's Controller needs from a node: full_path (bytes)."""

    def __init__(self, path: str) -> None:
        self.full_path = fsencode(path)


class CgroupWriter:
    """Writes into (and reads back from) one container's cgroup, v1 or v2."""

    def __init__(self, paths: "CgroupPaths", page_size: int = PAGE_SIZE) -> None:
        self.paths = paths
        self.page_size = page_size
        self._controllers: dict[str, object] = {}

    def apply(
        self, writes: "Iterable[CgroupWrite]", *, undo_on_failure: bool = False
    ) -> list[WriteResult]:
        """Each write in order, each read back. By default it keeps going after a
        failure (soft mode keeps what succeeded and wants every outcome).

        undo_on_failure (hard mode): all or none. Each file's value is read before the
        write (a file that cannot be read is not written: it could not be undone); at
        the first failure every earlier write is undone, newest first, and the results
        end with that failure, its error naming what was undone and what could not be.
        """
        if not undo_on_failure:
            return [self.apply_one(w) for w in writes]
        results: list[WriteResult] = []
        done: list[tuple[CgroupWrite, str, str]] = []  # (write, path, value before it)
        for write in writes:
            controller, name, value = write
            try:
                path = target(self.paths.version, controller, name, value, self.paths.dirs)
            except CgroupWriteError as e:
                return [*results, self._undone(WriteResult(write, False, None, e, None), done)]
            try:
                before = self._read(controller, path)
            except OSError as e:
                failed = WriteResult(
                    write,
                    False,
                    None,
                    CgroupWriteError(path, value, f"cannot read the value to undo: {os_reason(e)}"),
                    path,
                )
                return [*results, self._undone(failed, done)]
            try:
                self._write(controller, path, value)
            except OSError as e:  # not written: only the earlier ones to undo
                failed = WriteResult(
                    write, False, None, CgroupWriteError(path, value, os_reason(e)), path
                )
                return [*results, self._undone(failed, done)]
            done.append((write, path, before))  # written: undone too if it does not hold
            result = self._read_back(write, path)
            if not result.ok:
                return [*results, self._undone(result, done)]
            results.append(result)
        return results

    def _undone(self, failed: WriteResult, done: list[tuple[CgroupWrite, str, str]]) -> WriteResult:
        """Write back the old values of `done`, newest first; `failed` with its error
        saying what was undone and what could not be."""
        undone, stuck = [], []
        for (controller, name, value), path, before in reversed(done):
            old = restore_value(name, value, before)
            try:
                self._write(controller, path, old)
                undone.append(name)
            except OSError as e:
                stuck.append(f"{name} (still {value!r}: {os_reason(e)})")
        error = failed.error
        if error is not None and (undone or stuck):
            notes = [f"undone: {', '.join(undone)}"] if undone else []
            if stuck:
                notes.append(f"could not undo {', '.join(stuck)}")
            error = CgroupWriteError(error.path, error.value, f"{error.detail}; {'; '.join(notes)}")
        return WriteResult(failed.write, False, failed.read_back, error, failed.path)

    def apply_one(self, write: CgroupWrite) -> WriteResult:
        controller, name, value = write
        try:
            path = target(self.paths.version, controller, name, value, self.paths.dirs)
        except CgroupWriteError as e:
            return WriteResult(write, False, None, e, None)
        return self._write_at(write, path)

    def _write_at(self, write: CgroupWrite, path: str) -> WriteResult:
        """One checked write (`path` from target()), read back and compared."""
        controller, _, value = write
        try:
            self._write(controller, path, value)
        except OSError as e:
            return WriteResult(
                write, False, None, CgroupWriteError(path, value, os_reason(e)), path
            )
        return self._read_back(write, path)

    def _read_back(self, write: CgroupWrite, path: str) -> WriteResult:
        """The file's content after `write`, compared the way the kernel normalises it."""
        controller, name, value = write
        try:
            read_back = self._read(controller, path)
        except OSError as e:
            return WriteResult(
                write,
                False,
                None,
                CgroupWriteError(path, value, f"read-back failed: {os_reason(e)}"),
                path,
            )
        if values_match(name, value, read_back, self.page_size):
            return WriteResult(write, True, read_back.strip(), None, path)
        return WriteResult(
            write,
            False,
            read_back.strip(),
            CgroupWriteError(path, value, f"read back {read_back.strip()!r}, which does not match"),
            path,
        )

    def drift(self, writes: "Iterable[CgroupWrite]") -> list[str]:
        """Verification: one text per setting whose file does not hold the planned value."""
        return [str(m) for m in self.mismatches(writes)]

    def mismatches(self, writes: "Iterable[CgroupWrite]") -> list[Mismatch]:
        """Each setting whose file does not hold the planned value (or cannot be read)."""
        found = []
        for write in writes:
            controller, name, value = write
            try:
                # The writes' own checks: a cached file name is input too (no `..`, no
                # symlink out of the container's cgroup, resource-control files only).
                path = target(self.paths.version, controller, name, value, self.paths.dirs)
                read = self._read(controller, path)
            except CgroupWriteError as exc:
                found.append(Mismatch(write, None, None, exc.detail))
                continue
            except OSError as exc:  # the setting cannot hold
                found.append(Mismatch(write, path, None, str(exc)))
                continue
            if not values_match(name, value, read, self.page_size):
                found.append(Mismatch(write, path, read.strip()))
        return found

    def _controller(self, controller: str, path: str) -> object | None:
        if self.paths.version != 1 or controller not in CGROUPSPY_CONTROLLERS:
            return None
        key = f"{controller}:{dirname(path)}"
        found = self._controllers.get(key)
        if found is None:
            from cgroupspy import controllers as cs  # only v1 writes pay for it

            classes = {
                "cpu": cs.CpuController,
                "cpuacct": cs.CpuAcctController,
                "cpuset": cs.CpuSetController,
                "memory": cs.MemoryController,
                "blkio": cs.BlkIOController,
                "devices": cs.DevicesController,
            }
            found = self._controllers[key] = classes[controller](_DirRef(dirname(path)))
        return found

    def _read(self, controller: str, path: str) -> str:
        # One read(2) on v1 too: cgroupspy's get_property is open().read() through a text
        # file object, which cost the drift watch more than the read itself.
        return read_value(path)

    def _write(self, controller: str, path: str, value: str) -> None:
        ctl = self._controller(controller, path)
        if ctl is None:
            write_value(path, value)
        else:
            ctl.set_property(basename(path).encode(), value)  # type: ignore[attr-defined]
