"""Device paths a pod names (io.max): followed inside /dev only, one answer for every miss.

nri-sla runs as root and a pod author chooses the path, so resolving it must not become a
way to look at the host: symlinks are followed one at a time, and only while every step
stays under /dev (`/dev/disk/by-id/x -> ../../sda` is fine, `/dev/stdin -> /proc/self/
fd/0` or a link through /tmp is not). Whatever the reason a path does not lead to a node
under /dev (missing, outside, a loop, unreadable), the answer is the same None, so the
caller's message cannot tell a tenant which host files exist.

Lean on purpose (posix calls only, not os: nri_plugin/posixfs.py says why): the OCI
hook's cached run re-checks the devices of a cached decision with it (hook/cache.py
device_signature).
"""

import posix
from _stat import S_ISLNK

from nri_plugin.posixfs import MAX_LINKS, dirname

DEV_ROOT = "/dev"


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root + "/")


def dev_node(spec: str, dev_root: str = DEV_ROOT) -> str | None:
    """The path under `dev_root` that `spec` leads to, every symlink on the way resolved,
    or None. `spec` is absolute (and must start under dev_root) or relative to it."""
    root = dev_root.rstrip("/")
    path = spec if spec.startswith("/") else f"{root}/{spec}"
    if "\0" in path or not _under(path, root):
        return None
    todo = [p for p in reversed(path[len(root) :].split("/")) if p not in ("", ".")]
    done = root  # resolved so far: no symlinks in it, always under root
    links = 0
    while todo:
        part = todo.pop()
        if part == "..":
            if done == root:
                return None
            done = dirname(done)
            continue
        step = f"{done}/{part}"
        try:
            if not S_ISLNK(posix.lstat(step).st_mode):
                done = step
                continue
            target = posix.readlink(step)
        except OSError:  # missing, not a directory on the way, unreadable
            return None
        links += 1
        if links > MAX_LINKS or "\0" in target:
            return None
        if target.startswith("/"):
            if not _under(target, root):
                return None
            done, target = root, target[len(root) :]
        todo += [p for p in reversed(target.split("/")) if p not in ("", ".")]
    return done
