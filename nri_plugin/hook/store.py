"""The decision cache's files: one small JSON document per key in a root-only tmpfs dir.

Trust rules (a cache must never be a way in): the directory is created 0700 and used only
when it is a real directory (not a symlink) owned by the hook's user with no group/other
permissions; an entry is used only when it is a regular file (opened with O_NOFOLLOW)
owned by that user, not group/other-writable, at most MAX_ENTRY_BYTES, whose first line is
the digest of the rest and whose body names the key it was stored under. Anything else is
a miss, never an error. Writes go to a temporary file renamed into place (atomic), and
the directory is kept under MAX_ENTRIES by removing the oldest entries.
"""

from __future__ import annotations

import os
import stat

try:  # the C module directly: `hashlib` imports OpenSSL bindings (start-up time)
    from _blake2 import blake2b
except ImportError:  # pragma: no cover - other interpreters
    from hashlib import blake2b

from nri_plugin.hook.fastjson import loads

DEFAULT_DIR = "/run/nri-sla/hook-cache"
ENV_DIR = "NRI_SLA_HOOK_CACHE"  # a directory, or "off"
MAX_ENTRY_BYTES = 16 << 10  # decisions are ~1 KiB; 512 x 16 KiB bounds the tmpfs use
MAX_ENTRIES = 512
MAGIC = b"nri-sla-hook-cache/1 "


def digest(*parts: str | bytes) -> str:
    """A 160-bit hex digest of the parts (length-prefixed, so parts cannot run together)."""
    h = blake2b(digest_size=20)
    for part in parts:
        data = part.encode("utf-8", "surrogatepass") if isinstance(part, str) else part
        h.update(b"%d:" % len(data))
        h.update(data)
    return h.hexdigest()


class Store:
    """get/put JSON documents by (kind, key); every problem is a miss or a skipped put."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.uid = os.geteuid()

    def _dir_ok(self, create: bool) -> bool:
        try:
            st = os.lstat(self.directory)
        except FileNotFoundError:
            if not create:
                return False
            try:
                os.makedirs(os.path.dirname(self.directory), mode=0o755, exist_ok=True)
                os.mkdir(self.directory, 0o700)
                st = os.lstat(self.directory)
            except OSError:
                return False
        except OSError:
            return False
        return (stat.S_ISDIR(st.st_mode) and st.st_uid == self.uid
                and st.st_mode & 0o077 == 0)

    def _path(self, kind: str, key: str) -> str:
        return os.path.join(self.directory, f"{kind}-{key}")

    def get(self, kind: str, key: str) -> dict | None:
        if not self._dir_ok(create=False):
            return None
        try:
            fd = os.open(self._path(kind, key), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
                         | os.O_NONBLOCK)
        except OSError:
            return None
        try:
            st = os.fstat(fd)
            if (not stat.S_ISREG(st.st_mode) or st.st_uid != self.uid
                    or st.st_mode & 0o022 or st.st_size > MAX_ENTRY_BYTES):
                return None
            data = os.read(fd, MAX_ENTRY_BYTES + 1)
        except OSError:
            return None
        finally:
            os.close(fd)
        return decode(data, kind, key)

    def put(self, kind: str, key: str, doc: dict) -> bool:
        """Store doc under (kind, key); False when the cache is unusable or doc too big."""
        data = encode(doc, kind, key)
        if len(data) > MAX_ENTRY_BYTES or not self._dir_ok(create=True):
            return False
        final = self._path(kind, key)
        tmp = os.path.join(self.directory, f".tmp-{os.getpid()}-{kind}-{key}")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                         | os.O_CLOEXEC, 0o600)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)
            os.rename(tmp, final)
        except OSError:
            _remove(tmp)
            return False
        self._trim()
        return True

    def _trim(self) -> None:
        """Keep at most MAX_ENTRIES files: drop the least recently written ones."""
        try:
            with os.scandir(self.directory) as it:
                entries = [(e.stat(follow_symlinks=False).st_mtime_ns, e.path) for e in it]
        except OSError:
            return
        if len(entries) <= MAX_ENTRIES:
            return
        entries.sort()
        for _, path in entries[:len(entries) - MAX_ENTRIES]:
            _remove(path)


def _remove(path: str) -> bool:
    # Not contextlib.suppress: contextlib is one more import on every cached run.
    try:
        os.unlink(path)
    except OSError:
        return False
    return True


def encode(doc: dict, kind: str, key: str) -> bytes:
    import json  # cold runs only (they write); reads use fastjson

    body = json.dumps({"kind": kind, "key": key, "doc": doc}, sort_keys=True,
                      separators=(",", ":")).encode()
    return MAGIC + digest(body).encode() + b"\n" + body


def decode(data: bytes, kind: str, key: str) -> dict | None:
    head, newline, body = data.partition(b"\n")
    if not newline or not head.startswith(MAGIC) or head[len(MAGIC):] != digest(body).encode():
        return None  # truncated, corrupt or foreign
    try:
        outer = loads(body.decode("utf-8"))
    except (ValueError, RecursionError):
        return None
    if (not isinstance(outer, dict) or outer.get("kind") != kind or outer.get("key") != key
            or not isinstance(outer.get("doc"), dict)):
        return None
    return outer["doc"]
