"""The OCI hook under the host's runc on a real cgroup v2 hierarchy (inside the qemu guest).

The hook runs at createRuntime, before the container's process exists; the container then
reads its own cgroup files through its cgroup namespace, so what it prints is what the
hook wrote and the kernel accepted.
"""

from __future__ import annotations

import uuid
from pathlib import Path

MIB = 1 << 20
FILES = ["cpu.max", "cpuset.mems", "memory.high", "memory.max", "io.max"]


def test_hook_applies_the_sla_on_v2(
    busybox_bundle, virtio_disk, read_files_script, sections, tmp_path
):
    dev = virtio_disk.majmin
    sla = (
        f"cpu:\n  limit: 0.5\n  period: 50ms\nnuma:\n  nodes: '0'\n"
        f"memory:\n  high: 48Mi\n  max: 64Mi\n"
        f"io:\n  max:\n    - device: '{dev}'\n      read-bps: 1Mi\n      write-iops: 300\n"
    )
    proc, log = busybox_bundle.run_with_hook(
        read_files_script(FILES), {"sla.nri.io/pod": sla}, tmp_path
    )
    assert proc.rc == 0, (proc.stderr, log)
    got = sections(proc.stdout)
    assert got["cpu.max"] == "25000 50000"
    assert got["cpuset.mems"] == "0"
    assert got["memory.high"] == str(48 * MIB)
    assert got["memory.max"] == str(64 * MIB)
    assert got["io.max"] == f"{dev} rbps={MIB} wbps=max riops=max wiops=300"


def test_hook_soft_mode_warns_and_starts(busybox_bundle, read_files_script, sections, tmp_path):
    sla = "enforcement: soft\ncpu:\n  limit: 0.25\n  rt-runtime: 5ms\nio:\n  weight: 300\n"
    proc, log = busybox_bundle.run_with_hook(
        read_files_script(["cpu.max", "io.weight"]), {"sla.nri.io/pod": sla}, tmp_path
    )
    assert proc.rc == 0, (proc.stderr, log)
    got = sections(proc.stdout)
    assert got["cpu.max"] == "25000 100000"
    assert got["io.weight"].splitlines()[0] == "default 300"
    assert "cpu.rt-runtime" in log and "cgroup v2" in log


def test_hook_refuses_rt_on_v2_in_hard_mode(busybox_bundle, tmp_path):
    proc, _log = busybox_bundle.run_with_hook(
        ["/bin/true"], {"sla.nri.io/pod": "cpu:\n  rt-runtime: 5ms\n"}, tmp_path
    )
    assert proc.rc != 0
    assert "cpu.rt-runtime" in proc.stderr and "cgroup v2" in proc.stderr


def test_hook_cache_hit_gives_the_same_cgroup_values(
    busybox_bundle, virtio_disk, read_files_script, sections, tmp_path
):
    cache = tmp_path / "hook-cache"
    sla = (
        f"cpu: {{limit: 0.5}}\nmemory: {{high: 48Mi, max: 64Mi}}\n"
        f"io:\n  max:\n    - {{device: '{virtio_disk.majmin}', write-iops: 300}}\n"
    )
    runs = []
    for _ in range(2):
        proc, log = busybox_bundle.run_with_hook(
            read_files_script(FILES), {"sla.nri.io/pod": sla}, tmp_path, cache=str(cache)
        )
        assert proc.rc == 0, (proc.stderr, log)
        runs.append(sections(proc.stdout))
        assert any(p.name.startswith("decision-") for p in cache.iterdir())
    assert runs[0] == runs[1]
    assert runs[1]["memory.high"] == str(48 * MIB)


# ------------------------------------------------------------------ what the hook trusts

CRIO_KEYS = {
    "io.kubernetes.cri-o.ContainerType": "container",
    "io.kubernetes.container.name": "app",
    "io.kubernetes.pod.namespace": "default",
}
CONTAINERD_KEYS = {
    "io.kubernetes.cri.container-type": "container",
    "io.kubernetes.cri.container-name": "app",
}
IO_MAX_FOR_TEAMS = "enforcement: hard\npermissions:\n  io-max: ['team-*']\n"


def test_hook_takes_the_namespace_from_the_runtimes_own_keys(
    busybox_bundle, virtio_disk, read_files_script, sections, tmp_path
):
    """io.max is for team-* namespaces only: containerd's own key grants it; a pod's
    annotation named like containerd's key, in a CRI-O spec, does not."""
    sla = {
        "sla.nri.io/pod": f"io:\n  max:\n    - device: '{virtio_disk.majmin}'\n"
        f"      write-iops: 300\n"
    }
    keys = {**CONTAINERD_KEYS, "io.kubernetes.cri.sandbox-namespace": "team-a"}
    proc, log = busybox_bundle.run_with_hook(
        read_files_script(["io.max"]),
        sla,
        tmp_path,
        node_config=IO_MAX_FOR_TEAMS,
        runtime_keys=keys,
    )
    assert proc.rc == 0, (proc.stderr, log)
    assert sections(proc.stdout)["io.max"].startswith(f"{virtio_disk.majmin} ")
    spoofed = {**CRIO_KEYS, "io.kubernetes.cri.sandbox-namespace": "team-a"}
    proc, _log = busybox_bundle.run_with_hook(
        ["/bin/true"], sla, tmp_path, node_config=IO_MAX_FOR_TEAMS, runtime_keys=spoofed
    )
    assert proc.rc != 0 and "exit status 1" in proc.stderr
    assert "namespace '' may not use io-max" in proc.stderr
    assert "the pod's namespace is unknown (the spec carries both containerd's" in proc.stderr


def test_hook_finds_a_relative_cgroups_path_through_the_pid(
    busybox_bundle, read_files_script, sections, tmp_path
):
    """runc puts a relative cgroupsPath below its own cgroup; the hook follows the pid.
    The container reads its own cgroup (cgroup namespace): the values are where it runs."""
    own = next(
        line.split("::", 1)[1]
        for line in Path("/proc/self/cgroup").read_text().splitlines()
        if line.startswith("0::")
    )
    parent = f"nri-sla-rel-{uuid.uuid4().hex[:8]}"
    sla = {"sla.nri.io/pod": "cpu:\n  limit: 0.5\nmemory:\n  max: 64Mi\n"}
    try:
        proc, log = busybox_bundle.run_with_hook(
            read_files_script(["cpu.max", "memory.max"]),
            sla,
            tmp_path,
            cgroups_path=f"{parent}/ctr",
        )
        assert proc.rc == 0, (proc.stderr, log)
        got = sections(proc.stdout)
        assert got["cpu.max"] == "50000 100000"
        assert got["memory.max"] == str(64 * MIB)
    finally:
        leftover = Path("/sys/fs/cgroup") / own.strip("/") / parent
        if leftover.is_dir():
            leftover.rmdir()


def test_hook_refuses_a_cgroup_holding_other_processes(busybox_bundle, cgroup_tree, tmp_path):
    """cgroupsPath names a cgroup with a populated child (v2 allows that while the cgroup
    enables no controllers for its children): refused, exit 2, nothing written."""
    top = f"nri-sla-anc-{uuid.uuid4().hex[:8]}"
    pod = cgroup_tree(f"{top}/pod")
    (pod.path / "other").mkdir()
    sleeper = type(pod)(pod.path / "other").spawn(["sleep", "300"])
    try:
        sla = {"sla.nri.io/pod": "memory:\n  max: 32Mi\n"}
        proc, _log = busybox_bundle.run_with_hook(
            ["/bin/true"], sla, tmp_path, cgroups_path=f"/{top}/pod"
        )
        assert proc.rc != 0 and "exit status 2" in proc.stderr, proc.stderr
        assert f"{pod.path}/other below it holds other processes" in proc.stderr
        assert pod.read("memory.max") == "max"
        assert sleeper.poll() is None
    finally:
        sleeper.kill()
        sleeper.wait()


def test_hook_io_max_devices_do_not_reveal_host_files(busybox_bundle, tmp_path):
    link = Path(f"/dev/nri-sla-test-{uuid.uuid4().hex[:8]}")
    link.symlink_to("/etc/shadow")
    answers = {}
    try:
        for device in (
            "/dev/null",
            "/dev/nri-sla-test-missing",
            str(link),
            "/etc/shadow",
            "/nonexistent",
        ):
            sla = {
                "sla.nri.io/pod": f"io:\n  max:\n    - device: '{device}'\n      read-bps: 1Mi\n"
            }
            proc, _log = busybox_bundle.run_with_hook(["/bin/true"], sla, tmp_path)
            assert proc.rc != 0
            status = proc.stderr.split("exit status ", 1)[1][0]
            line = proc.stderr.split("stderr: ", 1)[1].split("\\n", 1)[0]
            answers[device] = (status, line.replace(device, "<dev>"))
    finally:
        link.unlink()
    assert (
        answers["/dev/null"]
        == answers["/dev/nri-sla-test-missing"]
        == answers[str(link)]
        == (
            "1",
            "nri-sla hook: sla.nri.io/pod: io.max[0].device: io device '<dev>': "
            "is not a block device under /dev",
        )
    )
    assert answers["/etc/shadow"] == answers["/nonexistent"]
    assert answers["/etc/shadow"][0] == "2"
