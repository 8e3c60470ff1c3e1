"""`nri-sla device-plugin` against a fake kubelet (both stub flavours): registration,
ListAndWatch with health and inventory changes, Allocate in the three injection modes,
GetPreferredAllocation on a DGX-like box, kubelet restarts, bad requests."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from nri_plugin.kubelet.deviceplugin import GpuDevicePlugin, PluginSettings
from nri_plugin.simulated.hardware import FakeNvml, build_sysfs, dgx_like_gpus, dgx_like_pci
from nri_plugin.topology.gpu_health import unknown
from nri_plugin.topology.gpus import GpuInventory
from nri_plugin.topology.health_monitor import GpuHealthMonitor
from nri_plugin.topology.inventory import InventoryReader
from nri_plugin.topology.snapshot import load_snapshot
from nri_plugin.topology.watched import WatchedInventory
from nri_plugin.value import replace

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
DGX = load_snapshot(EXAMPLES / "dgx-like.yaml").inventory
UUID = [g.uuid for g in DGX.gpus]  # GPU index -> device id
PEERS = {g.uuid: {UUID[p] for p in g.nvlink_peers} for g in DGX.gpus}
PUBLISHED_FILES = ["deviceplugin/v1beta1/api.proto", "podresources/v1/api.proto"]


@pytest.fixture
def dev_root(tmp_path):
    """Fake GPU device nodes: links to /dev/null, a character device anyone may stat."""
    root = tmp_path / "dev"
    root.mkdir()
    for name in [*(f"nvidia{i}" for i in range(8)), "nvidiactl", "nvidia-uvm"]:
        (root / name).symlink_to("/dev/null")
    return root


class Running:
    """A GpuDevicePlugin whose run() loop is in a thread, as the command runs it."""

    def __init__(self, settings: PluginSettings, inventory: GpuInventory) -> None:
        self.plugin = GpuDevicePlugin(settings, inventory)
        self.thread = threading.Thread(target=self.plugin.run, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.plugin.stop()
        self.thread.join(10)
        assert not self.thread.is_alive()


@pytest.fixture
def start_plugin(sock_dir, dev_root):
    running: list[Running] = []

    def start(injection: str = "cdi", inventory: GpuInventory = DGX) -> Running:
        settings = PluginSettings(
            socket_dir=sock_dir,
            injection=injection,
            dev_root=dev_root,
            watch_interval=0.1,
            register_timeout=2,
        )
        running.append(Running(settings, inventory))
        return running[-1]

    yield start
    for r in running:
        r.stop()


@pytest.fixture
def registered(make_kubelet, start_plugin):
    """(kubelet, plugin) once the plugin has registered and sent its first list."""

    def start(injection: str = "cdi", inventory: GpuInventory = DGX):
        kubelet = make_kubelet()
        plugin = start_plugin(injection, inventory)
        kubelet.registration()
        return kubelet, plugin

    return start


def _next_devices(kubelet) -> dict[str, tuple[str, list[int]]]:
    """The next device list, past the end of a stream a kubelet restart closed."""
    listed = kubelet.next_list()
    while "stream_ended" in listed:
        listed = kubelet.next_list()
    return _devices(listed)


def _devices(listed: dict) -> dict[str, tuple[str, list[int]]]:
    return {
        d["ID"]: (d["health"], [int(n.get("ID", 0)) for n in d["topology"]["nodes"]])
        for d in listed["devices"]
    }


def test_registers_as_the_kubelet_expects(make_kubelet, start_plugin, stubs, sock_dir):
    kubelet = make_kubelet()
    if stubs.flavour == "published":
        assert kubelet.hello["files"] == PUBLISHED_FILES  # really the kubelet's protos
    start_plugin()
    assert kubelet.registration() == {
        "version": "v1beta1",
        "endpoint": "nri-sla-gpu.sock",
        "resource_name": "nvidia.com/gpu",
        "options": {"get_preferred_allocation_available": True},
    }
    assert (sock_dir / "nri-sla-gpu.sock").is_socket()
    kubelet.next_list()
    assert kubelet.command("options")["options"] == {"get_preferred_allocation_available": True}


def test_list_and_watch_sends_every_gpu_then_each_change(registered):
    kubelet, running = registered()
    first = _devices(kubelet.next_list())
    assert first == {u: ("Healthy", [0 if i < 4 else 1]) for i, u in enumerate(UUID)}
    running.plugin.update(health={UUID[3]: False})
    assert _devices(kubelet.next_list())[UUID[3]] == ("Unhealthy", [0])
    running.plugin.update(health={UUID[3]: False})  # no change: nothing is sent
    running.plugin.update(health={UUID[3]: True})
    assert _devices(kubelet.next_list())[UUID[3]] == ("Healthy", [0])
    fewer = replace(DGX, gpus=DGX.gpus[:7])
    running.plugin.update(inventory=fewer)
    # a GPU a read no longer shows stays listed, Unhealthy: never a shorter list
    listed = _devices(kubelet.next_list())
    assert set(listed) == set(UUID) and listed[UUID[7]] == ("Unhealthy", [1])
    with pytest.raises(AssertionError, match="timed out"):
        kubelet.next_list(timeout=0.5)


def test_mig_gpus_are_not_advertised_whole(registered):
    mig_box = load_snapshot(EXAMPLES / "mig-box.yaml").inventory
    kubelet, _ = registered(inventory=mig_box)
    assert [g.mig_enabled for g in mig_box.gpus] == [True, False]
    assert set(_devices(kubelet.next_list())) == {mig_box.gpus[1].uuid}


def _needs_cdi_field(kubelet) -> None:
    if "cdi_devices" not in kubelet.hello["allocate_fields"]:
        pytest.skip(
            "these kubelet protos have no ContainerAllocateResponse.cdi_devices "
            "(kubelets before 1.28 drop CDI names: use gpu.injection env or devices "
            "there); point NRI_SLA_KUBELET_PROTOS at a newer kubelet"
        )


def test_allocate_cdi_gives_cdi_names_only(registered):
    kubelet, _ = registered("cdi")
    _needs_cdi_field(kubelet)
    answer = kubelet.call(
        "Allocate",
        {"container_requests": [{"devices_ids": [UUID[1], UUID[0]]}, {"devices_ids": [UUID[5]]}]},
    )
    assert answer == {
        "response": {
            "container_responses": [
                {
                    "cdi_devices": [
                        {"name": f"nvidia.com/gpu={UUID[1]}"},
                        {"name": f"nvidia.com/gpu={UUID[0]}"},
                    ]
                },
                {"cdi_devices": [{"name": f"nvidia.com/gpu={UUID[5]}"}]},
            ]
        }
    }


def test_allocate_env_gives_the_variable_only(registered):
    kubelet, _ = registered("env")
    answer = kubelet.call("Allocate", {"container_requests": [{"devices_ids": UUID[2:4]}]})
    assert answer == {
        "response": {
            "container_responses": [{"envs": {"NVIDIA_VISIBLE_DEVICES": f"{UUID[2]},{UUID[3]}"}}]
        }
    }


def test_allocate_devices_gives_nodes_by_minor_and_the_variable(registered, dev_root):
    kubelet, _ = registered("devices")
    answer = kubelet.call("Allocate", {"container_requests": [{"devices_ids": [UUID[6]]}]})
    (response,) = answer["response"]["container_responses"]
    assert response["envs"] == {"NVIDIA_VISIBLE_DEVICES": UUID[6]}
    # nvidia-uvm-tools is absent from this host: not passed
    assert response["devices"] == [
        {"container_path": f"/dev/{n}", "host_path": str(dev_root / n), "permissions": "rw"}
        for n in ("nvidia6", "nvidiactl", "nvidia-uvm")
    ]
    assert "cdi_devices" not in response and "mounts" not in response
    (dev_root / "nvidia-uvm").unlink()
    refused = kubelet.call("Allocate", {"container_requests": [{"devices_ids": [UUID[6]]}]})
    assert refused["code"] == "FAILED_PRECONDITION"
    assert f"device node {dev_root}/nvidia-uvm does not exist" in refused["details"]


def test_inventory_without_uuids_uses_pci_bus_ids(registered):
    no_uuid = replace(DGX, gpus=tuple(replace(g, uuid="") for g in DGX.gpus[:2]))
    kubelet, _ = registered("cdi", no_uuid)
    _needs_cdi_field(kubelet)
    assert set(_devices(kubelet.next_list())) == {"0000:07:00.0", "0000:0f:00.0"}
    answer = kubelet.call("Allocate", {"container_requests": [{"devices_ids": ["0000:0f:00.0"]}]})
    assert answer["response"]["container_responses"] == [
        {"cdi_devices": [{"name": "nvidia.com/gpu=1"}]}
    ]


def _preferred(kubelet, available, size, must=()):
    answer = kubelet.call(
        "GetPreferredAllocation",
        {
            "container_requests": [
                {
                    "available_deviceIDs": list(available),
                    "must_include_deviceIDs": list(must),
                    "allocation_size": size,
                }
            ]
        },
    )
    return answer["response"]["container_responses"][0]["deviceIDs"]


def test_preferred_allocation_is_nvlink_aware(registered):
    kubelet, _ = registered()
    pair = _preferred(kubelet, UUID, 2)
    assert len(pair) == 2 and pair[1] in PEERS[pair[0]]
    quad = _preferred(kubelet, UUID, 4)
    assert all(b in PEERS[a] for a in quad for b in quad if a != b)  # a fully linked quad
    # GPU 0 has no NVLink peer among 5, 6, 7: the answer is a linked pair of those
    pair = _preferred(kubelet, [UUID[i] for i in (0, 5, 6, 7)], 2)
    assert UUID[0] not in pair and pair[1] in PEERS[pair[0]]
    # pinned GPU 4: its partner is one of its NVLink peers
    pinned = _preferred(kubelet, [UUID[i] for i in (2, 4, 5, 3)], 2, must=[UUID[4]])
    assert UUID[4] in pinned and (set(pinned) - {UUID[4]}) <= PEERS[UUID[4]]
    assert sorted(_preferred(kubelet, UUID, 8)) == sorted(UUID)


@pytest.mark.parametrize(
    ("method", "request_", "details"),
    [
        (
            "Allocate",
            {"container_requests": [{"devices_ids": ["GPU-nope"]}]},
            "Allocate: devices_ids: unknown device id 'GPU-nope' (not one of the 8 nvidia.com/gpu "
            "devices nri-sla advertises)",
        ),
        ("Allocate", {"container_requests": [{}]}, "Allocate: devices_ids is empty"),
        (
            "Allocate",
            {"container_requests": [{"devices_ids": [UUID[0], UUID[0]]}]},
            f"Allocate: devices_ids: device id '{UUID[0]}' given twice",
        ),
        (
            "Allocate",
            {"container_requests": [{"devices_ids": ["x" * 100]}]},
            f"Allocate: devices_ids: unknown device id '{'x' * 63}...' (not one of",
        ),
        (
            "Allocate",
            {"container_requests": [{"devices_ids": UUID[:1] * 300}]},
            "Allocate: 300 devices_ids, more than the 256 nri-sla accepts",
        ),
        (
            "GetPreferredAllocation",
            {"container_requests": [{"available_deviceIDs": UUID[:2], "allocation_size": 3}]},
            "GetPreferredAllocation: allocation_size 3 must be from 0 (must_include_deviceIDs) "
            "to 2 (available_deviceIDs)",
        ),
        (
            "GetPreferredAllocation",
            {
                "container_requests": [
                    {
                        "available_deviceIDs": UUID[:2],
                        "must_include_deviceIDs": [UUID[5]],
                        "allocation_size": 2,
                    }
                ]
            },
            f"GetPreferredAllocation: must_include_deviceIDs {UUID[5]} not among "
            "available_deviceIDs",
        ),
        (
            "GetPreferredAllocation",
            {"container_requests": [{"allocation_size": 1}]},
            "GetPreferredAllocation: available_deviceIDs is empty",
        ),
    ],
)
def test_bad_requests_are_invalid_argument(registered, method, request_, details):
    kubelet, _ = registered()
    answer = kubelet.call(method, request_)
    assert answer["code"] == "INVALID_ARGUMENT"
    assert answer["details"].startswith(details)
    # the plugin still answers good requests afterwards
    assert "response" in kubelet.call(
        "Allocate", {"container_requests": [{"devices_ids": [UUID[0]]}]}
    )


def test_kubelet_restart_gets_a_new_registration(registered, sock_dir):
    kubelet, running = registered()
    kubelet.next_list()
    kubelet.command("restart")  # wipes the plugin's socket, serves kubelet.sock anew
    assert kubelet.registration(timeout=10)["resource_name"] == "nvidia.com/gpu"
    assert set(_next_devices(kubelet)) == set(UUID)  # the new stream lists every GPU
    assert (sock_dir / "nri-sla-gpu.sock").is_socket()
    running.plugin.update(health={UUID[0]: False})
    assert _next_devices(kubelet)[UUID[0]][0] == "Unhealthy"
    assert "response" in kubelet.call(
        "Allocate", {"container_requests": [{"devices_ids": [UUID[1]]}]}
    )


def test_plugin_started_before_the_kubelet_registers_once_it_is_up(make_kubelet, start_plugin):
    start_plugin()
    time.sleep(0.5)  # no kubelet.sock yet: registration is retried
    kubelet = make_kubelet()
    assert kubelet.registration(timeout=15)["version"] == "v1beta1"


def test_stop_removes_the_socket(registered, sock_dir):
    _, running = registered()
    running.stop()
    assert not (sock_dir / "nri-sla-gpu.sock").exists()


def test_gpus_the_inventory_marks_unhealthy_or_mig_unknown(registered):
    """The inventory's own health (NVML could not read a GPU, or it was lost) shows as
    Unhealthy; so does a GPU whose MIG mode NVML cannot tell (listed, never handed out)."""
    gpus = list(DGX.gpus)
    gpus[1] = replace(gpus[1], health=unknown("NVML: GPU 1 unreadable"))
    gpus[2] = replace(gpus[2], mig_unknown=True)
    kubelet, _ = registered(inventory=replace(DGX, gpus=tuple(gpus)))
    listed = _devices(kubelet.next_list())
    assert listed[UUID[1]][0] == "Unhealthy" and listed[UUID[2]][0] == "Unhealthy"
    assert all(listed[u][0] == "Healthy" for i, u in enumerate(UUID) if i not in (1, 2))


def test_an_xid_reaches_list_and_watch(registered, tmp_path):
    """A critical XID heard by the health thread (follow_health, as the command runs it)
    turns the GPU Unhealthy in the kubelet's list; an application XID does not."""
    nvml = FakeNvml(dgx_like_gpus())
    sysfs = build_sysfs(tmp_path / "sys", nodes=2, cores_per_node=8, threads=2, pci=dgx_like_pci())
    gpus = WatchedInventory(
        InventoryReader("nvml", sysfs_root=sysfs, nvml=nvml), GpuHealthMonitor(nvml)
    )
    inventory = gpus.read()
    kubelet, running = registered(inventory=inventory)
    ids = [g.uuid for g in inventory.gpus]
    assert {h for h, _ in _devices(kubelet.next_list()).values()} == {"Healthy"}
    follower = threading.Thread(target=running.plugin.follow_health, args=(gpus, 0.05), daemon=True)
    follower.start()
    nvml.queue_xid(nvml.gpus[6], 31)  # the application's fault: no new list
    with pytest.raises(AssertionError, match="timed out"):
        kubelet.next_list(timeout=0.5)
    nvml.queue_xid(nvml.gpus[6], 79)  # fallen off the bus
    listed = _devices(kubelet.next_list())
    assert [i for i, u in enumerate(ids) if listed[u][0] == "Unhealthy"] == [6]
    running.stop()
    follower.join(5)
    assert not follower.is_alive()
