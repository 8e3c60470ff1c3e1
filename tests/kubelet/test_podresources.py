"""PodResourcesClient against a fake kubelet's PodResources server (both stub flavours)."""

from __future__ import annotations

import logging
import time

import pytest

from nri_plugin.errors import INTERNAL, SlaFailure
from nri_plugin.kubelet import podresources
from nri_plugin.kubelet.errors import KubeletApiError
from nri_plugin.kubelet.podresources import PodDevices, PodResourcesClient, granted_device_ids

GPU = "nvidia.com/gpu"
TRAINER = {
    "name": "trainer",
    "namespace": "ml",
    "containers": [
        {
            "name": "main",
            "devices": [
                {
                    "resource_name": GPU,
                    "device_ids": ["GPU-a", "GPU-b"],
                    "topology": {"nodes": [{"ID": 0}]},
                },
                {"resource_name": "nvidia.com/mig-1g.10gb", "device_ids": ["MIG-c"]},
                {"resource_name": "example.com/nic", "device_ids": ["nic0"]},
            ],
            "cpu_ids": [2, 3],
        },
        {"name": "sidecar"},
    ],
}
WEB = {"name": "web", "namespace": "default", "containers": [{"name": "nginx"}]}
CLAIM_CDI = "k8s.gpu.nvidia.com/claim=0b5e4c3a-1f2d-4e6b-9a8c-7d6e5f4a3b2c-gpu-0"


@pytest.fixture
def kubelet(make_kubelet):
    k = make_kubelet(podresources=True)
    k.command("set_pods", pods=[TRAINER, WEB])
    return k


@pytest.fixture
def client(sock_dir):
    with PodResourcesClient(str(sock_dir / "pod-resources.sock"), timeout=5) as c:
        yield c


def test_list_gives_every_pod_and_its_device_grants(kubelet, client):
    pods = client.list()
    assert pods == (
        PodDevices(
            "ml",
            "trainer",
            {
                "main": {
                    GPU: ("GPU-a", "GPU-b"),
                    "nvidia.com/mig-1g.10gb": ("MIG-c",),
                    "example.com/nic": ("nic0",),
                },
                "sidecar": {},
            },
        ),
        PodDevices("default", "web", {"nginx": {}}),
    )
    assert pods[0].devices("main")[GPU] == ("GPU-a", "GPU-b")
    assert pods[0].devices("nope") == {}


def test_get_one_pod_and_an_unknown_pod(kubelet, client):
    assert client.get("ml", "trainer").devices("main")[GPU] == ("GPU-a", "GPU-b")
    assert client.get("default", "web") == PodDevices("default", "web", {"nginx": {}})
    assert client.get("ml", "gone") is None


def test_get_falls_back_to_list_on_kubelets_without_get(kubelet, client):
    kubelet.command("set_pods", pods=[TRAINER], get_unimplemented=True)
    assert client.get("ml", "trainer").devices("main")[GPU] == ("GPU-a", "GPU-b")
    assert client._get_unimplemented  # later calls go straight to List
    assert client.get("ml", "other") is None


def test_get_falls_back_to_list_when_the_kubelet_has_get_disabled(kubelet, client):
    # KubeletPodResourcesGet off (kubelets 1.27 to 1.33): Get answers UNKNOWN
    kubelet.command("set_pods", pods=[TRAINER], get_disabled=True)
    assert client.get("ml", "trainer").devices("main")[GPU] == ("GPU-a", "GPU-b")
    assert client._get_unimplemented
    assert client.get("ml", "other") is None


def test_dra_claims_cdi_devices_are_read(kubelet, client):
    claimed = {
        "name": "infer",
        "namespace": "ml",
        "containers": [
            {
                "name": "main",
                "dynamic_resources": [
                    {
                        "claim_name": "gpu",
                        "claim_namespace": "ml",
                        "claim_resources": [
                            {
                                "driver_name": "gpu.nvidia.com",
                                "pool_name": "node-1",
                                "device_name": "gpu-0",
                                "cdi_devices": [
                                    {"name": "k8s.gpu.nvidia.com/device=gpu-0"},
                                    {"name": CLAIM_CDI},
                                ],
                            }
                        ],
                    }
                ],
            },
            {"name": "sidecar"},
        ],
    }
    kubelet.command("set_pods", pods=[claimed])
    pod = client.get("ml", "infer")
    assert pod.claim_devices("main") == ("k8s.gpu.nvidia.com/device=gpu-0", CLAIM_CDI)
    assert pod.claim_devices("sidecar") == () and pod.devices("main") == {}
    assert client.list() == (pod,)


def test_an_oversized_pod_is_left_out_of_the_list_with_one_warning(kubelet, client, caplog):
    huge = {
        "name": "huge",
        "namespace": "batch",
        "containers": [{"name": f"c{i}"} for i in range(1_001)],
    }
    kubelet.command("set_pods", pods=[TRAINER, huge, WEB])
    caplog.set_level(logging.WARNING, logger="nri_sla.kubelet")
    for _ in range(2):
        assert [p.name for p in client.list()] == ["trainer", "web"]
    warnings = [r for r in caplog.records if "left out of the List" in r.getMessage()]
    assert len(warnings) == 1
    assert "pod batch/huge: 1001 containers, more than 1000" in warnings[0].fields["error"]
    assert client.get("ml", "trainer").devices("main")[GPU] == ("GPU-a", "GPU-b")


def test_missing_socket_is_one_clear_internal_failure(sock_dir):
    path = sock_dir / "absent.sock"
    with PodResourcesClient(str(path), timeout=1) as c, pytest.raises(KubeletApiError) as err:
        c.list()
    assert isinstance(err.value, SlaFailure) and err.value.kind == INTERNAL
    assert str(err.value) == (
        f"kubelet PodResources API at {path}: the socket does not exist "
        "(is the kubelet running, and is its pod-resources directory "
        "mounted here?)"
    )


def test_timeout_names_the_call(sock_dir):
    # a socket that accepts connections but never speaks HTTP/2
    import socket

    path = sock_dir / "mute.sock"
    mute = socket.socket(socket.AF_UNIX)
    mute.bind(str(path))
    mute.listen()
    try:
        started = time.monotonic()
        with (
            PodResourcesClient(str(path), timeout=0.5) as c,
            pytest.raises(KubeletApiError, match=r"List: no answer within 0.5s"),
        ):
            c.list()
        assert time.monotonic() - started < 5
    finally:
        mute.close()


def test_answers_over_the_bounds_are_refused(kubelet, client, monkeypatch):
    many = {
        "name": "big",
        "namespace": "ml",
        "containers": [
            {
                "name": "c",
                "devices": [{"resource_name": GPU, "device_ids": [f"GPU-{i}" for i in range(20)]}],
            }
        ],
    }
    kubelet.command("set_pods", pods=[many])
    monkeypatch.setattr(podresources, "MAX_DEVICES", 16)
    with pytest.raises(KubeletApiError, match=r"pod ml/big container c: more than 16 devices"):
        client.get("ml", "big")
    assert client.list() == ()  # left out of a List (the rest kept: see below)
    monkeypatch.setattr(podresources, "MAX_CONTAINERS", 0)
    with pytest.raises(KubeletApiError, match=r"pod ml/big: 1 containers, more than 0"):
        client.get("ml", "big")
    long_id = {
        "name": "p",
        "namespace": "ml",
        "containers": [
            {"name": "c", "devices": [{"resource_name": GPU, "device_ids": ["x" * 300]}]}
        ],
    }
    kubelet.command("set_pods", pods=[long_id])
    monkeypatch.setattr(podresources, "MAX_CONTAINERS", 10)
    with pytest.raises(KubeletApiError, match=r"longer than 256 characters: x{64}\.\.\.$"):
        client.get("ml", "p")


def test_message_size_is_bounded(kubelet, sock_dir, monkeypatch):
    pods = [
        {
            "name": f"p{i}",
            "namespace": "ns",
            "containers": [
                {
                    "name": "c",
                    "devices": [{"resource_name": GPU, "device_ids": ["GPU-" + "x" * 60]}],
                }
            ],
        }
        for i in range(400)
    ]
    kubelet.command("set_pods", pods=pods)
    monkeypatch.setattr(podresources, "MAX_MESSAGE_BYTES", 4096)
    with (
        PodResourcesClient(str(sock_dir / "pod-resources.sock"), timeout=5) as c,
        pytest.raises(KubeletApiError, match=r"List: the answer is larger than 4096 bytes"),
    ):
        c.list()


@pytest.mark.parametrize(
    ("patterns", "expected"),
    [
        ([GPU], ("GPU-a", "GPU-b")),
        ([GPU, "nvidia.com/mig-*"], ("GPU-a", "GPU-b", "MIG-c")),
        (["nvidia.com/*"], ("GPU-a", "GPU-b", "MIG-c")),
        (["*"], ("nic0", "GPU-a", "GPU-b", "MIG-c")),
        (["nvidia.com/GPU"], ()),  # resource names are case-sensitive
        ([], ()),
    ],
)
def test_granted_device_ids_filters_by_resource_patterns(patterns, expected):
    resources = {
        GPU: ("GPU-a", "GPU-b"),
        "nvidia.com/mig-1g.10gb": ("MIG-c",),
        "example.com/nic": ("nic0",),
    }
    assert granted_device_ids(resources, patterns) == expected


def test_granted_device_ids_once_each():
    assert granted_device_ids({"a/x": ("1", "2"), "a/y": ("2", "3")}, ["a/*"]) == ("1", "2", "3")
