"""GPUs assigned by a device plugin (gpu.from: runtime): parse, align, never choose."""

import pytest

from nri_plugin.plan.placement_values import PlacementError
from nri_plugin.plan.placement_values import PlacementRequest as Req
from nri_plugin.plan.runtime_gpus import resolve_runtime_devices


def runtime(visible=None, cdi=(), owner="r", **kw):
    return Req(owner, from_runtime=True, visible_devices=visible, cdi_devices=tuple(cdi), **kw)


@pytest.mark.parametrize(("visible", "cdi", "expected"), [
    ("0,GPU-d0000000-0000-0000-0000-000000000005", (), [0, 5]),
    ("all", (), list(range(8))),
    ("ALL", (), list(range(8))),
    ("none", (), []),
    ("void", (), []),
    ("", (), []),
    (None, ("nvidia.com/gpu=3",), [3]),
    (None, ("nvidia.com/gpu=GPU-d0000000-0000-0000-0000-000000000006",
            "nvidia.com/gpu=7"), [6, 7]),
    (None, ("nvidia.com/gpu=all",), list(range(8))),
    (None, ("vendor.example/nic=0",), []),  # other vendors' CDI devices are ignored
    ("2, 2 ,0000:B7:00.0", (), [2, 6]),  # duplicates once, spaces and bus ids tolerated
])
def test_resolve(dgx_node, visible, cdi, expected):
    _, inv = dgx_node
    gpus, migs, unknown = resolve_runtime_devices(inv, visible, cdi)
    assert [g.index for g in gpus] == expected and migs == () and unknown == ()


def test_resolve_mig_names(mig_node):
    _, inv = mig_node
    m = inv.gpus[0].mig_instances
    gpus, migs, unknown = resolve_runtime_devices(inv, f"{m[1].uuid},0:3", ())
    assert [g.index for g in gpus] == [0] and migs == (m[1], m[3]) and unknown == ()
    gpus, migs, _ = resolve_runtime_devices(inv, None, ("nvidia.com/gpu=0:2",))
    assert migs == (m[2],)


def test_align_to_runtime_gpus(dgx, ids):
    p = dgx.allocate(runtime("4,5", exclusive_cpus=2))
    assert ids(p) == [4, 5] and p.mems == {1}
    assert p.exclusive_cpus == {15, 31}
    assert p.from_runtime and p.to_record()["runtime"] is True
    # the plugin will not hand these GPUs out itself
    assert 4 not in ids(dgx.allocate(Req("x", gpu_count=4, topology="nvlink")))


def test_runtime_nothing_visible_means_no_alignment(dgx):
    p = dgx.allocate(runtime("void"))
    assert p.gpus == () and p.cpus == frozenset() and p.mems == frozenset()


def test_runtime_single_mig(mig):
    p = mig.allocate(runtime("0:1"))
    assert p.mig is not None and p.mig.profile == "2g.20gb" and p.mems == {0}
    assert mig.allocate(Req("x", mig_profile="1g.10gb")).mig.index == 2


def test_unknown_runtime_device(dgx):
    with pytest.raises(PlacementError) as err:
        dgx.allocate(runtime("GPU-ffff"))
    assert err.value.field == "gpu.from"
    assert "'GPU-ffff' matches no GPU on this node" in str(err.value)
    p = dgx.allocate(runtime("GPU-ffff,1"), hard=False)
    assert [g.index for g in p.gpus] == [1] and "GPU-ffff" in p.warnings[0]


def test_runtime_double_booking_is_reported_not_refused(dgx):
    dgx.allocate(Req("x", gpu_count=1))  # GPU 0, chosen by nri-sla
    p = dgx.allocate(runtime("0"))
    assert p.warnings == ("GPU 0 given by the runtime is also held exclusively by x",)
    assert dgx.gpus_in_use() == {0: ("r", "x")}
