"""MIG strategies of the device plugin, MIG devices enumerated by the fake NVML (with the
driver's nvidia-caps minors), against the fake kubelet (both stub flavours): mixed
(`nvidia.com/mig-<profile>` resources beside whole GPUs), single (MIG devices as
`nvidia.com/gpu`), their Allocate answers, the layouts single refuses; and the plugin's
metrics."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from nri_plugin.kubelet.deviceplugin import GpuDevicePlugin, PluginSettings
from nri_plugin.kubelet.devices import build_tables, mig_resource
from nri_plugin.kubelet.errors import MigLayoutError
from nri_plugin.simulated.hardware import (
    GIB,
    FakeGpu,
    FakeMig,
    FakeNvml,
    build_mig_proc,
    build_sysfs,
    mig_box_gpus,
)
from nri_plugin.topology.gpu_health import unhealthy
from nri_plugin.topology.gpus import GpuInventory
from nri_plugin.topology.inventory import InventoryReader
from nri_plugin.value import replace

MIG = [m.uuid for m in mig_box_gpus()[0].migs]  # 3g.40gb, 2g.20gb, 1g.10gb, 1g.10gb
WHOLE = mig_box_gpus()[1].uuid


def read(tmp_path: Path, gpus: list[FakeGpu]) -> GpuInventory:
    proc = tmp_path / "proc"
    for g in gpus:
        if g.migs:
            build_mig_proc(proc, g.minor, g.migs)
    return InventoryReader(
        "nvml", sysfs_root=build_sysfs(tmp_path / "sys"), nvml=FakeNvml(gpus), proc_root=proc
    ).read()


def single_box() -> list[FakeGpu]:
    """2 A100s in MIG mode, each split into 1g.10gb devices only."""
    return [
        FakeGpu(
            uuid=f"GPU-70000000-0000-0000-0000-00000000000{i}",
            bus=f"00000000:{0x07 + 8 * i:02X}:00.0",
            numa=i,
            minor=i,
            mig=True,
            migs=[
                FakeMig(
                    f"MIG-70000000-0000-0000-0000-0000000000{i}{k}", "1g.10gb", 7 + k, 0, 10 * GIB
                )
                for k in range(3)
            ],
        )
        for i in range(2)
    ]


@pytest.fixture
def dev_root(tmp_path):
    """Device nodes as links to /dev/null: GPUs, control nodes, every nvidia-caps minor."""
    root = tmp_path / "dev"
    (root / "nvidia-caps").mkdir(parents=True)
    for name in [
        "nvidia0",
        "nvidia1",
        "nvidiactl",
        "nvidia-uvm",
        *(f"nvidia-caps/nvidia-cap{m}" for m in range(400)),
    ]:
        (root / name).symlink_to("/dev/null")
    return root


@pytest.fixture
def serve(sock_dir, dev_root):
    running: list[tuple[GpuDevicePlugin, threading.Thread]] = []

    def start(inventory: GpuInventory, strategy: str, injection: str = "cdi") -> GpuDevicePlugin:
        plugin = GpuDevicePlugin(
            PluginSettings(
                socket_dir=sock_dir,
                injection=injection,
                mig_strategy=strategy,
                dev_root=dev_root,
                watch_interval=0.1,
                register_timeout=2,
            ),
            inventory,
        )
        thread = threading.Thread(target=plugin.run, daemon=True)
        thread.start()
        running.append((plugin, thread))
        return plugin

    yield start
    for plugin, thread in running:
        plugin.stop()
        thread.join(10)


def registrations(kubelet, n: int) -> dict[str, dict]:
    return {r["resource_name"]: r for r in (kubelet.registration() for _ in range(n))}


def lists(kubelet, n: int) -> dict[str, dict[str, str]]:
    got = {}
    while len(got) < n:
        listed = kubelet.next_list()
        got[listed["resource"]] = {d["ID"]: d["health"] for d in listed["devices"]}
    return got


def test_mixed_advertises_a_resource_per_profile(make_kubelet, serve, tmp_path, sock_dir):
    kubelet = make_kubelet()
    serve(read(tmp_path, mig_box_gpus()), "mixed")
    registered = registrations(kubelet, 4)
    assert sorted(registered) == [
        "nvidia.com/gpu",
        "nvidia.com/mig-1g.10gb",
        "nvidia.com/mig-2g.20gb",
        "nvidia.com/mig-3g.40gb",
    ]
    assert registered["nvidia.com/mig-1g.10gb"]["endpoint"] == "nri-sla-mig-1g.10gb.sock"
    # topology-scored GetPreferredAllocation for whole GPUs only
    assert registered["nvidia.com/gpu"]["options"] == {"get_preferred_allocation_available": True}
    assert registered["nvidia.com/mig-1g.10gb"].get("options", {}) == {}
    assert lists(kubelet, 4) == {
        "nvidia.com/gpu": {WHOLE: "Healthy"},
        "nvidia.com/mig-3g.40gb": {MIG[0]: "Healthy"},
        "nvidia.com/mig-2g.20gb": {MIG[1]: "Healthy"},
        "nvidia.com/mig-1g.10gb": {MIG[2]: "Healthy", MIG[3]: "Healthy"},
    }
    assert (sock_dir / "nri-sla-mig-2g.20gb.sock").is_socket()


def test_allocate_a_mig_device_in_each_mode(make_kubelet, serve, tmp_path, dev_root):
    kubelet = make_kubelet()
    serve(read(tmp_path, mig_box_gpus()), "mixed", injection="devices")
    registrations(kubelet, 4)
    answer = kubelet.call(
        "Allocate",
        {"container_requests": [{"devices_ids": [MIG[2]]}]},
        resource="nvidia.com/mig-1g.10gb",
    )
    (response,) = answer["response"]["container_responses"]
    assert response["envs"] == {"NVIDIA_VISIBLE_DEVICES": MIG[2]}
    # the parent GPU's node, the control nodes, and the GPU instance's and compute
    # instance's nvidia-caps nodes (minors from /proc/driver/nvidia-caps/mig-minors)
    assert [d["container_path"] for d in response["devices"]] == [
        "/dev/nvidia0",
        "/dev/nvidiactl",
        "/dev/nvidia-uvm",
        "/dev/nvidia-caps/nvidia-cap84",
        "/dev/nvidia-caps/nvidia-cap85",
    ]
    two = kubelet.call(
        "Allocate",
        {"container_requests": [{"devices_ids": MIG[2:]}]},
        resource="nvidia.com/mig-1g.10gb",
    )
    (response,) = two["response"]["container_responses"]
    assert response["envs"] == {"NVIDIA_VISIBLE_DEVICES": f"{MIG[2]},{MIG[3]}"}
    assert len(response["devices"]) == 7  # nvidia0 and the control nodes once
    wrong = kubelet.call(
        "Allocate",
        {"container_requests": [{"devices_ids": [MIG[0]]}]},
        resource="nvidia.com/mig-1g.10gb",
    )
    assert (
        wrong["code"] == "INVALID_ARGUMENT"
        and "not one of the 2 nvidia.com/mig-1g.10gb" in wrong["details"]
    )


def test_allocate_mig_devices_as_cdi_names(make_kubelet, serve, tmp_path):
    kubelet = make_kubelet()
    if "cdi_devices" not in kubelet.hello["allocate_fields"]:
        pytest.skip("these kubelet protos have no ContainerAllocateResponse.cdi_devices")
    serve(read(tmp_path, mig_box_gpus()), "mixed")
    registrations(kubelet, 4)
    answer = kubelet.call(
        "Allocate",
        {"container_requests": [{"devices_ids": MIG[2:]}]},
        resource="nvidia.com/mig-1g.10gb",
    )
    assert answer["response"]["container_responses"] == [
        {
            "cdi_devices": [
                {"name": f"nvidia.com/gpu={MIG[2]}"},
                {"name": f"nvidia.com/gpu={MIG[3]}"},
            ]
        }
    ]


def test_single_offers_mig_devices_as_gpus(make_kubelet, serve, tmp_path):
    kubelet = make_kubelet()
    plugin = serve(read(tmp_path, single_box()), "single")
    assert kubelet.registration()["resource_name"] == "nvidia.com/gpu"
    listed = lists(kubelet, 1)["nvidia.com/gpu"]
    assert sorted(listed) == sorted(m.uuid for g in single_box() for m in g.migs)
    preferred = kubelet.call(
        "GetPreferredAllocation",
        {"container_requests": [{"available_deviceIDs": sorted(listed), "allocation_size": 2}]},
    )
    assert len(preferred["response"]["container_responses"][0]["deviceIDs"]) == 2
    metrics = plugin.metrics.registry
    assert (
        metrics.get_sample_value(
            "nri_sla_device_plugin_registrations_total",
            {"resource": "nvidia.com/gpu", "outcome": "ok"},
        )
        == 1
    )
    assert (
        metrics.get_sample_value(
            "nri_sla_device_plugin_devices", {"resource": "nvidia.com/gpu", "health": "Healthy"}
        )
        == 6
    )


def test_single_refuses_what_nvidia_refuses(tmp_path):
    mixed_layout = read(tmp_path / "a", mig_box_gpus())
    with pytest.raises(
        MigLayoutError,
        match=r"single needs every GPU in MIG mode or none; "
        r"MIG mode is on for GPU 0 and off for GPU 1 \(use mixed\)",
    ):
        build_tables(mixed_layout, "single", "nvidia.com/gpu")
    profiles = mig_box_gpus()[:1]
    with pytest.raises(
        MigLayoutError,
        match=r"MIG devices of one profile, found 1g\.10gb, "
        r"2g\.20gb, 3g\.40gb",
    ):
        build_tables(read(tmp_path / "b", profiles), "single", "nvidia.com/gpu")
    empty = [replace(single_box()[0], migs=[])]
    with pytest.raises(MigLayoutError, match="MIG mode is on for GPU 0 without MIG devices"):
        build_tables(read(tmp_path / "c", empty), "single", "nvidia.com/gpu")
    # none: the MIG GPU is left out, the other offered whole
    tables = build_tables(mixed_layout, "none", "nvidia.com/gpu")
    assert list(tables) == ["nvidia.com/gpu"] and list(tables["nvidia.com/gpu"].by_id) == [WHOLE]


def test_mig_devices_follow_their_gpu_and_never_leave_the_list(tmp_path):
    inventory = read(tmp_path, mig_box_gpus())
    before = build_tables(inventory, "mixed", "nvidia.com/gpu")
    lost = replace(
        inventory,
        gpus=(
            replace(inventory.gpus[0], health=unhealthy("NVML: the GPU is lost")),
            inventory.gpus[1],
        ),
    )
    after = build_tables(lost, "mixed", "nvidia.com/gpu", previous=before)
    assert after["nvidia.com/mig-1g.10gb"].unhealthy == {MIG[2], MIG[3]}
    assert not after["nvidia.com/gpu"].unhealthy
    # the MIG layout changed (no MIG devices now): the old ones stay listed, Unhealthy
    relaid = replace(
        inventory,
        gpus=(replace(inventory.gpus[0], mig_instances=()), inventory.gpus[1]),
    )
    again = build_tables(relaid, "mixed", "nvidia.com/gpu", previous=after)
    assert set(again["nvidia.com/mig-3g.40gb"].by_id) == {MIG[0]}
    assert again["nvidia.com/mig-3g.40gb"].unhealthy == {MIG[0]}


def test_mig_resource_names_as_nvidia_names_them():
    assert mig_resource("nvidia.com/gpu", "1g.10gb") == "nvidia.com/mig-1g.10gb"
    assert mig_resource("nvidia.com/gpu", "1g.10gb+me") == "nvidia.com/mig-1g.10gb.me"
    assert mig_resource("example.com/accel", "7g.80gb") == "example.com/mig-7g.80gb"
    assert mig_resource("nvidia.com/gpu", "1c.2g.20gb") is None  # compute slices differ
    assert mig_resource("nvidia.com/gpu", "unknown") is None
