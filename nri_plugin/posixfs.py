"""os.path's rules and file reads, on the built-in `posix` module alone.

Why not `os`: the OCI hook's cached run must start within 1.5x of a bare `python3 -I -S`,
which never loads `os`; `import os` (with `_collections_abc` for `os.environ`, `posixpath`,
`genericpath` and `stat`) costs a cached run ~5.6 M instructions, a sixth of the whole run
(docs/hook.md). `posix` is built in and already loaded, and has every call the
hook makes (open/read/write/stat/scandir/...). So the modules a cached run goes through
(the hook's warm path, enforce.cgpaths/cgfile, hookspec) take their calls from `posix` and
their path rules from here, and the plugin runs the same modules: one implementation.
Same results as os.path for str paths (tests/test_posixfs.py compares them).
"""

import posix
import sys
from _stat import S_ISDIR, S_ISLNK, S_ISREG, S_ISSOCK
from posix import _path_normpath  # type: ignore[attr-defined]  # os.path.normpath's C code

_ENCODING, _ERRORS = sys.getfilesystemencoding(), sys.getfilesystemencodeerrors()
READ_CHUNK = 1 << 16  # bytes per read(2): a cgroup, sysfs or /proc file comes in one
MAX_LINKS = 40  # symlinks followed in one lookup: the kernel's own limit (ELOOP)


def fsencode(path: str) -> bytes:
    return path.encode(_ENCODING, _ERRORS)


def getenv(name: str) -> str | None:
    """os.environ.get(name): posix.environ has the process's environment as bytes."""
    value = posix.environ.get(fsencode(name))
    return None if value is None else value.decode(_ENCODING, _ERRORS)


def isabs(path: str) -> bool:
    return path.startswith("/")


def join(path: str, *parts: str) -> str:
    for part in parts:
        if part.startswith("/"):
            path = part
        elif not path or path.endswith("/"):
            path += part
        else:
            path += "/" + part
    return path


def dirname(path: str) -> str:
    head = path[: path.rfind("/") + 1]
    if head and head != "/" * len(head):
        head = head.rstrip("/")
    return head


def basename(path: str) -> str:
    return path[path.rfind("/") + 1 :]


def normpath(path: str) -> str:
    return _path_normpath(path) or "."


def abspath(path: str) -> str:
    return normpath(path if path.startswith("/") else join(posix.getcwd(), path))


def _mode(path: str, follow: bool) -> int | None:
    try:
        return (posix.stat(path) if follow else posix.lstat(path)).st_mode
    except (OSError, ValueError):  # as os.path's checks: missing, unreadable, NUL byte
        return None


def exists(path: str) -> bool:
    return _mode(path, True) is not None


def isdir(path: str) -> bool:
    mode = _mode(path, True)
    return mode is not None and S_ISDIR(mode)


def isfile(path: str) -> bool:
    mode = _mode(path, True)
    return mode is not None and S_ISREG(mode)


def issock(path: str) -> bool:
    mode = _mode(path, True)
    return mode is not None and S_ISSOCK(mode)


def islink(path: str) -> bool:
    mode = _mode(path, False)
    return mode is not None and S_ISLNK(mode)


def realpath(path: str) -> str:
    """os.path.realpath: absolute, every symlink resolved, `..` taken after resolving;
    components that do not exist are kept as written. A chain of more than MAX_LINKS
    links (a loop) is left unresolved from there on, as the kernel would refuse it."""
    if not path.startswith("/"):
        path = posix.getcwd() + "/" + path
    pending = path.split("/")[::-1]  # components still to resolve, the next one last
    resolved = ""  # "" is the root; else "/a/b", no trailing slash
    links = 0
    while pending:
        name = pending.pop()
        if name in ("", "."):
            continue
        if name == "..":
            resolved = resolved[: resolved.rfind("/")] if resolved else ""
            continue
        candidate = resolved + "/" + name
        if links >= MAX_LINKS or not islink(candidate):
            resolved = candidate
            continue
        links += 1
        target = posix.readlink(candidate)
        if target.startswith("/"):
            resolved = ""
        pending.extend(target.split("/")[::-1])
    return resolved or "/"


def read_fd(fd: int, limit: int = -1) -> bytes:
    """What a binary file's read(limit) gives (all of it when limit < 0), without the io
    objects open() builds for each file (a buffered reader, a tty check, a seek)."""
    chunks = []
    size = 0
    while limit < 0 or size < limit:
        chunk = posix.read(fd, READ_CHUNK if limit < 0 else min(limit - size, READ_CHUNK))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def read_file(path: str, limit: int = -1) -> bytes:
    """open(path, "rb").read(limit); raises OSError as open() does."""
    fd = posix.open(path, posix.O_RDONLY | posix.O_CLOEXEC)
    try:
        return read_fd(fd, limit)
    finally:
        posix.close(fd)


def read_attribute(path: str, limit: int = READ_CHUNK) -> bytes:
    """A kernel attribute file's content (cgroupfs, sysfs) in one read(2): the kernel
    formats such a file whole and hands it over in the first read, so the loop of read_file
    would only add a second read(2) that returns nothing."""
    fd = posix.open(path, posix.O_RDONLY | posix.O_CLOEXEC)
    try:
        return posix.read(fd, limit)
    finally:
        posix.close(fd)


def makedirs(path: str, mode: int = 0o777) -> None:
    """os.makedirs(path, mode, exist_ok=True)."""
    if isdir(path):
        return
    parent = dirname(path)
    if parent and parent != path:
        makedirs(parent, mode)
    try:
        posix.mkdir(path, mode)
    except FileExistsError:
        if not isdir(path):
            raise
