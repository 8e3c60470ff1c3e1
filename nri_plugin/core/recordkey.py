"""The node-local key that authenticates nri-sla's `applied` records.

A pod can set any annotation, `sla.nri.io/applied` included, so a record counts only when
it carries an HMAC made with this key (nri_plugin.plan.record). The key is 32 random bytes
in `<state-dir>/record.key` (node config `state-dir`, default /var/lib/nri-sla): the
plugin creates it at its first start, the OCI hook (root on the same node) only reads it.

Only a file nobody else can have written or read is trusted: the file itself (never a
symbolic link), a regular file of exactly KEY_BYTES bytes, owned by this user, with no
group or other permission bits. Anything else is a RecordKeyError naming the path and the
problem; the plugin then refuses to start rather than trust or replace a key it did not
make (replacing it would also disown every record on the node).
"""

from __future__ import annotations

import contextlib
import os
import stat

from nri_plugin.core.errors import NoRecordKey, RecordKeyError

KEY_FILE = "record.key"
KEY_BYTES = 32
# O_NOFOLLOW: a link planted at the key's path is refused, not followed; O_NONBLOCK: a FIFO
# planted there does not block the open (it is then refused as not a regular file).
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def key_path(state_dir: str) -> str:
    return os.path.join(state_dir, KEY_FILE)


def load_key(state_dir: str) -> bytes:
    """The key in `state_dir`; RecordKeyError when it is missing or untrustworthy."""
    path = key_path(state_dir)
    try:
        fd = os.open(path, _READ_FLAGS)
    except FileNotFoundError:
        raise NoRecordKey(
            f"{path}: no record key (nri-sla run creates it at its first start)"
        ) from None
    except OSError as exc:
        if os.path.islink(path):
            raise RecordKeyError(
                f"{path}: is a symbolic link; the record key must be a "
                "regular file (remove the link)"
            ) from None
        raise RecordKeyError(f"{path}: cannot open the record key: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        _check(path, st)
        key = os.read(fd, KEY_BYTES + 1)
    except OSError as exc:
        raise RecordKeyError(f"{path}: cannot read the record key: {exc.strerror}") from None
    finally:
        os.close(fd)
    if len(key) != KEY_BYTES:  # the file changed size between fstat and read
        raise RecordKeyError(f"{path}: the record key must be {KEY_BYTES} bytes, read {len(key)}")
    return key


def load_or_create_key(state_dir: str) -> bytes:
    """The key in `state_dir`, created first when there is none (the plugin's start)."""
    try:
        return load_key(state_dir)
    except NoRecordKey:
        pass  # a file that is there but not trusted is refused, never replaced
    _create(state_dir)
    return load_key(state_dir)


def _check(path: str, st: os.stat_result) -> None:
    if not stat.S_ISREG(st.st_mode):
        raise RecordKeyError(f"{path}: the record key must be a regular file")
    if st.st_mode & 0o077:
        raise RecordKeyError(
            f"{path}: the record key must be readable by its owner only "
            f"(mode {stat.S_IMODE(st.st_mode):04o}; chmod 0600 it)"
        )
    if st.st_uid != os.geteuid():
        raise RecordKeyError(
            f"{path}: the record key is owned by uid {st.st_uid}, not by "
            f"this user (uid {os.geteuid()})"
        )
    if st.st_size != KEY_BYTES:
        raise RecordKeyError(
            f"{path}: the record key must be {KEY_BYTES} bytes, found {st.st_size}"
        )


def _create(state_dir: str) -> None:
    """Write a new key under a temporary name, then link it into place: the key appears
    complete or not at all, and of two plugins starting at once exactly one key wins."""
    try:
        os.makedirs(state_dir, mode=0o700, exist_ok=True)
    except OSError as exc:
        raise RecordKeyError(
            f"{state_dir}: cannot create the state directory: {exc.strerror}"
        ) from None
    path = key_path(state_dir)
    # Random, not the pid: two plugins in different pid namespaces may share the directory.
    tmp = f"{path}.{os.urandom(8).hex()}.new"
    try:
        fd = os.open(
            tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
        )
        try:
            os.write(fd, os.urandom(KEY_BYTES))
            os.fsync(fd)
        finally:
            os.close(fd)
        # FileExistsError: another process created it first; load_key reads (and checks)
        # theirs.
        with contextlib.suppress(FileExistsError):
            os.link(tmp, path)
    except OSError as exc:
        raise RecordKeyError(f"{path}: cannot create the record key: {exc.strerror}") from None
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
