"""readback's regex-free matching (lean enough for the hook) vs the regexes it replaced.

The hook's cgroup paths and writes are no longer copies: they are enforce.cgpaths and
enforce.cgfile, tested in tests/enforce/test_cgcore.py.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nri_plugin.enforce import readback

_OLD_MEMORY = re.compile(
    r"^memory\.(limit_in_bytes|soft_limit_in_bytes|memsw\.limit_in_bytes|kmem\.limit_in_bytes"
    r"|kmem\.tcp\.limit_in_bytes|max|high|low|min|swap\.max|swap\.high|zswap\.max)$"
)
_OLD_CPUSET = re.compile(r"^cpuset\.(cpus|mems)(\.exclusive)?$")
_OLD_DEVICE_FILES = re.compile(
    r"^blkio\.(throttle\.(read|write)_(bps|iops)_device|bfq\.weight_device|weight_device)$"
)
_OLD_RULE = re.compile(r"^(\d+:\d+)\s+(.*)$")

NAMES = [
    "memory.max",
    "memory.high",
    "memory.swap.max",
    "memory.limit_in_bytes",
    "memory.kmem.tcp.limit_in_bytes",
    "memory.maxx",
    "cpuset.cpus",
    "cpuset.mems",
    "cpuset.cpus.exclusive",
    "cpuset.cpus.effective",
    "blkio.throttle.read_bps_device",
    "blkio.weight_device",
    "blkio.bfq.weight_device",
    "blkio.weight",
    "io.max",
    "cpu.max",
    "memory.max\n",
    "memory.max\n\n",
    "xmemory.max",
]


@pytest.mark.parametrize("name", NAMES)
def test_file_classes_match_the_old_regexes(name):
    assert (readback._name(name) in readback._MEMORY_SIZE_FILES) == bool(_OLD_MEMORY.match(name))
    assert (readback._name(name) in readback._CPUSET_FILES) == bool(_OLD_CPUSET.match(name))
    assert (readback._name(name) in readback._DEVICE_VALUE_FILES) == bool(
        _OLD_DEVICE_FILES.match(name)
    )


_rule_text = st.text(alphabet=st.sampled_from(list("0189:: \t\u00a0\u0663x=-max")), max_size=14)


@settings(max_examples=300, deadline=None)
@given(_rule_text)
def test_device_rule_matches_the_old_regex(text):
    line = text.strip()
    m = _OLD_RULE.match(line)
    assert readback._device_rule(line) == ((m.group(1), m.group(2).strip()) if m else None)


def test_the_hook_never_loads_protobuf_or_the_plugin():
    """The cold path runs the plugin's core, not the plugin: no protobuf, no NRI code."""
    import subprocess
    import sys

    code = (
        "import sys, nri_plugin.hook.cold, nri_plugin.hook.warm, nri_plugin.hook.run; "
        "print(' '.join(sorted(sys.modules)))"
    )
    loaded = subprocess.run(
        [sys.executable, "-I", "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    assert "nri_plugin.core.decision" in loaded
    assert [
        m
        for m in loaded
        if m.startswith(("google.protobuf", "nri_plugin.nri", "nri_plugin.plugin", "grpc"))
    ] == []
