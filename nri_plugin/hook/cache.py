"""The hook's decision cache: replicas of a deployment skip yaml, the parser and the planner.

Every container of a Deployment carries the same SLA annotations, so what the core decided
for it (the cgroup writes, RT budget, warnings, hard/soft: actions.CgroupActions) recurs. A cold
run stores three entries (Store, below), each keyed by a digest of everything it depends on:

* config   <- Python and nri-sla versions, the package's path, node config path and
              bytes: annotation prefix, log format, cgroup root/version/driver settings,
              and the identity of the code the cold run loaded (core.inputs.loaded_code,
              re-checked on every hit);
* facts    <- config key, the code's digest, cgroup root, the cgroup lines of
              /proc/self/mountinfo, the root's listing (symlink targets too) and
              cgroup.controllers: version and hierarchies;
* decision <- the digest of the container's DecisionInputs (core.inputs, the value the
              plugin's reuse hashes too): every annotation under the prefix (plus the
              enforcement alias), container name and namespace (as inputs.identify trusts
              them, with why a namespace was not trusted), what the runtime granted
              (linux.resources CPU quota/period/shares and memory limit,
              NVIDIA_VISIBLE_DEVICES), and the node's part: the config key, the facts
              key, the sysfs root and the code's digest; plus
              recorded dependencies re-checked on every hit: block devices named by io.max
              (stat and sysfs identity), the NUMA/CPU topology (online CPUs, node
              cpulists) when placement used it, and the disks' I/O schedulers when the SLA
              has an io.weight (they decide bfq or not).

A warm run (all three hit, every dependency unchanged) carries the actions out with the
same code as a cold run (actions.carry_out). Anything unusual (neither a pid nor a
cgroupsPath, a GPU section, a refused SLA, an unreadable file) is simply not cached: the
cold path decides.
/run is a tmpfs, so a reboot (new kernel, new hardware) starts empty.

The files (Store): one small JSON document per key in a root-only tmpfs dir. Trust rules (a
cache must never be a way in): the directory is created 0700 and used only when it is a
real directory (not a symlink) owned by the hook's user with no group/other permissions;
an entry is used only when it is a regular file (opened with O_NOFOLLOW) owned by that
user, not group/other-writable, at most MAX_ENTRY_BYTES, whose first line is the digest of
the rest and whose body names the key it was stored under. Anything else is a miss, never
an error. Writes go to a temporary file renamed into place (atomic), and the directory is
kept under MAX_ENTRIES by removing the oldest entries.
"""

import posix  # not os: nri_plugin/posixfs.py says why
import sys
from _stat import S_ISDIR, S_ISREG

from nri_plugin.core.inputs import DecisionInputs, NodeInputs, digest, inputs_for
from nri_plugin.hook.inputs import loads
from nri_plugin.posixfs import (
    abspath,
    dirname,
    exists,
    getenv,
    isabs,
    isdir,
    join,
    makedirs,
    read_attribute,
    read_file,
    realpath,
)

# Mirrors of constants in modules the warm path must not import (tests compare them).
CONFIG_DEFAULT = "/etc/nri-sla/config.yaml"  # nri_plugin.config.loader.DEFAULT_PATH
CONFIG_LIMIT = 1024 * 1024  # nri_plugin.config.loader.MAX_CONFIG_BYTES
DEVICE_SYSFS = "/sys"  # enforce.blockdev.SYSFS_ROOT: what resolve_block_device reads

DEFAULT_DIR = "/run/nri-sla/hook-cache"
ENV_DIR = "NRI_SLA_HOOK_CACHE"  # a directory, or "off"
MAX_ENTRY_BYTES = 16 << 10  # decisions are ~1 KiB; 512 x 16 KiB bounds the tmpfs use
MAX_ENTRIES = 512
MAGIC = b"nri-sla-hook-cache/1 "

TYPE_CHECKING = False  # typing costs start-up time; only checkers need it
if TYPE_CHECKING:
    from nri_plugin.hook.options import HookOptions
    from nri_plugin.hook.values import Run

PACKAGE = dirname(dirname(abspath(__file__)))  # the nri_plugin directory


def open_store(opts: "HookOptions") -> "Store | None":
    """--cache-dir, else $NRI_SLA_HOOK_CACHE, else /run/nri-sla/hook-cache; "off": none."""
    where = opts.cache_dir if opts.cache_dir is not None else getenv(ENV_DIR)
    where = DEFAULT_DIR if where is None else where
    if where in ("", "off") or not isabs(where):
        return None
    return Store(where)


def config_key(opts: "HookOptions") -> str | None:
    """None when the config cannot be read (the cold path reports why)."""
    path = opts.config if opts.config is not None else CONFIG_DEFAULT
    try:
        data = read_file(path, CONFIG_LIMIT + 1)
    except FileNotFoundError:
        if opts.config is not None:
            return None
        data = b"\0absent"  # the built-in defaults
    except OSError:
        return None
    # The code's identity that costs nothing to check; its files: core.inputs.loaded_code.
    version = getattr(sys.modules.get("nri_plugin"), "__version__", "?")
    return digest("config", sys.version, version, PACKAGE, path, str(opts.config is None), data)


def cgroup_signature(root: str) -> str:
    """What detect_cgroup_facts reads: mounts (cgroup lines only: other mounts come and go
    with every container), the root and its entries (v1 hierarchies by name), and
    cgroup.controllers (a v2 root)."""
    parts: list[str | bytes] = [
        "cgroups",
        root,
        realpath(root),
        str(isdir(root)),
        str(exists(join(root, "cgroup.controllers"))),
    ]
    try:
        mounts = read_file("/proc/self/mountinfo")
    except OSError:
        mounts = b""
    parts += [line for line in mounts.split(b"\n") if b"cgroup" in line]
    try:
        with posix.scandir(root) as it:
            for e in sorted(it, key=lambda e: e.name):
                link = realpath(e.path) if e.is_symlink() else ""
                parts.append(f"{e.name}:{e.is_dir()}:{link}")
    except OSError:
        parts.append("unlistable")
    return digest(*parts)


def facts_key(ckey: str, code: str, signature: str) -> str:
    """The cgroup facts' key: the config key, the code's digest and cgroup_signature."""
    return digest("facts", ckey, code, signature)


def decision_inputs(
    run: "Run", prefix: str, ckey: str, fkey: str, code: str
) -> DecisionInputs | None:
    """The container's DecisionInputs on this node: the target's fields, not the raw keys
    (what identify() believed decides the plan), and the node as the cache knows it.
    None: more SLA keys than a pod may have (refused cold, never cached)."""
    target = run.target
    node = NodeInputs(ckey, (fkey, run.opts.sysfs_root), code)
    return inputs_for(
        run.annotations,
        prefix,
        target.name,
        target.namespace,
        run.spec.granted.key(),
        node,
        distrust=target.distrust,
    )


# ------------------------------------------------------------------ dependencies


def device_signature(spec: str) -> str:
    """What resolve_block_device sees for an io.max device: the node under /dev the path
    leads to (enforce.devnode, the resolver's own walk), its type and numbers, and the
    sysfs identity of MAJ:MIN (a partition resolves inside its disk)."""
    spec = spec.strip()
    major, colon, minor = spec.partition(":")
    if colon and major.isdigit() and minor.isdigit():
        numbers = f"{int(major)}:{int(minor)}"
        sig = "numbers"
    else:
        # Imported only for decisions with io.max devices; lean (os and stat only).
        from nri_plugin.enforce.devnode import dev_node

        node = dev_node(spec)
        if node is None:
            return "outside"
        try:
            st = posix.lstat(node)
        except OSError as e:
            return f"error:{e.errno}"
        numbers = f"{posix.major(st.st_rdev)}:{posix.minor(st.st_rdev)}"
        sig = f"{node}:mode:{st.st_mode & 0o170000}:{numbers}"
    node = join(DEVICE_SYSFS, "dev", "block", numbers)
    return f"{sig}:{realpath(node)}:{exists(node)}:{exists(join(node, 'partition'))}"


def _read(path: str) -> str:
    """A sysfs attribute's text, or why it cannot be read."""
    try:
        return read_attribute(path).decode("utf-8", "replace")
    except OSError as e:
        return f"\0error:{e.errno}"


def topology_signature(sysfs_root: str) -> str:
    """The CPU/NUMA facts read_topology builds on. CPUs and nodes change at runtime only
    through hotplug, which these files show; anything else needs a reboot (empty /run)."""
    cpu = join(sysfs_root, "devices/system/cpu")
    node = join(sysfs_root, "devices/system/node")
    parts = [_read(join(cpu, "online"))]
    for name in ("online", "possible", "has_memory"):
        parts.append(_read(join(node, name)))
    try:
        names = sorted(n for n in posix.listdir(node) if n.startswith("node"))
    except OSError:
        names = []
    for name in names:
        parts += [name, _read(join(node, name, "cpulist")), _read(join(node, name, "distance"))]
    return digest(*parts)


def scheduler_signature(sysfs_root: str) -> str:
    """What enforce.blockdev.any_bfq reads, as one string: a change of any disk's scheduler
    changes it (it decides whether io weights go to the bfq files, or apply at all)."""
    block = join(sysfs_root, "block")
    try:
        names = sorted(posix.listdir(block))
    except OSError:
        return "unlistable"
    return digest(*(f"{n}={_read(join(block, n, 'queue', 'scheduler'))}" for n in names))


def deps_hold(deps: object) -> bool:
    if not isinstance(deps, list):
        return False
    for dep in deps:
        if not isinstance(dep, list) or len(dep) != 3:
            return False
        kind, arg, expected = dep
        if kind == "device":
            now = device_signature(arg)
        elif kind == "topology":
            now = topology_signature(arg)
        elif kind == "schedulers":
            now = scheduler_signature(arg)
        else:
            return False
        if now != expected:
            return False
    return True


# ------------------------------------------------------------------ files


class Store:
    """get/put JSON documents by (kind, key); every problem is a miss or a skipped put."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.uid = posix.geteuid()

    def _dir_ok(self, create: bool) -> bool:
        try:
            st = posix.lstat(self.directory)
        except FileNotFoundError:
            if not create:
                return False
            try:
                makedirs(dirname(self.directory), 0o755)
                posix.mkdir(self.directory, 0o700)
                st = posix.lstat(self.directory)
            except OSError:
                return False
        except OSError:
            return False
        return S_ISDIR(st.st_mode) and st.st_uid == self.uid and st.st_mode & 0o077 == 0

    def _path(self, kind: str, key: str) -> str:
        return join(self.directory, f"{kind}-{key}")

    def get(self, kind: str, key: str) -> dict | None:
        if not self._dir_ok(create=False):
            return None
        try:
            fd = posix.open(
                self._path(kind, key),
                posix.O_RDONLY | posix.O_NOFOLLOW | posix.O_CLOEXEC | posix.O_NONBLOCK,
            )
        except OSError:
            return None
        try:
            st = posix.fstat(fd)
            if (
                not S_ISREG(st.st_mode)
                or st.st_uid != self.uid
                or st.st_mode & 0o022
                or st.st_size > MAX_ENTRY_BYTES
            ):
                return None
            data = posix.read(fd, MAX_ENTRY_BYTES + 1)
        except OSError:
            return None
        finally:
            posix.close(fd)
        return decode(data, kind, key)

    def put(self, kind: str, key: str, doc: dict) -> bool:
        """Store doc under (kind, key); False when the cache is unusable or doc too big."""
        data = encode(doc, kind, key)
        if len(data) > MAX_ENTRY_BYTES or not self._dir_ok(create=True):
            return False
        final = self._path(kind, key)
        tmp = join(self.directory, f".tmp-{posix.getpid()}-{kind}-{key}")
        try:
            fd = posix.open(
                tmp,
                posix.O_WRONLY | posix.O_CREAT | posix.O_EXCL | posix.O_NOFOLLOW | posix.O_CLOEXEC,
                0o600,
            )
            try:
                posix.write(fd, data)
            finally:
                posix.close(fd)
            posix.rename(tmp, final)
        except OSError:
            _remove(tmp)
            return False
        self._trim()
        return True

    def _trim(self) -> None:
        """Keep at most MAX_ENTRIES files: drop the least recently written ones."""
        try:
            with posix.scandir(self.directory) as it:
                entries = [(e.stat(follow_symlinks=False).st_mtime_ns, e.path) for e in it]
        except OSError:
            return
        if len(entries) <= MAX_ENTRIES:
            return
        entries.sort()
        for _, path in entries[: len(entries) - MAX_ENTRIES]:
            _remove(path)


def _remove(path: str) -> bool:
    # Not contextlib.suppress: contextlib is one more import on every cached run.
    try:
        posix.unlink(path)
    except OSError:
        return False
    return True


def encode(doc: dict, kind: str, key: str) -> bytes:
    import json  # cold runs only (they write); reads use inputs.loads

    body = json.dumps(
        {"kind": kind, "key": key, "doc": doc}, sort_keys=True, separators=(",", ":")
    ).encode()
    return MAGIC + digest(body).encode() + b"\n" + body


def decode(data: bytes, kind: str, key: str) -> dict | None:
    head, newline, body = data.partition(b"\n")
    if not newline or not head.startswith(MAGIC) or head[len(MAGIC) :] != digest(body).encode():
        return None  # truncated, corrupt or foreign
    try:
        outer = loads(body.decode("utf-8"))
    except (ValueError, RecursionError):
        return None
    if (
        not isinstance(outer, dict)
        or outer.get("kind") != kind
        or outer.get("key") != key
        or not isinstance(outer.get("doc"), dict)
    ):
        return None
    return outer["doc"]
