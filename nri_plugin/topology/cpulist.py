"""The kernel's CPU-list notation ("0-3,8-11"), as used by sysfs and cpuset.cpus/mems.

The one parser of that notation: sysfs topology, the node config's reserved CPUs, SLA
NUMA node lists and cgroup read-backs all use it. Lean (only the layer's errors): the OCI
hook's read-back compares cpusets with it on every container start.
"""

from nri_plugin.topology.errors import CpuListError

TYPE_CHECKING = False  # `collections` and `typing` cost the OCI hook start-up time
if TYPE_CHECKING:
    from collections.abc import Iterable


# The empty CPU set, one object: most containers pin none, and a container's value keeps
# this one rather than an empty set of its own (216 bytes each).
NO_CPUS: frozenset[int] = frozenset()


def parse_cpulist(text: str, *, limit: int | None = None, distinct: bool = False) -> frozenset[int]:
    """Parse "0-3,8,10-11" into {0,1,2,3,8,10,11}; an empty or blank string is the empty set.

    `limit`: the highest id allowed, checked for every range before it is expanded (a
    hostile "0-999999999" costs nothing). `distinct`: refuse an id named twice.
    """
    cpus: set[int] = set()
    stripped = text.strip()
    if not stripped:
        return NO_CPUS
    for part in stripped.split(","):
        part = part.strip()
        if not part:
            raise CpuListError(text, "empty element")
        lo_s, sep, hi_s = part.partition("-")
        if not lo_s.strip().isdecimal() or (sep and not hi_s.strip().isdecimal()):
            raise CpuListError(text, f"{part!r} is not a number or a range")
        if len(lo_s) > 9 or len(hi_s) > 9:  # before int(): no id of a real node is longer
            raise CpuListError(text, f"{part!r} names an id too large for a CPU or node")
        lo = int(lo_s)
        hi = int(hi_s) if sep else lo
        if hi < lo:
            raise CpuListError(text, f"reversed range {part!r}; write {hi}-{lo}")
        if limit is not None and hi > limit:
            raise CpuListError(text, f"ids must be from 0 to {limit}")
        if distinct and not cpus.isdisjoint(range(lo, hi + 1)):
            raise CpuListError(text, "names an id twice")
        cpus.update(range(lo, hi + 1))
    return frozenset(cpus)


def format_cpulist(cpus: "Iterable[int]") -> str:
    """Format a set of CPU ids as the shortest "0-3,8-11" form (sorted; "" for none)."""
    ordered = sorted(set(cpus))
    parts: list[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        if j == i:
            parts.append(str(ordered[i]))
        else:
            parts.append(f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(parts)
