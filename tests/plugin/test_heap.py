"""The C heap's freed pages go back to the kernel after a large Synchronize (plugin.heap):
glibc's malloc_trim really returns them, and the plugin asks for it once the answer to a
Synchronize of TRIM_AFTER_CONTAINERS containers or more is on its way, not for a smaller
one."""

from __future__ import annotations

import asyncio
import re
from types import SimpleNamespace

from nri_plugin.nri.pb import nri_pb2 as pb
from nri_plugin.plugin import SlaPlugin, handlers
from nri_plugin.plugin.heap import TRIM_AFTER_CONTAINERS, release_freed_heap
from nri_plugin.simulated.runtime import make_container, make_pod
from tests.support.plugin_helpers import make_node


def rss_kib() -> int:
    with open("/proc/self/status") as f:
        return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))


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
    monkeypatch.setattr(handlers, "release_freed_heap", lambda: trims.append(True))
    pod = make_pod("p")

    async def synchronize(count: int) -> tuple[int, int]:
        plugin = SlaPlugin(make_node(2))
        plugin.on_registered(SimpleNamespace(nri_version="v0.12.0"))
        plugin.synchronize([pod], [make_container(pod, f"c{i}", state=pb.CONTAINER_RUNNING)
                                   for i in range(count)])
        during = len(trims)
        await asyncio.sleep(0)  # the next turn of the loop: the answer has been sent
        return during, len(trims)

    assert asyncio.run(synchronize(TRIM_AFTER_CONTAINERS - 1)) == (0, 0)
    assert asyncio.run(synchronize(TRIM_AFTER_CONTAINERS)) == (0, 1)
