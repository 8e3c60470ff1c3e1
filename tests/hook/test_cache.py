"""The decision cache: a hit gives exactly the cold result, and every input is in the key.

Runs go through the hook's real flow (in-process on fake cgroup trees, and as a process
for the import check). A cache hit is proven by making the cold path fail if it is used.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

import nri_plugin.core.decision as decision_module
import nri_plugin.hook.cold as cold_module
import nri_plugin.sla.parse as parse_module
from nri_plugin.core.recordkey import load_or_create_key
from nri_plugin.errors import EXIT_INVALID, EXIT_OK, EXIT_REFUSED
from nri_plugin.plan.model import ContainerPlan
from nri_plugin.plan.record import encode_record
from nri_plugin.simulated.hardware import build_sysfs

CTR = "/kubepods/pod-a/ctr-1"
NAME = "io.kubernetes.cri.container-name"
TYPE = "io.kubernetes.cri.container-type"
HOOK_MAIN = Path(__file__).resolve().parents[2] / "nri_plugin" / "hook" / "__main__.py"


def _files(cdir: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(cdir.iterdir()) if p.is_file()}


@pytest.fixture
def world(tmp_path, h, hook_cache_dir):
    """A fake v2 node; run(annotations, warm=..., **opts) -> (Outcome, container files)."""
    root = tmp_path / "cg"
    cdir = h.fake_v2_tree(root, CTR)
    pristine = _files(cdir)
    config = tmp_path / "config.yaml"
    config.write_text(f"enforcement: hard\nstate-dir: {tmp_path / 'state'}\n")

    def run(
        annotations,
        *,
        expect_hit=None,
        env=None,
        cid="ctr-1",
        files=None,
        pid=None,
        cgroups_path=CTR,
        resources=None,
        **opts,
    ):
        for name, text in {**pristine, **(files or {})}.items():  # the same start each run
            (cdir / name).write_text(text)
        bundle = h.write_bundle(
            tmp_path / f"bundle-{cid}",
            {TYPE: "container", NAME: "app", **annotations},
            cgroups_path,
            env,
            resources,
        )
        opts.setdefault("config", str(config))
        opts.setdefault("cgroup_root", str(root))
        calls = []
        real = cold_module.core_actions

        def counting(*args, **kwargs):
            calls.append(1)
            return real(*args, **kwargs)

        mp = pytest.MonkeyPatch()
        mp.setattr(cold_module, "core_actions", counting)
        try:
            out = h.run_inproc(h.state_json(bundle, cid=cid, pid=pid), **opts)
        finally:
            mp.undo()
        if expect_hit is not None:  # True: served from the cache; False: decided cold
            assert (not calls) == expect_hit, "cache hit" if calls == [] else "cold run"
        return out, _files(cdir)

    return run, config, cdir, hook_cache_dir


def _decisions(cache: Path) -> list[str]:
    return (
        [p.name for p in cache.iterdir() if p.name.startswith("decision-")]
        if cache.exists()
        else []
    )


def _same(a, b) -> None:
    assert (a.exit_code, a.action, a.lines) == (b.exit_code, b.action, b.lines)
    da, db = a.decision, b.decision
    assert (da is None) == (db is None)
    if da is not None:
        assert (da.outcome, da.applied, da.warnings, da.error) == (
            db.outcome,
            db.applied,
            db.warnings,
            db.error,
        )


CASES = {
    "hard, cpu+numa+memory+io.weight": {
        "sla.nri.io/pod": "cpu:\n  limit: 2.5\n  period: 100ms\nnuma:\n  nodes: '0'\n"
        "memory:\n  high: 8Gi\n  max: 10Gi\nio:\n  weight: 500\n"
    },
    "soft with warnings": {
        "sla.nri.io/pod": "enforcement: soft\ncpu:\n  limit: 1\n  rt-runtime: 5ms\n"
    },
    "container-level over pod-level": {
        "sla.nri.io/pod": "cpu:\n  limit: 1\n",
        "sla.nri.io/container.app": "memory:\n  max: 64Mi\n",
    },
    "exclusive cpus": {"sla.nri.io/pod": "cpu:\n  exclusive: 1\n"},
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_cold_run_parses_the_sla_once(world, case, monkeypatch):
    """core_actions parses the SLA (its enforcement decides how a failure ends) and the
    core plans that SLA: the annotations are not parsed again in decide."""
    run, *_ = world
    parses = []
    real = parse_module.sla_for_container

    def counting(*args, **kwargs):
        parses.append(args[1])
        return real(*args, **kwargs)

    monkeypatch.setattr(parse_module, "sla_for_container", counting)
    monkeypatch.setattr(decision_module, "sla_for_container", counting)
    out, _ = run(CASES[case], expect_hit=False)
    assert out.action != "skipped" and parses == ["app"]


@pytest.mark.parametrize("case", list(CASES))
def test_cache_hit_gives_the_cold_result(world, case):
    run, _config, _cdir, cache = world
    annotations = CASES[case]
    off, off_files = run(annotations, cache_dir="off")
    assert not cache.exists()
    cold, cold_files = run(annotations)
    assert sorted(p.name.split("-")[0] for p in cache.iterdir()) == ["config", "decision", "facts"]
    # A replica: another container id, the same SLA.
    warm, warm_files = run(annotations, expect_hit=True, cid="ctr-2")
    _same(cold, off)
    _same(warm, cold)
    assert cold_files == off_files == warm_files
    assert warm.exit_code == EXIT_OK


# The plugin's record (fields of a ContainerPlan("hard", 2, ...), for `owner`) or raw text;
# the pod's SLA before "cpu: {limit: 0.3}"; the container's files before the run; the
# hook's exit status and what its lines (or error) say.
VERIFY_CASES = {
    "no drift": ({"memory_max": 64 << 20}, "ctr-1", "", {"memory.max": "67108864\n"}, EXIT_OK, ""),
    "hard drift": (
        {"cpu_quota": 30000, "cpu_period": 100000},
        "ctr-1",
        "",
        None,
        EXIT_REFUSED,
        "drift from what nri applied",
    ),
    "soft drift": (
        {"cpu_quota": 30000, "cpu_period": 100000},
        "ctr-1",
        "enforcement: soft\n",
        None,
        EXIT_OK,
        "drift from what nri applied",
    ),
    "soft undecodable record": (
        "{nope",
        "ctr-1",
        "enforcement: soft\n",
        None,
        EXIT_OK,
        "not written by nri-sla",
    ),
    # Not this container's record: ignored, the SLA enforced (and not stored either).
    "hard, another container's record": (
        {"memory_max": 64 << 20},
        "ctr-other",
        "",
        None,
        EXIT_OK,
        "applied ignored: not a valid record (not written by nri-sla for this container",
    ),
}


@pytest.mark.parametrize("case", list(VERIFY_CASES))
def test_verification_is_decided_cold_and_never_stored(world, tmp_path, case):
    """A record is authenticated for one container id, which the decision key does not
    hold: storing its verification would let a copy of the record on another container
    hit it. Each run decides cold; the outcome is the same with and without a store."""
    run, _config, _cdir, cache = world
    fields, owner, sla, files, status, says = VERIFY_CASES[case]
    key = load_or_create_key(str(tmp_path / "state"))
    record = (
        fields
        if isinstance(fields, str)
        else encode_record(ContainerPlan("hard", 2, **fields), "nri", owner, key)
    )
    annotations = {"sla.nri.io/pod": sla + "cpu:\n  limit: 0.3\n", "sla.nri.io/applied": record}
    off, off_files = run(annotations, cache_dir="off", files=files)
    first, first_files = run(annotations, expect_hit=False, files=files)
    again, again_files = run(annotations, expect_hit=False, files=files)
    assert _decisions(cache) == []
    _same(first, off)
    _same(again, off)
    assert off_files == first_files == again_files
    assert off.exit_code == status
    text = " ".join([*off.lines, str(off.decision.error if off.decision else "")])
    assert says in text
    if not says:
        assert off.action == "verified"


def test_a_record_without_a_trusted_key_is_not_trusted(world, tmp_path):
    """The record is right for this container, but this node's key file is not one nri-sla
    trusts: nothing proves who wrote the record, and the plugin may have enforced, so hard
    mode refuses. With no key file at all no plugin ever wrote a record here: the record
    is ignored and the SLA enforced."""
    run, _config, _cdir, _cache = world
    record = encode_record(
        ContainerPlan("hard", 2, memory_max=64 << 20),
        "nri",
        "ctr-1",
        load_or_create_key(str(tmp_path / "state")),
    )
    annotations = {"sla.nri.io/pod": "cpu:\n  limit: 0.3\n", "sla.nri.io/applied": record}
    (tmp_path / "state" / "record.key").chmod(0o640)
    out, _ = run(annotations, files={"memory.max": "67108864\n"})
    assert out.exit_code == EXIT_REFUSED
    assert "cannot be verified" in str(out.decision.error)
    (tmp_path / "state" / "record.key").unlink()
    out, files = run(annotations, files={"memory.max": "67108864\n"})
    assert (out.exit_code, out.action) == (EXIT_OK, "applied")
    assert "no record key on this node" in out.lines[0]
    assert files["cpu.max"].split() == ["30000", "100000"]


def test_io_max_device_is_rechecked_on_every_hit(world, h, tmp_path):
    run, _config, _cdir, _cache = world
    dev, majmin = h.first_disk()
    if os.geteuid() != 0 or not os.access("/dev", os.W_OK):
        pytest.skip("needs root and a writable /dev to mknod a block device node")
    # The SLA contract takes device paths under /dev only: a scratch node there.
    node = Path(f"/dev/nri-sla-test-{uuid.uuid4().hex[:12]}")
    os.mknod(node, stat.S_IFBLK | 0o600, os.stat(dev).st_rdev)
    try:
        sla = {"sla.nri.io/pod": f"io:\n  max:\n    - device: {node}\n      read-bps: 10Mi\n"}
        cold, files = run(sla)
        assert cold.exit_code == EXIT_OK, cold.lines
        assert files["io.max"].startswith(majmin)
        warm, warm_files = run(sla, expect_hit=True)
        _same(warm, cold)
        assert warm_files == files
        node.unlink()
        node.write_text("not a device any more")
        again, _ = run(sla, expect_hit=False)  # the dependency changed: decided again
        assert again.exit_code == EXIT_REFUSED, again.lines
        assert "io.max[0].device" in again.lines[0] and "is not a block device" in again.lines[0]
    finally:
        node.unlink(missing_ok=True)


def test_topology_is_rechecked_on_every_hit(world, tmp_path):
    run, _config, _cdir, _cache = world
    sysfs = build_sysfs(tmp_path / "sys", nodes=2, cores_per_node=2)
    sla = {"sla.nri.io/pod": "numa:\n  nodes: '1'\n"}
    cold, files = run(sla, sysfs_root=str(sysfs))
    assert cold.exit_code == EXIT_OK, cold.lines
    assert files["cpuset.cpus"].strip() == "2-3"
    warm, _ = run(sla, expect_hit=True, sysfs_root=str(sysfs))
    _same(warm, cold)
    # CPU 3 goes offline: node 1 now has CPU 2 only; a stale decision would write 2-3.
    (sysfs / "devices/system/cpu/online").write_text("0-2\n")
    (sysfs / "devices/system/node/node1/cpulist").write_text("2\n")
    after, files = run(sla, sysfs_root=str(sysfs), expect_hit=False)
    assert after.exit_code == EXIT_OK, after.lines
    assert files["cpuset.cpus"].strip() == "2"


def test_node_config_change_invalidates(world):
    run, config, _cdir, _cache = world
    sla = {"sla.nri.io/pod": "cpu:\n  limit: 1\n  rt-runtime: 5ms\n"}  # v2: no RT
    config.write_text("enforcement: soft\n")
    soft, _ = run(sla)
    assert soft.exit_code == EXIT_OK and "warning" in soft.lines[0]
    assert run(sla, expect_hit=True)[0].exit_code == EXIT_OK
    config.write_text("enforcement: hard\n")
    hard, _ = run(sla, expect_hit=False)
    assert hard.exit_code == EXIT_REFUSED


@pytest.mark.parametrize(
    "change", ["sla", "namespace", "name", "enforcement", "stray key", "spoofed namespace"]
)
def test_annotation_changes_invalidate(world, change):
    run, _config, _cdir, _cache = world
    base = {"sla.nri.io/pod": "cpu:\n  limit: 0.5\n", "io.kubernetes.cri.sandbox-namespace": "prod"}
    first, files = run(base)
    assert first.exit_code == EXIT_OK and files["cpu.max"].split()[0] == "50000"
    changed = dict(base)
    if change == "sla":
        changed["sla.nri.io/pod"] = "cpu:\n  limit: 1.5\n"
    elif change == "namespace":
        changed["io.kubernetes.cri.sandbox-namespace"] = "dev"
    elif change == "name":
        changed[NAME] = "other"
        changed["sla.nri.io/container.other"] = "cpu:\n  limit: 1.5\n"
    elif change == "spoofed namespace":  # not believed: the namespace becomes unknown
        changed["io.kubernetes.pod.namespace"] = "prod-rt"
    elif change == "enforcement":
        changed["sla.nri.io/pod"] = "cpu:\n  limit: 1\n  rt-runtime: 5ms\n"
        changed["io.kubernetes.sla/enforcement-mode"] = "soft"
    else:
        changed["sla.nri.io/typo"] = "x"
    off, off_files = run(changed, cache_dir="off")
    out, out_files = run(changed, expect_hit=False)
    _same(out, off)
    assert out_files == off_files


def test_warm_runs_find_the_cgroup_through_the_pid(world, h, tmp_path):
    """A hit locates each replica's cgroup from /proc/<pid>/cgroup as the cold run does,
    and a cgroup holding other processes is never written from the cache either."""
    run, _config, cdir, _cache = world
    other = h.fake_v2_tree(tmp_path / "cg", "/kubepods/pod-b/ctr-2")
    proc = h.fake_proc(tmp_path / "proc", 11, f"0::{CTR}\n")
    h.fake_proc(tmp_path / "proc", 12, "0::/kubepods/pod-b/ctr-2\n")
    h.fake_proc(tmp_path / "proc", 13, "0::/kubepods/pod-a\n")
    sla = {"sla.nri.io/pod": "memory:\n  max: 64Mi\n"}
    # Relative spec paths (runc takes them from its own cgroup): only the pid leads to the
    # cgroup, held to the path the spec names.
    cold, files = run(sla, pid=11, proc_root=proc, cgroups_path="pod-a/ctr-1")
    assert cold.exit_code == EXIT_OK and files["memory.max"] == str(64 << 20)
    warm, _ = run(
        sla, pid=12, proc_root=proc, cid="ctr-2", expect_hit=True, cgroups_path="pod-b/ctr-2"
    )
    assert warm.exit_code == EXIT_OK
    assert (other / "memory.max").read_text() == str(64 << 20)
    (cdir / "cgroup.events").write_text("populated 1\n")
    (cdir.parent / "memory.max").write_text("max\n")
    pod, _ = run(sla, pid=13, proc_root=proc, cid="ctr-3", expect_hit=False, cgroups_path="pod-a")
    assert pod.exit_code == EXIT_INVALID and "holds other processes" in pod.lines[0]
    assert (cdir.parent / "memory.max").read_text() == "max\n"


def test_a_reused_pid_never_leads_to_another_containers_cgroup(world, h, tmp_path):
    """PID reuse: the container's process ended between the runtime writing the state and
    the hook reading /proc/<pid>/cgroup, and the pid now belongs to another tenant's
    container. Its cgroup is not the one config.json names: refused, nothing written there,
    from the cache or not. A process in a cgroup below its own container's is the
    container's (the named dir is written)."""
    run, _config, _cdir, _cache = world
    other = h.fake_v2_tree(tmp_path / "cg", "/kubepods/pod-b/ctr-2")
    (other / "memory.max").write_text("max\n")
    proc = h.fake_proc(tmp_path / "proc", 12, "0::/kubepods/pod-b/ctr-2\n")
    h.fake_proc(tmp_path / "proc", 14, f"0::{CTR}/init.scope\n")
    sla = {"sla.nri.io/pod": "memory:\n  max: 64Mi\n"}
    for cache in ({"cache_dir": "off"}, {}):  # no cache, then a cached decision at hand
        assert run(sla, **cache)[0].exit_code == EXIT_OK
        reused, _ = run(sla, pid=12, proc_root=proc, cgroups_path=CTR, expect_hit=False)
        assert reused.exit_code == EXIT_INVALID
        assert "pid was reused?" in reused.lines[0] and "pod-b/ctr-2" in reused.lines[0]
        assert (other / "memory.max").read_text() == "max\n"
    nested, files = run(sla, pid=14, proc_root=proc, cgroups_path=CTR)
    assert nested.exit_code == EXIT_OK and files["memory.max"] == str(64 << 20)


BIG = {"cpu": {"quota": 100000, "period": 100000, "shares": 1024}, "memory": {"limit": 128 << 20}}


@pytest.mark.parametrize(
    ("section", "field", "value", "exit_code"),
    [
        ("cpu", "quota", 40000, EXIT_REFUSED),  # 0.4 CPU < the SLA's 0.5
        ("cpu", "period", 250000, EXIT_REFUSED),  # 100000/250000: 0.4 CPU
        ("cpu", "shares", 512, EXIT_OK),  # a smaller request: no exclusive CPUs here
        ("memory", "limit", 32 << 20, EXIT_REFUSED),  # 32Mi < the SLA's 64Mi
    ],
)
def test_runtime_limits_are_in_the_key(world, section, field, value, exit_code):
    """A replica whose kubelet limits differ is decided again: the grant caps the plan."""
    run, _config, _cdir, _cache = world
    sla = {"sla.nri.io/pod": "cpu:\n  limit: 0.5\nmemory:\n  max: 64Mi\n"}
    assert run(sla, resources=BIG)[0].exit_code == EXIT_OK
    assert run(sla, resources=BIG, expect_hit=True)[0].exit_code == EXIT_OK
    other = {"cpu": dict(BIG["cpu"]), "memory": dict(BIG["memory"])}
    other[section][field] = value
    out, _ = run(sla, resources=other, expect_hit=False)
    off, _ = run(sla, resources=other, cache_dir="off")
    _same(out, off)
    assert out.exit_code == exit_code


def test_per_replica_annotations_still_hit(world):
    run, _config, _cdir, _cache = world
    sla = {"sla.nri.io/pod": "memory:\n  max: 64Mi\n"}
    run(
        {
            **sla,
            "io.kubernetes.cri.sandbox-id": "a" * 64,
            "io.kubernetes.cri.sandbox-name": "web-0",
        },
        cid="c1",
    )
    out, _ = run(
        {
            **sla,
            "io.kubernetes.cri.sandbox-id": "b" * 64,
            "io.kubernetes.cri.sandbox-name": "web-1",
        },
        cid="c2",
        expect_hit=True,
    )
    assert out.exit_code == EXIT_OK


@pytest.mark.parametrize(
    "damage",
    [
        "flip a byte",
        "truncate",
        "garbage",
        "empty",
        "valid digest, wrong key",
        "malformed decision",
    ],
)
def test_corrupt_entries_are_ignored(world, damage):
    from nri_plugin.hook.cache import encode

    run, _config, _cdir, cache = world
    sla = CASES["hard, cpu+numa+memory+io.weight"]
    cold, files = run(sla)
    for entry in cache.iterdir():
        data = entry.read_bytes()
        kind = entry.name.split("-")[0]
        if damage == "flip a byte":
            data = data[:-5] + bytes([data[-5] ^ 1]) + data[-4:]
        elif damage == "truncate":
            data = data[: len(data) // 2]
        elif damage == "garbage":
            data = os.urandom(200)
        elif damage == "empty":
            data = b""
        elif damage == "valid digest, wrong key":
            data = encode({"x": 1}, kind, "0" * 40)
        elif kind == "decision":
            data = encode(
                {"decision": {"kind": "apply", "writes": [["cpu", "cpu.max"]]}, "deps": []},
                kind,
                entry.name.split("-", 1)[1],
            )
        entry.write_bytes(data)
    again, again_files = run(sla, expect_hit=False)
    _same(again, cold)
    assert again_files == files
    # The cold run replaced the broken entries: the next replica hits again.
    _same(run(sla, expect_hit=True)[0], cold)


def test_cache_dir_and_entry_permissions(world, tmp_path):
    run, _config, _cdir, cache = world
    sla = {"sla.nri.io/pod": "memory:\n  max: 64Mi\n"}
    run(sla)
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700
    assert {stat.S_IMODE(p.stat().st_mode) for p in cache.iterdir()} == {0o600}
    run(sla, expect_hit=True)
    # A group-writable entry is not trusted.
    for entry in cache.iterdir():
        entry.chmod(0o620)
    run(sla, expect_hit=False)
    # A directory others can read/enter is not used at all (nothing read, nothing written).
    loose = tmp_path / "loose"
    loose.mkdir(mode=0o755)
    loose.chmod(0o755)
    run(sla, cache_dir=str(loose))
    assert list(loose.iterdir()) == []
    # Nor is a symlink to a good directory.
    link = tmp_path / "link"
    link.symlink_to(cache)
    run(sla, cache_dir=str(link), expect_hit=False)


def test_foreign_owned_entries_are_ignored(world):
    if os.geteuid() != 0:
        pytest.skip("needs root to chown an entry to another user")
    run, _config, _cdir, cache = world
    sla = {"sla.nri.io/pod": "memory:\n  max: 64Mi\n"}
    run(sla)
    for entry in cache.iterdir():
        os.chown(entry, 4242, 4242)
    run(sla, expect_hit=False)
    # The cold run rewrote them as ours.
    assert {p.stat().st_uid for p in cache.iterdir()} == {0}
    run(sla, expect_hit=True)


def test_refusals_and_gpu_slas_are_not_cached(world):
    run, _config, _cdir, cache = world
    bad = {"sla.nri.io/pod": "memory:\n  high: 2Gi\n  max: 1Gi\n"}
    assert run(bad)[0].exit_code == EXIT_INVALID
    assert _decisions(cache) == []
    gpu = {"sla.nri.io/pod": "enforcement: soft\ngpu:\n  count: 1\nmemory:\n  max: 64Mi\n"}
    assert run(gpu)[0].exit_code == EXIT_OK
    assert _decisions(cache) == []
    assert run(gpu, expect_hit=False)[0].exit_code == EXIT_OK


def test_store_bounds(tmp_path, monkeypatch):
    from nri_plugin.hook import cache as cache_module

    monkeypatch.setattr(cache_module, "MAX_ENTRIES", 5)
    s = cache_module.Store(str(tmp_path / "c"))
    for i in range(9):
        assert s.put("decision", f"{i:040x}", {"i": i})
    names = sorted(os.listdir(tmp_path / "c"))
    assert len(names) == 5
    assert s.get("decision", f"{8:040x}") == {"i": 8}
    assert not s.put("decision", "big", {"x": "y" * cache_module.MAX_ENTRY_BYTES})
    assert s.get("decision", "big") is None
    assert not [n for n in os.listdir(tmp_path / "c") if n.startswith(".tmp")]


@pytest.mark.parametrize("hook_log", [False, True], ids=["", "NRI_SLA_HOOK_LOG"])
@pytest.mark.parametrize("lookup", ["cgroupsPath", "pid"])
def test_warm_run_imports_no_parser_planner_or_yaml(world, h, tmp_path, lookup, hook_log):
    """The point of the cache: a hit loads none of yaml, the SLA parser, the planner,
    dataclasses, pathlib, typing, re or os (each costs milliseconds per container); neither
    when it reads /proc/<pid>/cgroup nor when it re-checks an io.max device path, nor when
    it writes its decision line to NRI_SLA_HOOK_LOG (nri_plugin.ops.event)."""
    _run, config, _cdir, cache = world
    dev, _majmin = h.first_disk()
    sla = {
        "sla.nri.io/pod": CASES["hard, cpu+numa+memory+io.weight"]["sla.nri.io/pod"]
        + f"  max:\n    - device: {dev}\n      read-bps: 10Mi\n"
    }
    root, pid = tmp_path / "cg", None
    if lookup == "pid":  # this test's own process, in a fake tree mirroring its cgroup
        own = [
            line[3:]
            for line in Path("/proc/self/cgroup").read_text().splitlines()
            if line.startswith("0::")
        ]
        if not own:
            pytest.skip("no cgroup v2 line in /proc/self/cgroup (a pure v1 host)")
        root, pid = tmp_path / "cg-pid", os.getpid()
        h.fake_v2_tree(root, own[0])
    bundle = h.write_bundle(
        tmp_path / "bundle-x",
        {TYPE: "container", NAME: "app", **sla},
        CTR if pid is None else own[0],
    )
    heavy = (
        "yaml",
        "nri_plugin.sla",
        "nri_plugin.text",
        "nri_plugin.plan",
        "nri_plugin.config",
        "dataclasses",
        "pathlib",
        "typing",
        "re",
        "json",
        "logging",
        "nri_plugin.enforce.cgroupdetect",
        "nri_plugin.core.decision",
        "nri_plugin.core.nodestate",
        "nri_plugin.core.request",
        "nri_plugin.topology.cpus",
        "importlib",
        "cgroupspy",
        # `from __future__ import annotations` imports a module: the modules a warm
        # run loads quote their annotations instead (docs/hook.md).
        "__future__",
        # `python3 -I -S` does not load os; a warm run takes its calls from the
        # built-in posix instead (nri_plugin/posixfs.py).
        "os",
        "posixpath",
        "genericpath",
        "stat",
        "_collections_abc",
        # cgfile builds its errno hints only when a write fails.
        "errno",
    )
    log = tmp_path / "hook.log"
    env = {**os.environ, "NRI_SLA_HOOK_LOG": str(log)} if hook_log else None
    loaded = []
    for _ in range(2):  # the second run is the hit (the first stores under this argv)
        proc = subprocess.run(
            [
                sys.executable,
                "-I",
                "-S",
                "-X",
                "importtime",
                str(HOOK_MAIN),
                "--config",
                str(config),
                "--cgroup-root",
                str(root),
                "--cache-dir",
                str(cache),
            ],
            input=h.state_json(bundle, pid=pid),
            capture_output=True,
            timeout=30,
            env=env,
        )
        assert proc.returncode == 0, proc.stderr.decode()[-2000:]
        loaded = [
            line.rsplit("|", 1)[-1].strip()
            for line in proc.stderr.decode().splitlines()
            if line.startswith("import time:")
        ]
    assert "nri_plugin.hook.warm" in loaded and "nri_plugin.enforce.devnode" in loaded
    assert [m for m in loaded if m in heavy or m.startswith("yaml.")] == []
    if hook_log:  # the hit wrote its decision line, through the shared renderer
        assert "nri_plugin.ops.event" in loaded
        lines = log.read_text().splitlines()
        assert len(lines) == 2 and " path=hook outcome=enforced " in lines[1]


def test_cache_option_and_environment(tmp_path, monkeypatch):
    from nri_plugin.errors import InvalidInput
    from nri_plugin.hook.cache import open_store
    from nri_plugin.hook.options import HookOptions, parse_argv

    assert parse_argv(["--cache-dir", "off"]).cache_dir == "off"
    assert parse_argv([f"--cache-dir={tmp_path}"]).cache_dir == str(tmp_path)
    with pytest.raises(InvalidInput, match="--cache-dir"):
        parse_argv(["--cache-dir", "relative/dir"])
    monkeypatch.setenv("NRI_SLA_HOOK_CACHE", "off")
    assert open_store(HookOptions()) is None
    assert open_store(HookOptions(cache_dir=str(tmp_path))).directory == str(tmp_path)
    monkeypatch.delenv("NRI_SLA_HOOK_CACHE")
    assert open_store(HookOptions()).directory == "/run/nri-sla/hook-cache"


def test_mirrored_constants_match_their_sources():
    from nri_plugin.config import loader
    from nri_plugin.core import inputs
    from nri_plugin.enforce import blockdev
    from nri_plugin.hook import cache
    from nri_plugin.sla import ENFORCEMENT_ALIAS
    from nri_plugin.sla.parse import MAX_SLA_KEYS

    assert cache.CONFIG_DEFAULT == loader.DEFAULT_PATH
    assert cache.CONFIG_LIMIT == loader.MAX_CONFIG_BYTES
    assert inputs.ENFORCEMENT_ALIAS == ENFORCEMENT_ALIAS
    assert inputs.MAX_SLA_KEYS == MAX_SLA_KEYS
    assert str(blockdev.SYSFS_ROOT) == cache.DEVICE_SYSFS
