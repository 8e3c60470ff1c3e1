"""Where a container's cgroup lives: nri-sla's cgroup path rules and the values they give.

An OCI linux.cgroupsPath (cgroupfs `/a/b` or systemd `slice:prefix:name`) becomes one
directory per hierarchy, refusing anything that would leave the hierarchy (`..`, NUL
bytes, symlinks below it). `CgroupFacts` (the node's layout: version, driver, hierarchies)
and `CgroupPaths` (one container's directories) are the one pair of values the plugin and
the OCI hook both use. Plain strings, posixfs and slotted classes only: the hook runs
this for every container start, from a cached decision too, where importing pathlib or
dataclasses would cost more than the rest of the run. Where a running process's cgroup is
(/proc/<pid>/cgroup) is here too, for the same reason; detecting the node's layout
(mountinfo, the cgroup root) is cgroupdetect.py.
"""

import posix  # not os: nri_plugin/posixfs.py says why

from nri_plugin.enforce.errors import CgroupFactsError, CgroupPathError
from nri_plugin.errors import DamagedState
from nri_plugin.posixfs import basename, isdir, islink, join, normpath, read_file, realpath
from nri_plugin.value import Value

UNIFIED = "unified"  # key of the single hierarchy on cgroup v2
PROC_CGROUP_LIMIT = 64 << 10  # /proc/<pid>/cgroup: one short line per hierarchy

TYPE_CHECKING = False  # typing costs the hook start-up time; only checkers need it
if TYPE_CHECKING:
    from collections.abc import Mapping
    from os import PathLike
    from typing import TypeVar

    D = TypeVar("D")


def within(path: str, base: str) -> bool:
    """PurePath.is_relative_to for absolute, normalised path strings."""
    return path == base or path.startswith(base.rstrip("/") + "/")


def safe_join(hierarchy: str, relative: str, cgroups_path: str) -> str:
    """hierarchy/relative, refusing anything that would leave the hierarchy.

    Refused: ".." components, NUL bytes, and symlinks anywhere below the hierarchy
    (cgroupfs never has symlinks, so one is an attack or a mistake). "." and empty
    components are dropped, so "/a//b/." is "/a/b". The result starts at the resolved
    hierarchy (a mount reached through a symlink, as v1's `cpu -> cpu,cpuacct`).
    """
    if "\0" in relative:
        raise CgroupPathError(cgroups_path, "contains a NUL byte")
    parts = [p for p in relative.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise CgroupPathError(cgroups_path, "'..' would leave the cgroup hierarchy")
    base = realpath(hierarchy)
    path = base
    for part in parts:
        path = join(path, part)
        if islink(path):
            raise CgroupPathError(cgroups_path, f"{path} is a symlink")
    if not within(realpath(path), base):
        raise CgroupPathError(cgroups_path, f"{path} resolves outside {base}")
    return path


# ------------------------------------------------------------------ systemd's form
# The systemd cgroup driver's cgroups_path form, expanded to a cgroup directory path.
#
# With the systemd driver the OCI ``linux.cgroupsPath`` is ``slice:prefix:name`` (runc's
# convention, also used by containerd and CRI-O). The container then lives in the unit
# ``<prefix>-<name>.scope`` (or in ``name`` itself when it ends in ``.slice``) inside
# ``slice``; an empty slice means ``system.slice`` and ``-.slice``/``-`` is the root slice.
# systemd nests slices by dashes: ``a-b-c.slice`` lives at ``/a.slice/a-b.slice/a-b-c.slice``.

_SLICE = ".slice"


def is_systemd_form(cgroups_path: str) -> bool:
    """True for ``slice:prefix:name`` (exactly two colons, no leading slash)."""
    return not cgroups_path.startswith("/") and cgroups_path.count(":") == 2


def expand_slice(cgroups_path: str, slice_name: str) -> str:
    """``a-b.slice`` -> ``/a.slice/a-b.slice``; ``-.slice`` -> ``/``."""
    if slice_name in ("-", "-.slice"):
        return "/"
    if not slice_name.endswith(_SLICE) or len(slice_name) == len(_SLICE):
        raise CgroupPathError(cgroups_path, f"slice {slice_name!r} must be '<name>.slice'")
    if "/" in slice_name:
        raise CgroupPathError(cgroups_path, f"slice {slice_name!r} must not contain '/'")
    stem = slice_name[: -len(_SLICE)]
    if stem.startswith("-") or stem.endswith("-") or "--" in stem:
        # systemd refuses these unit names: every dash must separate two path components.
        raise CgroupPathError(
            cgroups_path, f"slice {slice_name!r}: dashes must separate non-empty components"
        )
    parts = stem.split("-")
    out = []
    for i in range(len(parts)):
        out.append("-".join(parts[: i + 1]) + _SLICE)
    return "/" + "/".join(out)


def systemd_cgroup_path(cgroups_path: str) -> str:
    """Expand ``slice:prefix:name`` to the container's path inside each hierarchy."""
    if not is_systemd_form(cgroups_path):
        raise CgroupPathError(cgroups_path, "expected the systemd form 'slice:prefix:name'")
    slice_name, prefix, name = cgroups_path.split(":")
    if not name:
        raise CgroupPathError(cgroups_path, "the name part of 'slice:prefix:name' is empty")
    for label, part in (("prefix", prefix), ("name", name)):
        if "/" in part or part in (".", ".."):
            raise CgroupPathError(cgroups_path, f"{label} {part!r} must be a plain unit name")
    base = expand_slice(cgroups_path, slice_name or "system.slice")
    unit = name if name.endswith(_SLICE) else f"{prefix}-{name}.scope"
    return base.rstrip("/") + "/" + unit


def relative_path(cgroups_path: str) -> str:
    """The container's path inside every hierarchy, from either cgroupsPath form.

    The form of the string decides (runc does the same: a systemd-driver runtime always
    sends slice:prefix:name), so a node whose default driver was detected wrongly still
    gets the right directories.
    """
    if not cgroups_path:
        raise CgroupPathError(cgroups_path, "empty cgroups path")
    if is_systemd_form(cgroups_path):
        return systemd_cgroup_path(cgroups_path)
    if ":" in cgroups_path and not cgroups_path.startswith("/"):
        raise CgroupPathError(
            cgroups_path, "neither an absolute cgroupfs path nor systemd 'slice:prefix:name'"
        )
    # cgroupfs: absolute inside every hierarchy. A relative one is taken from the hierarchy
    # root too (containerd and CRI-O always send absolute paths).
    return "/" + cgroups_path.lstrip("/")


def container_dirs(
    cgroups_path: str, hierarchies: "Mapping[str, str]", root: str
) -> tuple[dict[str, str], dict[str, str]]:
    """(dirs, roots) for an OCI linux.cgroupsPath: hierarchy name -> the container's dir,
    and the hierarchy mount dir it must stay under. `hierarchies` maps name -> mount dir
    (v1: per controller, v2: {UNIFIED: root}); `root` names the cgroup root in messages."""
    relative = relative_path(cgroups_path)
    dirs: dict[str, str] = {}
    roots: dict[str, str] = {}
    for name, path in hierarchies.items():
        if name.startswith("name="):
            continue  # named hierarchies (name=systemd) hold no resource controls
        dirs[name] = safe_join(path, relative, cgroups_path)
        roots[name] = path
    if not dirs:
        raise CgroupFactsError(f"no cgroup hierarchies under {root}")
    return dirs, roots


def strip_mount_root(path: str, mount_root: str, label: str) -> str:
    """A /proc/<pid>/cgroup path relative to a mount that shows only a subtree (an agent in
    a container sees its own cgroup as the mount's top)."""
    if mount_root in ("", "/"):
        return path
    root = mount_root.rstrip("/")
    if path == root or path.startswith(root + "/"):
        return path[len(root) :] or "/"
    raise CgroupPathError(label, f"cgroup {path} is outside the mounted subtree {mount_root}")


def parse_proc_cgroup(text: str, label: str) -> list[tuple[int, tuple[str, ...], str]]:
    """/proc/<pid>/cgroup as (hierarchy id, controllers, path) per line: v1 lines
    ``4:memory:/a``, the v2 line ``0::/a`` (controllers ()), or both on hybrid hosts."""
    entries = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split(":", 2)
        if len(parts) != 3 or not parts[0].isdigit():
            raise CgroupFactsError(f"{label} line {lineno}: malformed: {line[:200]!r}")
        entries.append((int(parts[0]), tuple(c for c in parts[1].split(",") if c), parts[2]))
    return entries


def dir_of(dirs: "Mapping[str, D]", version: int, controller: str, cgroups_path: str) -> "D":
    """One container dir: v1 by controller; v2 has a single dir whatever the controller."""
    key = UNIFIED if version == 2 else controller
    try:
        return dirs[key]
    except KeyError:
        raise CgroupFactsError(
            f"no {controller!r} hierarchy for cgroups path {cgroups_path!r}"
        ) from None


class Hierarchy(Value):
    """Where one hierarchy is mounted (resolved dir) and which cgroup its top dir shows."""

    __slots__ = ("mount_root", "path")

    def __init__(self, path: "str | PathLike[str]", mount_root: str = "/") -> None:
        self.path = posix.fspath(path)
        self.mount_root = mount_root


class CgroupFacts(Value):
    """How this node's cgroups are laid out.

    version 1 (legacy or hybrid) or 2; driver "cgroupfs" | "systemd" (the node default:
    each path's own form still decides); hierarchies: v1 controller -> Hierarchy, v2
    {UNIFIED: Hierarchy}; when empty, v1 hierarchies are looked up as dirs under root.
    """

    __slots__ = ("driver", "hierarchies", "root", "version")

    def __init__(
        self,
        version: int,
        driver: str,
        root: "str | PathLike[str]",
        hierarchies: dict[str, Hierarchy] | None = None,
    ) -> None:
        self.version = version
        self.driver = driver
        self.root = posix.fspath(root)
        self.hierarchies = hierarchies or {}

    def hierarchy(self, controller: str = UNIFIED) -> Hierarchy:
        if self.version == 2:
            return self.hierarchies.get(UNIFIED) or Hierarchy(realpath(self.root))
        found = self.hierarchies.get(controller) or scan_v1(self.root).get(controller)
        if found is None:
            raise CgroupFactsError(
                f"cgroup v1 controller {controller!r} is not mounted under {self.root}"
            )
        return found

    def controllers(self) -> dict[str, Hierarchy]:
        """All hierarchies (v1: by controller; v2: {UNIFIED: ...})."""
        if self.version == 2:
            return {UNIFIED: self.hierarchy()}
        return dict(self.hierarchies) or scan_v1(self.root)

    def container_paths(self, cgroups_path: str) -> "CgroupPaths":
        """The container's dirs for an OCI linux.cgroupsPath (either form)."""
        hierarchies = {name: h.path for name, h in self.controllers().items()}
        dirs, roots = container_dirs(cgroups_path, hierarchies, self.root)
        return CgroupPaths(cgroups_path, self.version, dirs, roots)

    def process_paths(self, pid: int, proc: str = "/proc") -> "CgroupPaths":
        """The cgroup dirs a running process is in, from /proc/<pid>/cgroup: where the
        runtime put it, whatever form (or relative path) its cgroupsPath had.

        Paths there are relative to the reader's cgroup namespace, as are mount roots in
        mountinfo, so a mount that shows only a subtree (agent in a container) is handled
        by stripping that subtree's path.
        """
        source = f"{proc}/{pid}/cgroup"
        try:
            text = read_file(source, PROC_CGROUP_LIMIT).decode("utf-8", "surrogateescape")
        except OSError as e:
            raise CgroupFactsError(f"cannot read {source}: {e.strerror or e}") from None
        hierarchies = self.controllers()
        dirs: dict[str, str] = {}
        roots: dict[str, str] = {}
        for hierarchy_id, controllers, path in parse_proc_cgroup(text, source):
            if self.version == 2:
                if hierarchy_id != 0:
                    continue
                names: tuple[str, ...] = (UNIFIED,)
            else:
                if hierarchy_id == 0:
                    continue  # the hybrid host's empty v2 line
                names = tuple(c for c in controllers if not c.startswith("name="))
            for name in names:
                h = hierarchies.get(name)
                if h is None:
                    continue
                rel = strip_mount_root(path, h.mount_root, source)
                dirs[name] = safe_join(h.path, rel, source)
                roots[name] = h.path
        if not dirs:
            raise CgroupFactsError(f"{source} names no cgroup mounted under {self.root}")
        return CgroupPaths(source, self.version, dirs, roots)

    def to_json(self) -> dict:
        return {
            "version": self.version,
            "driver": self.driver,
            "root": self.root,
            "hierarchies": [[n, h.path, h.mount_root] for n, h in self.controllers().items()],
        }

    @classmethod
    def from_json(cls, doc: dict) -> "CgroupFacts":
        """Raises DamagedState/TypeError/KeyError on a malformed document (a cache miss)."""
        version, driver, root = doc["version"], doc["driver"], doc["root"]
        if version not in (1, 2) or not isinstance(root, str) or not isinstance(driver, str):
            raise DamagedState("bad cgroup facts")
        hierarchies: dict[str, Hierarchy] = {}
        for name, path, mount_root in doc["hierarchies"]:
            if not all(isinstance(x, str) for x in (name, path, mount_root)):
                raise DamagedState("bad hierarchy")
            hierarchies[name] = Hierarchy(path, mount_root)
        return cls(version, driver, root, hierarchies)


class CgroupPaths(Value):
    """A container's cgroup directories (they need not exist yet): v1 controller -> dir,
    v2 {UNIFIED: dir}; `roots` has the same keys: the hierarchy each dir stays under."""

    __slots__ = ("cgroups_path", "dirs", "roots", "version")

    def __init__(
        self, cgroups_path: str, version: int, dirs: dict[str, str], roots: dict[str, str]
    ) -> None:
        self.cgroups_path = cgroups_path  # what the runtime gave, for messages
        self.version = version
        self.dirs = dirs
        self.roots = roots

    def dir(self, controller: str = UNIFIED) -> str:
        return dir_of(self.dirs, self.version, controller, self.cgroups_path)

    def missing(self) -> list[str]:
        """Dirs that do not exist (yet): runc creates them when it creates the container."""
        return [d for d in self.dirs.values() if not isdir(d)]

    def others_below(self) -> str | None:
        """A cgroup below one of these dirs that holds processes, or None.

        A container's own cgroup has no populated children while its runtime creates it
        (its process has not run yet). One that has them is a pod, a QoS class, a slice or
        the root: limits written there would bind every process below it.
        """
        for top in sorted(set(self.dirs.values())):
            found = populated_below(top)
            if found:
                return found
        return None


def scan_v1(root: str) -> dict[str, Hierarchy]:
    """v1 controllers from directory names under root ("cpu,cpuacct" serves both)."""
    found: dict[str, Hierarchy] = {}
    try:
        entries = sorted(posix.scandir(root), key=lambda e: e.name)
    except OSError:
        return found
    for entry in entries:
        if not entry.is_dir():
            continue
        resolved = realpath(entry.path)
        for name in basename(resolved).split(",") + entry.name.split(","):
            if name and name != UNIFIED:
                found.setdefault(name, Hierarchy(resolved))
    return found


def _head(path: str) -> bytes | None:
    try:
        return read_file(path, 4096)
    except OSError:
        return None


def populated_below(top: str) -> str | None:
    """The first cgroup below `top` with a process in it (v2: `populated 1` in its
    cgroup.events, for its whole subtree; v1: a non-empty cgroup.procs, searched down)."""
    stack = [top]
    while stack:
        try:
            with posix.scandir(stack.pop()) as it:
                children = sorted(e.path for e in it if e.is_dir(follow_symlinks=False))
        except OSError:
            continue
        for child in children:
            events = _head(join(child, "cgroup.events"))
            if events is not None:
                if b"populated 1" in events:
                    return child
                continue  # v2: nobody anywhere below this child
            if (_head(join(child, "cgroup.procs")) or b"").strip():
                return child
            stack.append(child)
    return None


def container_cgroup_of(found: CgroupPaths, cgroups_path: str, pid: int) -> CgroupPaths:
    """The container's dirs from where its process is (`found`: /proc/<pid>/cgroup), held
    to the container's own linux.cgroupsPath. The pid in the OCI state was the container's
    when the runtime wrote the state; a process that ended since (a container that exits at
    once, a poststart hook) can have its pid reused before the hook reads /proc, and the
    new owner's cgroup (another tenant's container) must not get this SLA. Every found dir
    must be the path config.json names, or below it (a container that made cgroups of its
    own): the dir named is returned. CgroupPathError otherwise: nothing is written."""
    # Cleaned as runc cleans it ("/../../a/b" is "/a/b"): the dir runc made.
    relative = normpath("/" + relative_path(cgroups_path).lstrip("/")).rstrip("/")
    dirs = {}
    for name, found_dir in found.dirs.items():
        if not relative:  # the hierarchy's root: every process is below it
            dirs[name] = found.roots[name]
            continue
        at = (found_dir + "/").rfind(relative + "/")
        if at < 0:
            raise CgroupPathError(
                cgroups_path,
                f"process {pid} is in {found_dir}, not in the "
                "container's cgroup (the container's process ended and its "
                "pid was reused?); nothing written",
            )
        dirs[name] = found_dir[: at + len(relative)]
    return CgroupPaths(found.cgroups_path, found.version, dirs, dict(found.roots))
