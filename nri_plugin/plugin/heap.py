"""Giving the C heap's free pages back to the kernel after a large Synchronize.

A Synchronize of 1,000 containers holds a 2 MB request, its parse (about 4.5 MiB in
upb's arenas) and the handler's work at once; freed, most of it stays in glibc's heap
(the freed blocks are not at its top, and glibc raises its mmap threshold once it has
freed a large mapped block, so the next request lands in the heap too). glibc's
`malloc_trim(0)` returns those pages: `nri-sla run`'s resident size after a
Synchronize of 1,000 is 7.7 MiB lower with it (docs/benchmarks.md, "Plugin memory").
It walks the heap once (0.9 ms of CPU after a Synchronize of 1,000, 3.8 ms the first
time), so it runs after a large Synchronize only, once its answer is on its way.
"""

from __future__ import annotations

# Containers in a Synchronize from which the freed heap is given back after it.
TRIM_AFTER_CONTAINERS = 256


def release_freed_heap() -> bool:
    """glibc's malloc_trim(0); False where the C library has none (musl)."""
    import ctypes  # only here: a plugin that never sees a large Synchronize never loads it

    trim = getattr(ctypes.CDLL(None), "malloc_trim", None)
    if trim is None:
        return False
    trim(0)
    return True
