"""DecisionInputs: everything one container's decision depends on, as one frozen value.

Two caches reuse decisions and both key on this value, so they cannot drift apart: the
plugin's remembered decisions (core.decision) and its answers built from them
(plugin.handlers) hash it; the OCI hook's decision cache stores under its digest
(hook.cache). Its parts: the SLA text (every annotation under the node's prefix, and the
enforcement alias), the container (name, namespace, the runtime's NRI version, why the
hook did not believe a namespace), what the runtime granted, and the node's part
(NodeInputs: its config, its facts and the code that decides).

The code a decision depends on is what the process actually imported (loaded_code): every
module of nri_plugin and PyYAML in sys.modules, with its file's identity. A long-lived
plugin's code cannot change under it, so its node's code part is a constant.

Lean on purpose (no dataclasses, os or typing): the hook's cached path builds one for
every replica.
"""

import posix  # not os: nri_plugin/posixfs.py says why
import sys
from _stat import S_ISDIR

try:  # the C module directly: `hashlib` imports OpenSSL bindings (start-up time)
    from _blake2 import blake2b
except ImportError:  # pragma: no cover - other interpreters
    from hashlib import blake2b

from nri_plugin.posixfs import abspath
from nri_plugin.value import Value

TYPE_CHECKING = False  # `typing` costs the OCI hook start-up time; only checkers need it
if TYPE_CHECKING:
    from collections.abc import Mapping

# nri_plugin.sla's ENFORCEMENT_ALIAS and MAX_SLA_KEYS (a test compares them): the SLA
# parser is the heavy part of a decision, which the hook's cached path must not load.
ENFORCEMENT_ALIAS = "io.kubernetes.sla/enforcement-mode"
MAX_SLA_KEYS = 64
# The packages whose modules make a decision: nri-sla's own and the YAML reader of SLAs.
CODE_PACKAGES = ("nri_plugin", "yaml")
# A file whose ctime is this close to a run's start may have changed while the run loaded
# it (the kernel's timestamps lag the clock by up to a tick): its identity is not trusted.
SETTLE_NS = 50_000_000
# A long-lived process's code: what it imported never changes under it.
RUNNING = "the running process"


def digest(*parts: str | bytes) -> str:
    """A 160-bit hex digest of the parts (length-prefixed, so parts cannot run together)."""
    h = blake2b(digest_size=20)
    for part in parts:
        data = part.encode("utf-8", "surrogatepass") if isinstance(part, str) else part
        h.update(b"%d:" % len(data))
        h.update(data)
    return h.hexdigest()


class NodeInputs(Value):
    """The node's part of every decision on it: `config` (the node config's identity),
    `facts` (what the node was found to be: cgroup version, capabilities, or the hook's
    cgroup facts key and sysfs root) and `code` (the identity of the code that decides)."""

    # set once in __init__ (object.__setattr__): declared here for checkers
    # (quoted: evaluating them would cost the hook's start-up)
    config: str
    facts: "tuple[str, ...]"
    code: str

    __slots__ = ("code", "config", "facts")

    def __init__(self, config: str, facts: tuple[str, ...], code: str) -> None:
        init = object.__setattr__
        init(self, "config", config)
        init(self, "facts", facts)
        init(self, "code", code)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"NodeInputs is frozen (cannot set {name})")

    def __hash__(self) -> int:
        return hash((self.config, self.facts, self.code))


class DecisionInputs(Value):
    """Everything a decision depends on; equal inputs, equal decisions. Frozen, hashable
    (the plugin's key) and with a digest (the hook's key). Build with `inputs_for`."""

    # set once in __init__ (object.__setattr__): declared here for checkers
    sla: "tuple[tuple[str, str], ...]"
    name: str
    namespace: str
    granted: "tuple[object, ...]"
    node: NodeInputs
    nri_version: "str | None"
    distrust: str

    __slots__ = ("distrust", "granted", "name", "namespace", "node", "nri_version", "sla")

    def __init__(
        self,
        sla: tuple[tuple[str, str], ...],
        name: str,
        namespace: str,
        granted: tuple,
        node: NodeInputs,
        nri_version: str | None = None,
        distrust: str = "",
    ) -> None:
        init = object.__setattr__
        init(self, "sla", sla)
        init(self, "name", name)
        init(self, "namespace", namespace)
        init(self, "granted", granted)
        init(self, "node", node)
        init(self, "nri_version", nri_version)
        init(self, "distrust", distrust)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"DecisionInputs is frozen (cannot set {name})")

    def __hash__(self) -> int:
        return hash(
            (
                self.sla,
                self.name,
                self.namespace,
                self.granted,
                self.node,
                self.nri_version,
                self.distrust,
            )
        )

    def digest(self) -> str:
        """The value as a digest: the hook's decision cache key."""
        node = self.node
        parts = ["decision", str(len(self.sla))]
        for key, value in self.sla:
            parts += [key, value]
        parts += [
            self.name,
            self.namespace,
            "\0none" if self.nri_version is None else self.nri_version,
            self.distrust,
        ]
        parts += ["\0unset" if v is None else str(v) for v in self.granted]
        parts += [node.config, node.code, *node.facts]
        return digest(*parts)


def sla_text(annotations: "Mapping[str, str]", prefix: str) -> tuple[tuple[str, str], ...] | None:
    """The annotations an SLA is read from, sorted: every key under `prefix` and the
    enforcement alias. None: more of them than a pod may have (the parser refuses it, so
    it is never reused), told at the first one past the bound, before values are read.
    Keys first, the value only of nri-sla's: the plugin passes the request's protobuf map,
    whose items() is collections.abc's generator in Python."""
    head = prefix + "/"
    mine: list[tuple[str, str]] = []
    for k in annotations:
        if k.startswith(head) or k == ENFORCEMENT_ALIAS:
            if len(mine) == MAX_SLA_KEYS:
                return None
            mine.append((k, annotations[k]))
    mine.sort()
    return tuple(mine)


def inputs_for(
    annotations: "Mapping[str, str]",
    prefix: str,
    name: str,
    namespace: str,
    granted: tuple,
    node: NodeInputs,
    nri_version: str | None = None,
    distrust: str = "",
) -> DecisionInputs | None:
    """A container's DecisionInputs: `granted` is GrantedResources.key() (the runtime's
    limits cap the plan, so a replica with other limits is another decision). None: more
    SLA keys than a pod may have (sla_text)."""
    sla = sla_text(annotations, prefix)
    if sla is None:
        return None
    return DecisionInputs(sla, name, namespace, granted, node, nri_version, distrust)


def loaded_code(started_ns: int) -> dict | None:
    """The identity of the code this process loaded: {"digest", "dirs"}, dirs [directory,
    inode, ctime_ns, [[file name, inode, ctime_ns], ...]] for every module of
    CODE_PACKAGES in sys.modules, grouped by directory. ctime, not mtime: the kernel sets
    it on every write, rename or touch, and no one can set it back; a new inode: an
    upgrade (pip, dpkg and git write new files). A directory changes when a module is
    added, removed or renamed in it. None when a module's file changed after the run
    started (`started_ns`, CLOCK_REALTIME) or cannot be read: what was loaded may not be
    what is on disk now."""
    by_dir: dict[str, dict[str, None]] = {}
    for name, module in list(sys.modules.items()):
        if name.partition(".")[0] not in CODE_PACKAGES:
            continue
        path = getattr(module, "__file__", None)
        if isinstance(path, str):
            directory, _, base = abspath(path).rpartition("/")
            by_dir.setdefault(directory, {})[base] = None
    limit = started_ns - SETTLE_NS
    dirs: list[list[object]] = []
    parts: list[str] = []  # what the digest covers: dirs, flattened, as text
    stat = posix.stat
    try:
        for directory in sorted(by_dir):
            st = stat(directory)
            if not S_ISDIR(st.st_mode):
                return None
            parts += (directory, str(st.st_ino), str(st.st_ctime_ns))
            files: list[list[object]] = []
            for base in sorted(by_dir[directory]):
                fst = stat(f"{directory}/{base}")
                if fst.st_ctime_ns >= limit:
                    return None
                files.append([base, fst.st_ino, fst.st_ctime_ns])
                parts += (base, str(fst.st_ino), str(fst.st_ctime_ns))
            # The directory as it is now: this run's imports may have created its
            # __pycache__, which changes the directory but no module in it.
            dirs.append([directory, st.st_ino, st.st_ctime_ns, files])
    except OSError:
        return None
    return {"digest": digest(*parts), "dirs": dirs}


def code_unchanged(code: object) -> str | None:
    """A loaded_code value's digest when every directory and file it lists still has the
    identity recorded, else None. The one check every reuse by another process pays for,
    so a plain loop: a stat per file, no formatting."""
    if not isinstance(code, dict) or not isinstance(code.get("dirs"), list):
        return None
    stat = posix.stat
    try:
        for directory, ino, ctime, files in code["dirs"]:
            st = stat(directory)
            if st.st_ctime_ns != ctime or st.st_ino != ino:
                return None
            head = directory + "/"
            for base, file_ino, file_ctime in files:
                st = stat(head + base)
                if st.st_ctime_ns != file_ctime or st.st_ino != file_ino:
                    return None
    except (OSError, TypeError, ValueError):
        return None
    found = code.get("digest")
    return found if isinstance(found, str) else None
