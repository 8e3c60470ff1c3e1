"""GPU grants: read only from what the runtime wrote (resolve_grant), then verified
against the SLA's gpu section and aligned to, never chosen or replaced."""

import pytest

from nri_plugin.granted import (
    MAX_GRANT_ITEMS,
    MAX_GRANT_NAME,
    GrantedResources,
    device_mount_ids,
    gpu_device_numbers,
)
from nri_plugin.plan.errors import PlacementError
from nri_plugin.plan.runtime_gpus import resolve_grant
from tests.support.grant_helpers import gpu_ids, granted

KINDS = ("nvidia.com/gpu", "nvidia.com/mig", "k8s.device-plugin.nvidia.com/gpu")
UUID5 = "GPU-d0000000-0000-0000-0000-000000000005"


def indexes(inv, evidence, extra=()):
    grant = resolve_grant(inv, GrantedResources(**evidence), KINDS, extra)
    return [g.index for g in grant.gpus], grant


@pytest.mark.parametrize(
    ("evidence", "expected"),
    [
        ({"cdi_devices": ("nvidia.com/gpu=3",)}, [3]),
        (
            {"cdi_devices": (f"nvidia.com/gpu={UUID5}", "k8s.device-plugin.nvidia.com/gpu=7")},
            [5, 7],
        ),
        ({"cdi_devices": ("nvidia.com/gpu=all",)}, list(range(8))),
        ({"cdi_devices": ("vendor.example/nic=0",)}, []),  # a kind not configured
        ({"cdi_devices": ("k8s.device-plugin.nvidia.com/mig=0",)}, []),  # not in KINDS here
        ({"gpu_devices": ((195, 2), (195, 255), (195, 254), (10, 3))}, [2]),
        ({"device_mounts": ("1", UUID5)}, [1, 5]),
        ({"env_gpus": "0,1,2,3,4,5,6,7"}, []),  # an env is never a grant
        ({"env_gpus": "all", "cdi_devices": ("nvidia.com/gpu=4",)}, [4]),
    ],
)
def test_grant_evidence(dgx_node, evidence, expected):
    got, grant = indexes(dgx_node[1], evidence)
    assert got == expected and grant.migs == () and grant.unknown == ()


@pytest.mark.parametrize(
    "evidence",
    [
        {},
        {"cdi_devices": ("vendor.example/nic=0",)},
        {"gpu_devices": ((10, 3),)},
        {"device_mounts": ("1",)},
        {"env_gpus": ""},
    ],
)
def test_gpu_evidence_says_when_a_grant_needs_resolving(dgx_node, evidence):
    """The plugin resolves a grant only for a container with GPU evidence: any kind,
    even one that names no GPU (an empty env is still the env's word)."""
    resources = GrantedResources(cpu_shares=1024, **evidence)
    assert resources.gpu_evidence == bool(evidence)
    if not evidence:
        assert resolve_grant(dgx_node[1], resources, KINDS).empty


def test_an_env_alone_is_reported_as_no_grant(dgx_node):
    _, grant = indexes(dgx_node[1], {"env_gpus": " 0,1 "})
    assert grant.empty and grant.env_only == "0,1"
    for env in ("void", "none", ""):
        assert indexes(dgx_node[1], {"env_gpus": env})[1].env_only is None


def test_kubelet_device_ids_are_evidence(dgx_node):
    assert indexes(dgx_node[1], {}, extra=("6", UUID5))[0] == [5, 6]


def test_unknown_names_are_kept_once(dgx_node):
    _, grant = indexes(dgx_node[1], {"cdi_devices": ("nvidia.com/gpu=GPU-ffff",) * 3})
    assert grant.unknown == ("GPU-ffff",) and grant.empty


def test_mig_names(mig_node):
    inv = mig_node[1]
    m = inv.gpus[0].mig_instances
    grant = resolve_grant(
        inv,
        GrantedResources(cdi_devices=(f"nvidia.com/mig={m[1].uuid}", "nvidia.com/gpu=0:3")),
        KINDS,
    )
    assert grant.gpus == () and [mig for _, mig in grant.migs] == [m[1], m[3]]
    assert {parent.index for parent, _ in grant.migs} == {0}


def test_evidence_is_bounded_before_it_is_read():
    many = [f"nvidia.com/gpu={i}" for i in range(MAX_GRANT_ITEMS * 4)]
    assert len(GrantedResources(cdi_devices=many).cdi_devices) == MAX_GRANT_ITEMS
    assert len(GrantedResources(cdi_devices=["x" * 10_000]).cdi_devices[0]) == MAX_GRANT_NAME
    devices = [(f"/dev/nvidia{i}", "c", 195, i) for i in range(MAX_GRANT_ITEMS * 4)]
    assert len(gpu_device_numbers(iter(devices))[0]) == MAX_GRANT_ITEMS
    mounts = [
        (f"/var/run/nvidia-container-devices/{i}", "/dev/null") for i in range(MAX_GRANT_ITEMS * 4)
    ]
    assert len(device_mount_ids(iter(mounts))) == MAX_GRANT_ITEMS
    assert device_mount_ids(
        [
            ("/var/run/nvidia-container-devices/GPU-1/", "/dev/null"),
            ("/etc/x", "/dev/null"),
            ("/var/run/nvidia-container-devices/", "/dev/null"),
        ]
    ) == ("GPU-1",)


# -- the allocator: the grant held, verified and aligned to --------------------------------


def test_align_to_granted_gpus(dgx):
    p = dgx.allocate(granted(dgx, "r", 4, 5, exclusive_cpus=2))
    assert gpu_ids(p) == [4, 5] and p.mems == {1}
    assert p.exclusive_cpus == {15, 31}
    assert p.to_record() == {
        "gpus": [p.gpus[0].ref, p.gpus[1].ref],
        "exclusive": "15,31",
        "cpus": "15,31",
        "mems": "1",
        "aligned": True,
    }


def test_no_grant_means_no_alignment(dgx):
    p = dgx.allocate(granted(dgx, "r"))
    assert p.gpus == () and p.cpus == frozenset() and p.mems == frozenset()


def test_granted_mig_device(mig):
    p = mig.allocate(granted(mig, "r", migs=("0:1",), mig_profile="2g.20gb"))
    assert [m.profile for _, m in p.migs] == ["2g.20gb"] and p.mems == {0}
    assert p.to_record()["migs"] == [p.migs[0][1].uuid]
    with pytest.raises(PlacementError) as err:
        mig.allocate(granted(mig, "x", migs=("0:1",), mig_profile="1g.10gb"))
    assert err.value.field == "gpu.mig"


@pytest.mark.parametrize(
    ("grant", "sla", "field", "text"),
    [
        ((0, 7), {"gpu_count": 3}, "gpu.count", "asks for 3 whole GPUs; the grant has 2"),
        ((0, 7), {"topology": "numa"}, "gpu.topology", "are not all on one NUMA node"),
        ((1, 6), {"topology": "nvlink"}, "gpu.topology", "not connected to each other over NVLink"),
        ((0,), {"gpu_ids": ("3",)}, "gpu.ids", "GPU 3 is not granted to this container"),
        ((0,), {"gpu_ids": ("GPU-nope",)}, "gpu.ids", "'GPU-nope' names no GPU on this node"),
    ],
)
def test_a_grant_short_of_the_sla(dgx, grant, sla, field, text):
    with pytest.raises(PlacementError) as err:
        dgx.allocate(granted(dgx, "r", *grant, **sla))
    assert err.value.field == field and text in str(err.value)
    # only this container's devices are named: its grant, by index and UUID
    assert "granted: GPU " in str(err.value) and dgx.gpus_in_use() == {}
    soft = dgx.allocate(granted(dgx, "r", *grant, **sla), hard=False)
    assert [g.index for g in soft.gpus] == list(grant) and text in soft.warnings[0]


def test_a_grant_that_meets_the_sla(dgx):
    p = dgx.allocate(
        granted(
            dgx,
            "r",
            0,
            1,
            2,
            3,
            gpu_count=4,
            topology="nvlink",
            gpu_ids=("0", "GPU-d0000000-0000-0000-0000-000000000003"),
        )
    )
    assert gpu_ids(p) == [0, 1, 2, 3] and p.warnings == ()


def test_two_holders_of_one_gpu_are_both_recorded_never_refused(dgx):
    """The kubelet's doing (or an old record's): both can open it, so both hold it."""
    dgx.allocate(granted(dgx, "a", 0, wants_gpu=False))
    p = dgx.allocate(granted(dgx, "b", 0, exclusive_cpus=2))
    assert p.warnings == () and dgx.gpus_in_use() == {0: ("a", "b")}


DRA = ("k8s.gpu.nvidia.com/device", "k8s.gpu.nvidia.com/claim")
CLAIM = "0b5e4c3a-1f2d-4e6b-9a8c-7d6e5f4a3b2c"


def test_replica_ids_are_their_device_shared_by_design(dgx_node, mig_node):
    _, grant = indexes(dgx_node[1], {}, extra=(f"{UUID5}::3", f"{UUID5}::0", "6::1"))
    assert [g.index for g in grant.gpus] == [5, 6] and grant.unknown == ()
    assert grant.replicas == {g.identity for g in grant.gpus}
    # granted whole as well: not a replica any more; a suffix that is no number: a name
    _, grant = indexes(
        dgx_node[1], {"cdi_devices": ("nvidia.com/gpu=6",)}, extra=("6::1", f"{UUID5}::x")
    )
    assert [g.index for g in grant.gpus] == [6] and grant.replicas == frozenset()
    assert grant.unknown == (f"{UUID5}::x",)
    mig = mig_node[1].gpus[0].mig_instances[2]
    grant = resolve_grant(mig_node[1], GrantedResources(), KINDS, (f"{mig.uuid}::2",))
    assert [m for _, m in grant.migs] == [mig] and grant.replicas == {mig.uuid}


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("k8s.gpu.nvidia.com/device=gpu-3", [3]),
        (f"k8s.gpu.nvidia.com/claim={CLAIM}-gpu-7", [7]),
        ("k8s.gpu.nvidia.com/device=gpu-8", "gpu-8"),  # no such minor here
        # not the driver's GPU names: no CUDA device (passthrough, IMEX), or not its form
        ("k8s.gpu.nvidia.com/device=gpu-vfio-0", []),
        ("k8s.gpu.nvidia.com/device=imex-channel-0", []),
        ("k8s.gpu.nvidia.com/device=GPU-3", []),
        (f"k8s.gpu.nvidia.com/claim=x{CLAIM}-gpu-1", []),
    ],
)
def test_dra_names(dgx_node, name, expected):
    grant = resolve_grant(dgx_node[1], GrantedResources(cdi_devices=(name,)), KINDS + DRA)
    if isinstance(expected, str):
        assert grant.empty and grant.unknown == (expected,)
    else:
        assert [g.index for g in grant.gpus] == expected and grant.unknown == ()


def test_dra_mig_names_and_access_nodes(mig_node):
    inv = mig_node[1]
    m = inv.gpus[0].mig_instances

    def grant(name, caps=()):
        return resolve_grant(
            inv,
            GrantedResources(cdi_devices=(f"k8s.gpu.nvidia.com/device={name}",), caps_minors=caps),
            DRA,
        )

    assert [x for _, x in grant("gpu-0-mig-2g20gb-3-2").migs] == [m[1]]
    # two 1g.10gb devices: the one whose access nodes the container has
    assert [x for _, x in grant("gpu-0-mig-1g10gb-9-6", m[3].caps_minors).migs] == [m[3]]
    ambiguous = grant("gpu-0-mig-1g10gb-9-6")
    assert ambiguous.empty and ambiguous.unknown == ("gpu-0-mig-1g10gb-9-6",)


def test_mig_access_nodes(mig_node):
    inv = mig_node[1]
    m = inv.gpus[0].mig_instances

    def grant(caps, **more):
        return resolve_grant(
            inv, GrantedResources(gpu_devices=((195, 0), (195, 1)), caps_minors=caps, **more), KINDS
        )

    both = grant((*m[0].caps_minors, *m[2].caps_minors, 1, 2))  # config, monitor: no MIG
    assert [x for _, x in both.migs] == [m[0], m[2]]
    assert [g.index for g in both.gpus] == [1]  # GPU 0's node is the way to its MIGs
    half = grant(m[0].caps_minors[:1])
    assert half.migs == () and [g.index for g in half.gpus] == [0, 1]
    system = grant(m[0].caps_minors, all_devices=True)
    assert system.empty and system.system
