"""The C heap of `nri-sla run`: large blocks kept out of it, and its freed pages given back
to the kernel after a large Synchronize.

A Synchronize of 1,000 containers holds a 2 MB request (the ttrpc frame buffer, the
frame, the payload), its parse (about 4.5 MiB in upb's arenas) and the handler's work at
once. glibc serves blocks of 128 KiB or more with mmap and unmaps them when freed, but it
raises that threshold (up to 32 MiB) each time such a block is freed, so from the second
Synchronize on those megabytes come from the heap, where freed blocks under live ones
stay resident and the next Synchronize's peak lands on top of them. Fixing the threshold
at glibc's own initial 128 KiB (`keep_large_blocks_mapped`, once at start) keeps them
mapped: the peak of `bench_vs_go.py`'s five Synchronizes of 1,000 and 3,300 creations
46.3 -> 44.1 MiB (docs/benchmarks.md, "Plugin memory"). Blocks that size are made only for
such requests, so the mmap calls cost nothing measurable per create.

What stays in the heap after a large Synchronize (the freed blocks are not at its top)
glibc's `malloc_trim(0)` returns: `nri-sla run`'s resident size after a Synchronize of
1,000 is 7.7 MiB lower with it. It walks the heap once (0.9 ms of CPU after a Synchronize
of 1,000, 3.8 ms the first time), so it runs after a large Synchronize only, once its
answer is on its way.
"""

from __future__ import annotations

from typing import Any

# Containers in a Synchronize from which the freed heap is given back after it.
TRIM_AFTER_CONTAINERS = 256
# mallopt's parameter for the mmap threshold (glibc's malloc.h), and the threshold kept:
# glibc's initial one, which setting it stops glibc from raising.
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 128 << 10


def _libc_function(name: str) -> Any:
    """The C library's `name`; None where it has none (musl has no malloc_trim)."""
    import ctypes  # only here: what imports the plugin without serving it never loads it

    return getattr(ctypes.CDLL(None), name, None)


def keep_large_blocks_mapped() -> bool:
    """glibc's mmap threshold fixed at MMAP_THRESHOLD; False where the C library has no
    mallopt or does not take the parameter (not glibc)."""
    mallopt = _libc_function("mallopt")
    return mallopt is not None and mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1


def release_freed_heap() -> bool:
    """glibc's malloc_trim(0); False where the C library has none (musl)."""
    trim = _libc_function("malloc_trim")
    if trim is None:
        return False
    trim(0)
    return True
