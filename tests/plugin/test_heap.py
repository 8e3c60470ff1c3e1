"""The C heap of `nri-sla run` (nri.heap): with the mmap threshold kept where glibc
starts it, large blocks freed go back to the kernel at once, also after glibc would have
raised it; the heap's freed pages go back after a large Synchronize: glibc's malloc_trim
really returns them, and the plugin asks for it once the answer to a Synchronize of
TRIM_AFTER_CONTAINERS containers or more is on its way, not for a smaller one."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from types import SimpleNamespace

from nri_plugin.nri.heap import TRIM_AFTER_CONTAINERS, release_freed_heap
from nri_plugin.nri.pb import nri_pb2 as pb
from nri_plugin.plugin import SlaPlugin, restore
from nri_plugin.simulated.runtime import make_container, make_pod
from tests.support.plugin_helpers import make_node


def rss_kib() -> int:
    with open("/proc/self/status") as f:
        return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))


# A freed 4 MiB block makes glibc raise its mmap threshold to 4 MiB (when it may): the
# 512 KiB blocks after it come from the heap, where the newest one, kept, holds the others'
# freed pages resident.
LARGE_BLOCKS = """
import re, sys
from nri_plugin.nri.heap import keep_large_blocks_mapped

def rss_kib():
    with open("/proc/self/status") as f:
        return int(re.search(r"VmRSS:\\s+(\\d+)", f.read()).group(1))

if sys.argv[1] == "kept":
    assert keep_large_blocks_mapped()
big = b"x" * (4 << 20)  # written, so resident (bytes(n) may not touch its pages)
del big
before = rss_kib()
blocks = [b"x" * (512 << 10) for _ in range(40)]
kept = blocks[-1]
del blocks
print(rss_kib() - before)
"""


def test_large_blocks_stay_mapped_once_the_threshold_is_kept():
    def resident_after(mode: str) -> int:
        return int(
            subprocess.run(
                [sys.executable, "-c", LARGE_BLOCKS, mode],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
        )

    assert resident_after("glibc") > 15 << 10, "glibc kept its threshold: nothing to show"
    assert resident_after("kept") < 4 << 10, "freed 512 KiB blocks stayed resident"


def test_freed_heap_pages_are_given_back():
    # 40 MiB in blocks glibc serves from its heap (above pymalloc's 512 bytes, below the
    # mmap threshold), then one more kept: glibc cannot trim the freed ones off the heap's
    # top by itself.
    blocks = [bytes(4096) for _ in range(10_000)]
    kept = bytes(4096)
    del blocks
    before = rss_kib()
    assert release_freed_heap()
    assert before - rss_kib() > 20 << 10, "malloc_trim gave back less than 20 MiB of 40"
    assert kept


def test_a_large_synchronize_gives_the_freed_heap_back(monkeypatch):
    trims = []
    monkeypatch.setattr(restore, "release_freed_heap", lambda: trims.append(True))
    pod = make_pod("p")

    async def synchronize(count: int) -> tuple[int, int]:
        plugin = SlaPlugin(make_node(2))
        plugin.on_registered(SimpleNamespace(nri_version="v0.12.0", registered=True))
        plugin.synchronize(
            [pod], [make_container(pod, f"c{i}", state=pb.CONTAINER_RUNNING) for i in range(count)]
        )
        plugin.restorer.restore()
        during = len(trims)
        await asyncio.sleep(0)  # the next turn of the loop: the state has been let go
        return during, len(trims)

    assert asyncio.run(synchronize(TRIM_AFTER_CONTAINERS - 1)) == (0, 0)
    assert asyncio.run(synchronize(TRIM_AFTER_CONTAINERS)) == (0, 1)
