"""The OCI hook under the host's runc on a real cgroup v2 hierarchy (inside the qemu guest).

The hook runs at createRuntime, before the container's process exists; the container then
reads its own cgroup files through its cgroup namespace, so what it prints is what the
hook wrote and the kernel accepted.
"""

from __future__ import annotations

MIB = 1 << 20
FILES = ["cpu.max", "cpuset.mems", "memory.high", "memory.max", "io.max"]


def test_hook_applies_the_sla_on_v2(busybox_bundle, virtio_disk, read_files_script, sections,
                                    tmp_path):
    dev = virtio_disk.majmin
    sla = (f"cpu:\n  limit: 0.5\n  period: 50ms\nnuma:\n  nodes: '0'\n"
           f"memory:\n  high: 48Mi\n  max: 64Mi\n"
           f"io:\n  max:\n    - device: '{dev}'\n      read-bps: 1Mi\n      write-iops: 300\n")
    proc, log = busybox_bundle.run_with_hook(read_files_script(FILES),
                               {"sla.nri.io/pod": sla}, tmp_path)
    assert proc.rc == 0, (proc.stderr, log)
    got = sections(proc.stdout)
    assert got["cpu.max"] == "25000 50000"
    assert got["cpuset.mems"] == "0"
    assert got["memory.high"] == str(48 * MIB)
    assert got["memory.max"] == str(64 * MIB)
    assert got["io.max"] == f"{dev} rbps={MIB} wbps=max riops=max wiops=300"


def test_hook_soft_mode_warns_and_starts(busybox_bundle, read_files_script, sections,
                                         tmp_path):
    sla = "enforcement: soft\ncpu:\n  limit: 0.25\n  rt-runtime: 5ms\nio:\n  weight: 300\n"
    proc, log = busybox_bundle.run_with_hook(read_files_script(["cpu.max", "io.weight"]),
                               {"sla.nri.io/pod": sla}, tmp_path)
    assert proc.rc == 0, (proc.stderr, log)
    got = sections(proc.stdout)
    assert got["cpu.max"] == "25000 100000"
    assert got["io.weight"].splitlines()[0] == "default 300"
    assert "cpu.rt-runtime" in log and "cgroup v2" in log


def test_hook_refuses_rt_on_v2_in_hard_mode(busybox_bundle, tmp_path):
    proc, _log = busybox_bundle.run_with_hook(["/bin/true"],
                                {"sla.nri.io/pod": "cpu:\n  rt-runtime: 5ms\n"}, tmp_path)
    assert proc.rc != 0
    assert "cpu.rt-runtime" in proc.stderr and "cgroup v2" in proc.stderr


def test_hook_cache_hit_gives_the_same_cgroup_values(busybox_bundle, virtio_disk,
                                                     read_files_script, sections, tmp_path):
    cache = tmp_path / "hook-cache"
    sla = (f"cpu: {{limit: 0.5}}\nmemory: {{high: 48Mi, max: 64Mi}}\n"
           f"io:\n  max:\n    - {{device: '{virtio_disk.majmin}', write-iops: 300}}\n")
    runs = []
    for _ in range(2):
        proc, log = busybox_bundle.run_with_hook(read_files_script(FILES),
                                   {"sla.nri.io/pod": sla}, tmp_path, cache=str(cache))
        assert proc.rc == 0, (proc.stderr, log)
        runs.append(sections(proc.stdout))
        assert any(p.name.startswith("decision-") for p in cache.iterdir())
    assert runs[0] == runs[1]
    assert runs[1]["memory.high"] == str(48 * MIB)
