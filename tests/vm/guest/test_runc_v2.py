"""runc (the host's, Debian 1.1.5) on cgroup v2: what an OCI config's linux.resources
turns into, read back by the container itself through its cgroup namespace.

This is the path an NRI ContainerAdjustment takes: containerd puts the adjusted
resources into config.json and runc writes the cgroup files.
"""

MIB = 1 << 20
FILES = [
    "cpu.max",
    "cpuset.cpus",
    "cpuset.mems",
    "memory.max",
    "memory.high",
    "io.max",
    "io.weight",
    "io.bfq.weight",
    "pids.max",
]


def base_resources(dev: str) -> dict:
    return {
        "cpu": {"quota": 50000, "period": 100000, "cpus": "0", "mems": "0"},
        "memory": {"limit": 64 * MIB},
        "pids": {"limit": 100},
        "unified": {"memory.high": str(48 * MIB), "io.max": f"{dev} rbps=1048576 wbps=2097152"},
    }


def test_runc_applies_resources_and_unified(
    busybox_bundle, virtio_disk, read_files_script, sections
):
    dev = virtio_disk.majmin
    res = busybox_bundle.run(read_files_script(FILES), base_resources(dev))
    assert res.rc == 0, res.stderr
    got = sections(res.stdout)
    assert got["cpu.max"] == "50000 100000"
    assert got["cpuset.cpus"] == "0"
    assert got["cpuset.mems"] == "0"
    assert got["memory.max"] == str(64 * MIB)
    assert got["memory.high"] == str(48 * MIB)
    assert got["io.max"] == f"{dev} rbps=1048576 wbps=2097152 riops=max wiops=max"
    assert got["pids.max"] == "100"


def test_container_sees_its_own_cgroup_as_root(busybox_bundle, virtio_disk):
    res = busybox_bundle.run(["/bin/cat", "/proc/self/cgroup"], base_resources(virtio_disk.majmin))
    assert res.rc == 0, res.stderr
    assert res.stdout.strip() == "0::/"


def test_runc_silently_ignores_realtime_on_v2(
    busybox_bundle, virtio_disk, read_files_script, sections
):
    # runc does not refuse cpu.realtime* on v2: it drops them. So a "hard" rt-runtime
    # SLA on a v2 node must be refused by nri-sla itself, never passed to the runtime.
    resources = base_resources(virtio_disk.majmin)
    resources["cpu"].update(realtimeRuntime=5000, realtimePeriod=1000000)
    res = busybox_bundle.run(read_files_script(["cpu.max", "cpu.rt_runtime_us"]), resources)
    assert res.rc == 0, res.stderr
    got = sections(res.stdout)
    assert got["cpu.max"] == "50000 100000"
    assert got["cpu.rt_runtime_us"].endswith("<absent>")


def test_runc_refuses_unknown_unified_key(busybox_bundle, virtio_disk):
    resources = base_resources(virtio_disk.majmin)
    resources["unified"]["cpu.rt_runtime_us"] = "5000"
    res = busybox_bundle.run(["/bin/true"], resources)
    assert res.rc != 0
    assert "cpu.rt_runtime_us" in res.stderr


def test_runc_blockio_weight_goes_to_bfq_weight_when_present(
    busybox_bundle, virtio_disk, read_files_script, sections
):
    # runc 1.1 writes blockIO.weight to io.bfq.weight when that file exists (bfq loaded),
    # else converts it to io.weight. nri-sla's io.weight goes through `unified` instead.
    resources = base_resources(virtio_disk.majmin)
    resources["blockIO"] = {"weight": 500}
    res = busybox_bundle.run(read_files_script(["io.weight", "io.bfq.weight"]), resources)
    assert res.rc == 0, res.stderr
    got = sections(res.stdout)
    assert got["io.bfq.weight"] == "default 500"
    assert got["io.weight"] == "default 100"


def test_runc_unified_io_weight(busybox_bundle, virtio_disk, read_files_script, sections):
    resources = base_resources(virtio_disk.majmin)
    resources["unified"]["io.weight"] = "default 700"
    res = busybox_bundle.run(read_files_script(["io.weight"]), resources)
    assert res.rc == 0, res.stderr
    assert sections(res.stdout)["io.weight"] == "default 700"


def test_runc_refuses_invalid_unified_value(busybox_bundle, virtio_disk):
    resources = base_resources(virtio_disk.majmin)
    resources["unified"]["memory.high"] = "lots"
    res = busybox_bundle.run(["/bin/true"], resources)
    assert res.rc != 0
    assert "memory.high" in res.stderr
