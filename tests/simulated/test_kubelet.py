"""The simulated kubelet and NVIDIA device plugin: the books, PodResources, and for every
device-list strategy a created container that can open exactly its grant."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from nri_plugin.errors import InvalidInput
from nri_plugin.kubelet.pb import podresources_v1_pb2 as pr
from nri_plugin.simulated.cdi import CdiRegistry, load_dir, write_dir
from nri_plugin.simulated.cri import Cri
from nri_plugin.simulated.deviceplugin import (
    CDI_KINDS,
    STRATEGIES,
    DevicePlugin,
    nvidia_cdi_specs,
)
from nri_plugin.simulated.kubelet import AdmissionRefused, Kubelet, container_request
from nri_plugin.simulated.ocispec import NvidiaRuntime, openable_gpus, spec_from_request
from nri_plugin.simulated.runtime import RuntimeSimulator, make_pod
from nri_plugin.topology.snapshot import load_snapshot

REPO = Path(__file__).resolve().parents[2]
INVENTORY = load_snapshot(REPO / "examples" / "dgx-like.yaml").inventory
MIG_INVENTORY = load_snapshot(REPO / "examples" / "mig-box.yaml").inventory
CDI = CdiRegistry(nvidia_cdi_specs(INVENTORY))


def indexes(ids) -> set[int]:
    return {INVENTORY.find(i).index for i in ids}


def create(tmp_path: Path, strategy: str, count: int, *, env=()) -> tuple[set[int], set[int]]:
    """A pod admitted and its container created by the runtime (no NRI plugin): (its
    grant, what it can open)."""
    kubelet = Kubelet(DevicePlugin(INVENTORY, strategy), choose=lambda free, n: free[-n:])
    pod = make_pod("train", namespace="ml")
    grant = kubelet.admit(pod.uid, pod.namespace, pod.name, "c", count)
    sim = RuntimeSimulator(str(tmp_path / "nri.sock"), cdi=CDI)
    asyncio.run(Cri(sim).create_container(pod, container_request(pod, "c", grant, env=env)))
    [spec] = sim.state.specs.values()
    return indexes(grant.device_ids), set(openable_gpus(spec, INVENTORY))


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_every_strategy_opens_exactly_the_grant(tmp_path, strategy):
    granted, openable = create(tmp_path, strategy, 3)
    assert granted == {5, 6, 7} and openable == granted


@pytest.mark.parametrize("strategy", ["cdi-cri", "cdi-annotations"])
def test_the_cdi_spec_overrides_a_tenants_env(tmp_path, strategy):
    # nvidia-ctk's specs set NVIDIA_VISIBLE_DEVICES=void: the legacy runtime adds nothing.
    granted, openable = create(tmp_path, strategy, 1, env=("NVIDIA_VISIBLE_DEVICES=all",))
    assert openable == granted == {7}


def test_with_the_env_strategy_a_tenants_env_is_the_runtimes_leak(tmp_path):
    # No grant at all and NVIDIA_VISIBLE_DEVICES=all: the legacy runtime opens every GPU,
    # unless it is configured not to accept the env from unprivileged containers.
    pod = make_pod("sneaky", namespace="shop")
    kubelet = Kubelet(DevicePlugin(INVENTORY, "envvar"))
    grant = kubelet.admit(pod.uid, pod.namespace, pod.name, "c", 0)
    ctr = container_request(pod, "c", grant, env=("NVIDIA_VISIBLE_DEVICES=all",))
    spec = spec_from_request(ctr, CDI)
    assert openable_gpus(spec, INVENTORY) == set(range(8))
    assert openable_gpus(spec, INVENTORY, NvidiaRuntime(accept_env=False)) == set()


def test_the_books_free_a_pods_devices_and_pod_resources_reports_them():
    kubelet = Kubelet(DevicePlugin(INVENTORY))
    a, b = make_pod("a", namespace="ml"), make_pod("b", namespace="ml")
    first = kubelet.admit(a.uid, "ml", "a", "x", 6)
    assert kubelet.admit(a.uid, "ml", "a", "x", 6) == first  # admitted once
    with pytest.raises(AdmissionRefused, match="Requested: 3, Available: 2"):
        kubelet.admit(b.uid, "ml", "b", "y", 3)
    second = kubelet.admit(b.uid, "ml", "b", "y", 2)
    assert not set(first.device_ids) & set(second.device_ids)
    assert kubelet.admit(b.uid, "ml", "b", "sidecar", 0).device_ids == ()
    [pa, pb_] = kubelet.pod_resources()
    assert (pa.name, pa.namespace, pa.containers[0].name) == ("a", "ml", "x")
    assert list(pa.containers[0].devices) == [
        pr.ContainerDevices(resource_name="nvidia.com/gpu", device_ids=first.device_ids)
    ]
    assert [c.name for c in pb_.containers] == ["y"]
    kubelet.remove_pod(a.uid)
    assert kubelet.admit(b.uid, "ml", "b", "z", 6).device_ids == first.device_ids
    assert len(kubelet.allocated()) == 8


def test_the_plugin_advertises_whole_gpus_only_and_knows_its_ids():
    plugin = DevicePlugin(MIG_INVENTORY)
    assert plugin.device_ids() == ("GPU-a0000000-0000-0000-0000-000000000010",)
    with pytest.raises(InvalidInput, match="GPU-a0000000-0000-0000-0000-000000000000"):
        plugin.allocate(["GPU-a0000000-0000-0000-0000-000000000000"])


def test_the_cdi_specs_name_gpus_by_uuid_index_and_all_under_both_kinds(tmp_path):
    write_dir(tmp_path, nvidia_cdi_specs(INVENTORY))
    cdi = load_dir(tmp_path)  # the files round-trip: a real runtime can be given them
    assert cdi.kinds == tuple(sorted(CDI_KINDS))
    uuid = INVENTORY.gpus[2].uuid
    for kind in CDI_KINDS:
        edits = cdi.resolve([f"{kind}=2", f"{kind}={uuid}"])
        assert [n.path for e in edits for n in e.device_nodes] == [
            "/dev/nvidiactl",
            "/dev/nvidia-uvm",
            "/dev/nvidia2",
            "/dev/nvidia2",
        ]
        assert len(cdi.resolve([f"{kind}=all"])[1].device_nodes) == 8
