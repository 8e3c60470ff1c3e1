"""The kernel's CPU-list notation ("0-3,8-11"), as used by sysfs and cpuset.cpus/mems."""

from __future__ import annotations

from collections.abc import Iterable


class CpuListError(ValueError):
    """A CPU list that is not in the kernel's "0-3,8-11" notation."""

    def __init__(self, text: str, reason: str) -> None:
        self.text = text
        self.reason = reason
        super().__init__(f"invalid CPU list {text!r}: {reason} (expected e.g. '0-3,8-11')")


def parse_cpulist(text: str) -> frozenset[int]:
    """Parse "0-3,8,10-11" into {0,1,2,3,8,10,11}; an empty or blank string is the empty set."""
    cpus: set[int] = set()
    stripped = text.strip()
    if not stripped:
        return frozenset()
    for part in stripped.split(","):
        part = part.strip()
        if not part:
            raise CpuListError(text, "empty element")
        lo_s, sep, hi_s = part.partition("-")
        try:
            lo = int(lo_s)
            hi = int(hi_s) if sep else lo
        except ValueError:
            raise CpuListError(text, f"{part!r} is not a number or a range") from None
        if lo < 0 or hi < lo:
            raise CpuListError(text, f"range {part!r} is negative or reversed")
        cpus.update(range(lo, hi + 1))
    return frozenset(cpus)


def format_cpulist(cpus: Iterable[int]) -> str:
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
