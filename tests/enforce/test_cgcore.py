"""enforce.cgpaths and enforce.cgfile: the one implementation of cgroup path rules and
checked file writes, as the plugin (CgroupFacts detected at start-up) and the OCI hook
(the same facts, read back from its decision cache as JSON) each use it.

Every case states its expected outcome and runs through each way in, so a way in that
stops delegating (or delegates wrongly) fails here; the core's own edge cases follow.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nri_plugin.enforce import cgfile, cgpaths
from nri_plugin.enforce.cgfile import CgroupWrite, CgroupWriter
from nri_plugin.enforce.cgpaths import CgroupFacts, CgroupPaths
from nri_plugin.enforce.cgroupdetect import detect_cgroup_facts
from nri_plugin.enforce.errors import CgroupFactsError, CgroupPathError
from tests.support.cgroups import CgroupTree

SLICE = (
    "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-poda.slice/"
    "cri-containerd-abc.scope"
)
# cgroupsPath -> the container's path inside each hierarchy, or (error type, text).
PATHS = {
    "/kubepods/pod-a/ctr-1": "/kubepods/pod-a/ctr-1",
    "kubepods/pod-a/ctr-1": "/kubepods/pod-a/ctr-1",
    "/kubepods//pod-a/./ctr-1/": "/kubepods/pod-a/ctr-1",
    "kubepods-burstable-poda.slice:cri-containerd:abc": SLICE,
    ":cri-containerd:abc": "/system.slice/cri-containerd-abc.scope",
    "-.slice:p:n": "/p-n.scope",
    "/a/../b": (CgroupPathError, "'..' would leave the cgroup hierarchy"),
    "/a/\0b": (CgroupPathError, "contains a NUL byte"),
    "": (CgroupPathError, "empty cgroups path"),
    "a:b": (CgroupPathError, "neither an absolute cgroupfs path nor systemd"),
    "bad-slice:p:n": (CgroupPathError, "must be '<name>.slice'"),
    "/link/ctr": (CgroupPathError, "/link is a symlink"),
}


def _facts(tree: CgroupTree, proc: Path):
    return detect_cgroup_facts(tree.root, mountinfo=tree.mountinfo, proc=proc)


def _cached(facts: CgroupFacts) -> CgroupFacts:
    """The facts as a hook cache hit sees them: stored as JSON, read back."""
    return CgroupFacts.from_json(json.loads(json.dumps(facts.to_json())))


def _resolve(user: str, cgroups_path: str, facts) -> dict[str, str]:
    """hierarchy -> container dir (strings), through one way into cgpaths."""
    if user == "facts":
        paths = facts.container_paths(cgroups_path)
    elif user == "cached facts":
        paths = _cached(facts).container_paths(cgroups_path)
    else:
        hierarchies = {k: h.path for k, h in facts.controllers().items()}
        return cgpaths.container_dirs(cgroups_path, hierarchies, facts.root)[0]
    assert all(type(d) is str for d in [*paths.dirs.values(), *paths.roots.values()])
    assert paths.cgroups_path == cgroups_path and paths.version == facts.version
    return paths.dirs


@pytest.mark.parametrize("user", ["cgpaths", "facts", "cached facts"])
@pytest.mark.parametrize("version", [1, 2])
def test_cgroups_path_forms(v1_tree, v2_tree, fake_proc, user, version):
    facts = _facts(v1_tree if version == 1 else v2_tree, fake_proc)
    tops = {
        k: Path(h.path).resolve()
        for k, h in facts.controllers().items()
        if not k.startswith("name=")
    }
    for top in set(tops.values()):
        (top / "elsewhere").mkdir(exist_ok=True)
        (top / "link").symlink_to(top / "elsewhere")
    for cgroups_path, want in PATHS.items():
        if isinstance(want, str):
            got = _resolve(user, cgroups_path, facts)
            assert got == {k: str(top) + want for k, top in tops.items()}, cgroups_path
        else:
            with pytest.raises(want[0], match=want[1]) as exc:
                _resolve(user, cgroups_path, facts)
            assert exc.value.cgroups_path == cgroups_path


def test_container_dirs_skip_named_and_need_a_hierarchy(tmp_path):
    dirs, roots = cgpaths.container_dirs(
        "/x", {"name=systemd": str(tmp_path), "cpu": str(tmp_path)}, "/sys/fs/cgroup"
    )
    assert dirs == {"cpu": str(tmp_path / "x")} and roots == {"cpu": str(tmp_path)}
    with pytest.raises(CgroupFactsError, match="no cgroup hierarchies under /r"):
        cgpaths.container_dirs("/x", {"name=systemd": str(tmp_path)}, "/r")


def test_safe_join_starts_at_the_resolved_mount(tmp_path):
    (tmp_path / "cpu,cpuacct").mkdir()
    (tmp_path / "cpu").symlink_to("cpu,cpuacct")
    assert cgpaths.safe_join(str(tmp_path / "cpu"), "/a", "/a") == str(tmp_path / "cpu,cpuacct/a")


@pytest.mark.parametrize(
    ("path", "mount_root", "want"),
    [
        ("/kubepods/pod/c", "/", "/kubepods/pod/c"),
        ("/kubepods/pod/c", "", "/kubepods/pod/c"),
        ("/agent/kubepods/c", "/agent", "/kubepods/c"),
        ("/agent", "/agent/", "/"),
        ("/agentx/c", "/agent", None),
        ("/other", "/agent", None),
    ],
)
def test_strip_mount_root(path, mount_root, want):
    if want is None:
        with pytest.raises(CgroupPathError, match="outside the mounted subtree /agent"):
            cgpaths.strip_mount_root(path, mount_root, "/proc/1/cgroup")
    else:
        assert cgpaths.strip_mount_root(path, mount_root, "/proc/1/cgroup") == want


def test_dir_of():
    assert cgpaths.dir_of({"cpu": "/c"}, 1, "cpu", "/x") == "/c"
    assert cgpaths.dir_of({"unified": "/u"}, 2, "memory", "/x") == "/u"
    with pytest.raises(CgroupFactsError, match="no 'blkio' hierarchy for cgroups path '/x'"):
        cgpaths.dir_of({"cpu": "/c"}, 1, "blkio", "/x")


def test_within():
    assert cgpaths.within("/a/b", "/a") and cgpaths.within("/a", "/a")
    assert cgpaths.within("/a", "/") and not cgpaths.within("/ab", "/a")


# ------------------------------------------------------------------ writes

# (controller, file, value) -> None: written and read back; else a text in the error.
V1_WRITES = [
    (("cpu", "cpu.cfs_quota_us", "50000"), None),
    (("memory", "memory.limit_in_bytes", "8192"), None),
    (("cpuset", "cpuset.cpus", "0-1"), None),
    (("pids", "pids.max", "10"), None),  # cgroupspy has no pids controller: plain write
    (("cpu", "memory.limit_in_bytes", "1"), "does not belong to controller 'cpu'"),
    (("hugetlb", "hugetlb.2MB.limit_in_bytes", "1"), "controller 'hugetlb' is not mounted"),
    (("cpu", "cpu.missing", "1"), "no such file: the controller or feature is missing"),
    (("cpu", "../x", "1"), "file must be a plain file name"),
    (("cpu", "", "1"), "file must be a plain file name"),
    (("cpu", "cpu.link", "1"), "resolves outside"),
    (("cpu", "cpu.dir", "1"), "Is a directory"),
    (("blkio", "blkio.weight", "500"), "cgroup directory does not exist"),
]
V2_WRITES = [
    (("unified", "cpu.max", "50000 100000"), None),
    (("unified", "memory.max", "8192"), None),
    (("unified", "io.max", "8:0 rbps=1"), None),
    (("unified", "cgroup.procs", "1"), "not a resource control file (allowed prefixes: cpu."),
    (("unified", "cpu.missing", "1"), "no such file"),
    (("unified", "a/b", "1"), "file must be a plain file name"),
    (("unified", "cpu.link", "1"), "resolves outside"),
]


def _container(tree: CgroupTree, proc: Path):
    facts = _facts(tree, proc)
    paths = facts.container_paths("/kubepods/pod-a/ctr-1")
    outside = tree.root.parent / "outside"
    outside.mkdir()
    (outside / "cpu.x").write_text("keep\n")
    for name, dir_ in paths.dirs.items():
        if name in ("blkio", "name=systemd"):
            continue  # blkio: the container's dir was never created
        d = Path(dir_)
        d.mkdir(parents=True, exist_ok=True)
        for file in (
            "cpu.cfs_quota_us",
            "memory.limit_in_bytes",
            "cpuset.cpus",
            "pids.max",
            "cpu.max",
            "memory.max",
            "io.max",
            "cgroup.procs",
        ):
            (d / file).write_text("a longer previous value\n")
        (d / "cpu.dir").mkdir(exist_ok=True)
        (d / "cpu.link").unlink(missing_ok=True)
        (d / "cpu.link").symlink_to(outside / "cpu.x")
    return facts, paths, outside


@pytest.mark.parametrize("user", ["apply", "apply_one", "cached"])
@pytest.mark.parametrize("version", [1, 2])
def test_writes(v1_tree, v2_tree, fake_proc, user, version):
    facts, paths, outside = _container(v1_tree if version == 1 else v2_tree, fake_proc)
    cases = V1_WRITES if version == 1 else V2_WRITES
    writes = [CgroupWrite(*w) for w, _ in cases]
    if user == "apply":
        results = CgroupWriter(paths).apply(writes)
    elif user == "apply_one":  # a fresh writer per write: no state carried between them
        results = [CgroupWriter(paths).apply_one(w) for w in writes]
    else:  # a hook cache hit: facts and writes both read back from their JSON form
        cached = _cached(facts).container_paths(paths.cgroups_path)
        stored = json.loads(json.dumps([list(w) for w in writes]))
        results = CgroupWriter(cached).apply(CgroupWrite(*w) for w in stored)
    assert [r.write for r in results] == writes
    for ((controller, file, value), want), r in zip(cases, results, strict=True):
        if want is None:
            assert r.ok and r.error is None and r.read_back == value, (file, r.error)
            assert r.path == os.path.join(paths.dir(controller), file)
            # One write(2) with O_TRUNC: nothing of the longer previous value is left.
            assert Path(paths.dir(controller), file).read_text() == value
        else:
            assert not r.ok and want in str(r.error), (file, str(r.error))
            assert str(r.error).startswith(f"cannot write {value!r} to ")
    assert (outside / "cpu.x").read_text() == "keep\n"


def _v2_writer(d: Path, cls: type[CgroupWriter] = CgroupWriter) -> CgroupWriter:
    return cls(CgroupPaths(str(d), 2, {cgpaths.UNIFIED: str(d)}, {cgpaths.UNIFIED: str(d)}))


def test_writer_reports_read_back_problems(tmp_path):
    (tmp_path / "cpuset.cpus").write_text("")

    class Lying(CgroupWriter):
        def _read(self, controller: str, path: str) -> str:
            return "0-1\n"

    class Failing(CgroupWriter):
        def _read(self, controller: str, path: str) -> str:
            raise OSError(errno.EACCES, "Permission denied")

    class Normalising(CgroupWriter):
        def _read(self, controller: str, path: str) -> str:
            return "0-2\n"

    write = CgroupWrite("cpuset", "cpuset.cpus", "3")
    r = _v2_writer(tmp_path, Lying).apply_one(write)
    assert not r.ok and r.read_back == "0-1" and r.path == str(tmp_path / "cpuset.cpus")
    assert "read back '0-1', which does not match" in str(r.error)
    r = _v2_writer(tmp_path, Failing).apply_one(write)
    assert not r.ok and r.read_back is None and r.path == str(tmp_path / "cpuset.cpus")
    assert str(r.error).endswith(
        "read-back failed: Permission denied (permission denied (needs root or a delegated cgroup))"
    )
    # The kernel's normalisation is not a mismatch: "0,1,2" reads back as "0-2".
    r = _v2_writer(tmp_path, Normalising).apply_one(CgroupWrite("cpuset", "cpuset.cpus", "0,1,2"))
    assert r.ok and r.read_back == "0-2" and r.error is None


def test_writer_reports_write_errors_with_the_path(tmp_path):
    (tmp_path / "memory.max").write_text("")

    class Refusing(CgroupWriter):
        def _write(self, controller: str, path: str, value: str) -> None:
            raise OSError(errno.EINVAL, "Invalid argument")

    r = _v2_writer(tmp_path, Refusing).apply_one(CgroupWrite("memory", "memory.max", "x"))
    assert not r.ok and r.read_back is None and r.path == str(tmp_path / "memory.max")
    assert str(r.error) == (
        f"cannot write 'x' to {tmp_path / 'memory.max'}: Invalid argument "
        "(the kernel rejected the value (out of range, or conflicts with "
        "the parent))"
    )
    assert (tmp_path / "memory.max").read_text() == ""


def test_os_reason_hints():
    assert cgfile.os_reason(OSError(errno.EINVAL, "Invalid argument")) == (
        "Invalid argument (the kernel rejected the value (out of range, or conflicts with "
        "the parent))"
    )
    assert cgfile.os_reason(OSError(errno.EIO, "I/O error")) == "I/O error"


def test_shared_cores_import_lean():
    """The hook's cached run imports these: no pathlib, dataclasses, typing, re, logging,
    json (each costs more start-up time than the run's own work)."""
    root = str(Path(__file__).resolve().parents[2])
    code = (
        f"import sys; sys.path.insert(0, {root!r}); "
        "import nri_plugin.enforce.cgfile, nri_plugin.enforce.cgpaths, "
        "nri_plugin.enforce.devnode, "
        "nri_plugin.ops.event; "
        "print(' '.join(sorted(sys.modules)))"
    )
    out = subprocess.run(
        [sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    assert "nri_plugin.enforce.cgfile" in out
    for heavy in (
        "pathlib",
        "dataclasses",
        "typing",
        "re",
        "logging",
        "json",
        "collections",
        "importlib",
        "warnings",
        "nri_plugin.enforce.cgroupdetect",
        "nri_plugin.enforce.rt",
        "nri_plugin.topology",
        "cgroupspy",
    ):
        assert heavy not in out, heavy
