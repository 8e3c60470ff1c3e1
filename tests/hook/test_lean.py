"""The hook's pathlib-free code agrees with the shared modules it stands in for.

cgdirs.container_dirs vs enforce.nodefacts.container_cgroup_paths (same dirs or the same
error), writes.apply vs enforce.cgroupfs writers (same outcome and message), and
readback's regex-free matching vs the regexes it replaced.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nri_sla.enforce import readback
from nri_sla.enforce.cgroupfs import CgroupWrite, writer_for
from nri_sla.enforce.errors import EnforceError
from nri_sla.enforce.nodefacts import container_cgroup_paths, detect_cgroup_facts
from nri_sla.hook.cgdirs import NodeCgroups, container_dirs
from nri_sla.hook.writes import apply

PATHS = ["/kubepods/pod-a/ctr-1", "kubepods/pod-a/ctr-1", "/kubepods//pod-a/./ctr-1/",
         "kubepods-burstable-poda.slice:cri-containerd:abc", "system.slice:docker:x",
         ":cri-containerd:abc", "-.slice:p:n", "/a/../b", "/a/\0b", "", "a:b",
         "bad-slice:p:n", "/link/ctr", "/kubepods/missing"]


def _tree(root: Path, version: int) -> None:
    hierarchies = ["unified"] if version == 2 else ["cpu,cpuacct", "memory", "blkio"]
    for name in hierarchies:
        top = root if version == 2 else root / name
        for rel in ("kubepods/pod-a/ctr-1", "kubepods.slice/kubepods-burstable.slice/"
                    "kubepods-burstable-poda.slice/cri-containerd-abc.scope"):
            (top / rel).mkdir(parents=True, exist_ok=True)
        (top / "elsewhere").mkdir(exist_ok=True)
        (top / "link").symlink_to(top / "elsewhere")
    if version == 2:
        (root / "cgroup.controllers").write_text("cpu memory io\n")
    else:
        (root / "cpu").symlink_to(root / "cpu,cpuacct")
        (root / "cpuacct").symlink_to(root / "cpu,cpuacct")


def _outcome(fn):
    try:
        return ("ok", fn())
    except EnforceError as exc:
        return (type(exc).__name__, str(exc))


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("cgroups_path", PATHS)
def test_container_dirs_match_nodefacts(tmp_path, version, cgroups_path):
    _tree(tmp_path, version)
    facts = detect_cgroup_facts(tmp_path, mountinfo=tmp_path / "none",
                                cgroups_path_hint="/x")
    node = NodeCgroups.from_facts(facts)
    node = NodeCgroups.from_json(node.to_json())  # as a cache hit sees it
    shared = _outcome(lambda: container_cgroup_paths(cgroups_path, facts))
    lean = _outcome(lambda: container_dirs(cgroups_path, node))
    if shared[0] == "ok":
        assert lean[0] == "ok"
        assert {k: str(v) for k, v in shared[1].dirs.items()} == lean[1].dirs
        assert {k: str(v) for k, v in shared[1].roots.items()} == lean[1].roots
    else:
        assert lean == shared


WRITES = [("cpu", "cpu.cfs_quota_us", "50000"), ("memory", "memory.limit_in_bytes", "1000"),
          ("cpu", "memory.limit_in_bytes", "2000"), ("pids", "pids.max", "10"),
          ("cpu", "cpu.missing", "1"), ("cpu", "../x", "1"), ("cpu", "", "1"),
          ("cpu", "cpu.link", "1"), ("cpu", "cpu.shares", "bad")]


@pytest.mark.parametrize("version", [1, 2])
def test_writes_match_the_shared_writers(tmp_path, version):
    outcomes = []
    for which in ("shared", "lean"):
        top = tmp_path / which
        _tree(top, version)
        facts = detect_cgroup_facts(top, mountinfo=top / "none", cgroups_path_hint="/x")
        paths = container_cgroup_paths("/kubepods/pod-a/ctr-1", facts)
        (top / "outside").mkdir(exist_ok=True)
        for d in paths.dirs.values():
            for name in ("cpu.cfs_quota_us", "memory.limit_in_bytes", "cpu.max",
                         "memory.max", "cpu.shares"):
                (d / name).write_text("0\n")
            if not (d / "cpu.link").is_symlink():  # v1: cpu and cpuacct share a dir
                (d / "cpu.link").symlink_to(top / "outside" / "cpu.x")
        (top / "outside" / "cpu.x").write_text("0\n")
        writes = [(c if version == 1 else "unified", f, v) for c, f, v in WRITES]
        if version == 2:
            writes += [("unified", "cpu.max", "50000 100000"), ("unified", "cgroup.procs", "1")]
        if which == "shared":
            results = writer_for(paths).apply(CgroupWrite(*w) for w in writes)
            got = [(r.ok, str(r.error).replace(str(top), "<top>")) for r in results]
        else:
            dirs = container_dirs("/kubepods/pod-a/ctr-1", NodeCgroups.from_facts(facts))
            got = [(r.ok, str(r.error).replace(str(top), "<top>"))
                   for r in apply(writes, dirs)]
        files = sorted((str(p.relative_to(top)), p.read_text()) for p in top.rglob("*")
                       if p.is_file() and not p.is_symlink())
        outcomes.append((got, files))
    assert outcomes[0] == outcomes[1]
    assert any(ok for ok, _ in outcomes[0][0]) and not all(ok for ok, _ in outcomes[0][0])


# ------------------------------------------------------------------ readback without re

_OLD_MEMORY = re.compile(
    r"^memory\.(limit_in_bytes|soft_limit_in_bytes|memsw\.limit_in_bytes|kmem\.limit_in_bytes"
    r"|kmem\.tcp\.limit_in_bytes|max|high|low|min|swap\.max|swap\.high|zswap\.max)$")
_OLD_CPUSET = re.compile(r"^cpuset\.(cpus|mems)(\.exclusive)?$")
_OLD_DEVICE_FILES = re.compile(
    r"^blkio\.(throttle\.(read|write)_(bps|iops)_device|bfq\.weight_device|weight_device)$")
_OLD_RULE = re.compile(r"^(\d+:\d+)\s+(.*)$")

NAMES = ["memory.max", "memory.high", "memory.swap.max", "memory.limit_in_bytes",
         "memory.kmem.tcp.limit_in_bytes", "memory.maxx", "cpuset.cpus", "cpuset.mems",
         "cpuset.cpus.exclusive", "cpuset.cpus.effective", "blkio.throttle.read_bps_device",
         "blkio.weight_device", "blkio.bfq.weight_device", "blkio.weight", "io.max",
         "cpu.max", "memory.max\n", "memory.max\n\n", "xmemory.max"]


@pytest.mark.parametrize("name", NAMES)
def test_file_classes_match_the_old_regexes(name):
    assert (readback._name(name) in readback._MEMORY_SIZE_FILES) == \
        bool(_OLD_MEMORY.match(name))
    assert (readback._name(name) in readback._CPUSET_FILES) == bool(_OLD_CPUSET.match(name))
    assert (readback._name(name) in readback._DEVICE_VALUE_FILES) == \
        bool(_OLD_DEVICE_FILES.match(name))


_rule_text = st.text(alphabet=st.sampled_from(list("0189:: \t\u00a0\u0663x=-max")),
                     max_size=14)


@settings(max_examples=300, deadline=None)
@given(_rule_text)
def test_device_rule_matches_the_old_regex(text):
    line = text.strip()
    m = _OLD_RULE.match(line)
    assert readback._device_rule(line) == ((m.group(1), m.group(2).strip()) if m else None)
