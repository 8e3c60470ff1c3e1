"""Which GPUs a request gets, on fresh fake nodes and after a few allocations."""

import re

import pytest

from nri_plugin.plan.allocator import Allocator
from nri_plugin.plan.placement_values import PlacementError
from nri_plugin.plan.placement_values import PlacementRequest as Req


def R(count=None, topology="any", **kw):  # reads like a table row
    return Req(kw.pop("owner", "c"), gpu_count=count, topology=topology, **kw)


@pytest.mark.parametrize(("request_", "expected"), [
    (R(1), [0]),
    (R(2), [0, 1]),
    (R(4, "nvlink"), [0, 1, 2, 3]),
    (R(4, "numa"), [0, 1, 2, 3]),
    (R(3, "nvlink"), [0, 1, 2]),
    (R(5), [0, 1, 2, 3, 4]),  # spans nodes: fewest nodes, fullest first
    (R(8), list(range(8))),
    (R(2, "nvlink", numa_nodes=(1,)), [4, 5]),
    (R(1, numa_nodes=(1,)), [4]),
    (R(0), []),
    (R(None), []),
])
def test_dgx_fresh(dgx, ids, request_, expected):
    assert ids(dgx.allocate(request_)) == expected


@pytest.mark.parametrize(("request_", "message"), [
    (R(9, "nvlink"), "requested 9 NVLink-connected GPUs; free: GPU 0, 1, 2, 3 (NUMA 0), "
                     "GPU 4, 5, 6, 7 (NUMA 1)"),
    (R(5, "numa"), "requested 5 GPUs on one NUMA node; free: GPU 0, 1, 2, 3 (NUMA 0)"),
    (R(9), "requested 9 GPUs; free: GPU 0"),
    (R(3, numa_nodes=(1,), topology="nvlink", shared_gpus=True),
     None),  # fits: shown for contrast
])
def test_dgx_impossible_requests_say_what_is_free(dgx, request_, message):
    if message is None:
        assert len(dgx.allocate(request_).gpus) == 3
        return
    with pytest.raises(PlacementError) as err:
        dgx.allocate(request_)
    assert str(err.value).startswith(message)
    assert dgx.gpus_in_use() == {}  # a refused request leaves no trace


def test_best_fit_keeps_room_for_an_nvlink_quad(dgx, ids):
    # best fit: both singles land on node 0, the pair fills node 0, the quad gets node 1;
    # a worst-fit (emptiest node) allocator would have split node 1 and failed the quad
    assert ids(dgx.allocate(R(1, owner="a"))) == [0]
    assert ids(dgx.allocate(R(1, owner="b"))) == [1]
    assert ids(dgx.allocate(R(2, "nvlink", owner="c"))) == [2, 3]
    assert ids(dgx.allocate(R(4, "nvlink", owner="d"))) == [4, 5, 6, 7]


def test_one_gpu_taken_then_nvlink_quad_goes_to_the_other_node(dgx, ids):
    dgx.allocate(R(1, owner="a"))
    assert ids(dgx.allocate(R(4, "nvlink", owner="b"))) == [4, 5, 6, 7]
    with pytest.raises(PlacementError, match=r"free: GPU 1, 2, 3 \(NUMA 0\)$"):
        dgx.allocate(R(4, "nvlink", owner="c"))


def test_a_pair_leaves_the_best_connected_gpus_free(dgx, ids):
    for owner in "abc":
        dgx.allocate(R(1, owner=owner))  # GPUs 0,1,2: node 0 has one left
    # 3-7 and 4-5 are both NVLinked pairs; taking 3-7 leaves the triangle 4,5,6 free
    # (6 links) where 4-5 would leave 3-7 and 6-7 (4): bandwidth ties, what is left decides
    assert ids(dgx.allocate(R(2, owner="d"))) == [3, 7]
    assert ids(dgx.allocate(R(2, "numa", owner="e"))) == [4, 5]


def test_does_not_break_a_free_nvlink_pair_when_a_loose_gpu_exists(topology_of,
                                                                   inventory_of, ids):
    # node 0: NVLink pair 0-1; node 1: three PCIe GPUs. Fewest-free alone would pick node 0.
    inv = inventory_of((0, 0, {1}), (1, 0, {0}), (2, 1, set()), (3, 1, set()),
                       (4, 1, set()))
    alloc = Allocator(topology_of(), inv)
    assert ids(alloc.allocate(R(1, owner="a"))) == [2]
    assert ids(alloc.allocate(R(1, owner="b"))) == [3]
    assert ids(alloc.allocate(R(1, owner="c"))) == [4]
    assert ids(alloc.allocate(R(2, "nvlink", owner="d"))) == [0, 1]


def test_bandwidth_comes_before_keeping_pairs_free(topology_of, inventory_of, ids):
    # a 2-GPU request, even `any`, gets the NVLinked pair over two PCIe GPUs
    inv = inventory_of((0, 0, {1}), (1, 0, {0}), (2, 1, set()), (3, 1, set()))
    alloc = Allocator(topology_of(), inv)
    assert ids(alloc.allocate(R(2, owner="a"))) == [0, 1]


def test_inside_a_node_loose_gpus_go_first(topology_of, inventory_of, ids):
    inv = inventory_of((0, 0, {1}), (1, 0, {0}), (2, 0, set()))
    alloc = Allocator(topology_of(), inv)
    assert ids(alloc.allocate(R(1, owner="a"))) == [2]
    assert ids(alloc.allocate(R(2, "nvlink", owner="b"))) == [0, 1]


def test_pcie_box(pcie, ids):
    assert ids(pcie.allocate(R(2, "numa", owner="a"))) == [0, 1]
    assert ids(pcie.allocate(R(2, "numa", owner="b"))) == [2, 3]
    with pytest.raises(PlacementError, match="requested 1 GPU; free: none"):
        pcie.allocate(R(1, owner="c"))


def test_pcie_box_has_no_nvlink(pcie, ids):
    with pytest.raises(PlacementError, match="2 NVLink-connected GPUs; free: GPU 0, 1"):
        pcie.allocate(R(2, "nvlink"))
    soft = pcie.allocate(R(2, "nvlink"), hard=False)
    assert ids(soft) == [0, 1]
    assert soft.warnings == ("requested 2 NVLink-connected GPUs; free: GPU 0, 1 (NUMA 0), "
                             "GPU 2, 3 (NUMA 1)", "gave 2 GPUs on one NUMA node instead")


def test_soft_gives_fewer_gpus_with_a_warning(pcie, ids):
    pcie.allocate(R(3, owner="a"))
    p = pcie.allocate(R(2, "numa", owner="b"), hard=False)
    assert ids(p) == [3]
    assert p.warnings[-1] == "gave 1 GPU instead of 2"
    p = pcie.allocate(R(1, owner="c"), hard=False)
    assert p.gpus == () and "free: none" in p.warnings[0]


def test_named_gpus(dgx, ids, dgx_node):
    _, inv = dgx_node
    p = dgx.allocate(Req("a", gpu_ids=(inv.gpus[3].uuid, "00000000:BD:00.0")))
    assert ids(p) == [3, 7]
    with pytest.raises(PlacementError, match=r"gpu\.ids: GPU 3 is not available \(held by a"):
        dgx.allocate(Req("b", gpu_ids=("3",)))
    with pytest.raises(PlacementError, match=r"'GPU-nope' matches no GPU on this node"):
        dgx.allocate(Req("b", gpu_ids=("GPU-nope",)))
    with pytest.raises(PlacementError, match=r"do not satisfy gpu\.topology nvlink"):
        dgx.allocate(Req("b", gpu_ids=("1", "6"), topology="nvlink"))
    assert ids(dgx.allocate(Req("b", gpu_ids=("2", "6"), topology="nvlink"))) == [2, 6]


def test_shared_gpus_pack_and_never_mix_with_exclusive(dgx, ids):
    assert ids(dgx.allocate(R(1, owner="s1", shared_gpus=True))) == [0]
    assert ids(dgx.allocate(R(1, owner="s2", shared_gpus=True))) == [0]  # packs
    assert ids(dgx.allocate(R(1, owner="x"))) == [1]  # exclusive avoids the shared GPU
    assert dgx.gpus_in_use() == {0: ("s1", "s2"), 1: ("x",)}
    with pytest.raises(PlacementError, match="GPU 0 is not available"):
        dgx.allocate(Req("y", gpu_ids=("0",)))
    with pytest.raises(PlacementError, match="GPU 1 is not available"):
        dgx.allocate(Req("s3", gpu_ids=("1",), shared_gpus=True))


def test_reallocating_an_owner_replaces_its_placement(dgx, ids):
    dgx.allocate(R(2, owner="a"))
    assert ids(dgx.allocate(R(1, owner="a"))) == [0]
    assert dgx.gpus_in_use() == {0: ("a",)}


def test_failed_reallocation_keeps_the_old_placement(dgx):
    dgx.allocate(R(2, owner="a"))
    with pytest.raises(PlacementError):
        dgx.allocate(R(9, owner="a"))
    assert dgx.gpus_in_use() == {0: ("a",), 1: ("a",)}


@pytest.mark.parametrize(("request_", "field", "text"), [
    (R(1, "ring"), "gpu.topology", "'ring' is not one of any, numa, nvlink"),
    (R(-1), "gpu.count", "must be a whole number >= 0"),
    (R(exclusive_cpus=-2), "cpu.exclusive", "must be >= 0"),
    (R(numa_nodes=(7,)), "numa.nodes", "node 7 does not exist (nodes: 0 (CPUs 0-7,16-23)"),
    (Req("c", gpu_count=2, mig_profile="1g.10gb"), "gpu.mig", "one MIG instance"),
])
def test_malformed_requests(dgx, request_, field, text):
    with pytest.raises(PlacementError) as err:
        dgx.allocate(request_, hard=False)  # even soft: the request itself is wrong
    assert err.value.field == field and text in str(err.value)


class TestMig:
    def test_profile(self, mig, ids):
        p = mig.allocate(Req("a", mig_profile="1g.10gb"))
        assert (p.mig.profile, p.mig.index, ids(p)) == ("1g.10gb", 2, [0])
        assert p.mems == {0} and p.cpus
        assert mig.allocate(Req("b", mig_profile="1g.10gb")).mig.index == 3
        with pytest.raises(PlacementError, match=re.escape(
                "requested a MIG 1g.10gb instance; free MIG instances: 3g.40gb on GPU 0, "
                "2g.20gb on GPU 0")):
            mig.allocate(Req("c", mig_profile="1g.10gb"))
        mig.release("a")
        assert mig.allocate(Req("c", mig_profile="1g.10gb")).mig.index == 2

    def test_whole_gpus_skip_the_mig_gpu(self, mig, ids):
        assert ids(mig.allocate(R(1, owner="a"))) == [1]
        with pytest.raises(PlacementError, match="free: none"):
            mig.allocate(R(1, owner="b"))
        with pytest.raises(PlacementError, match="GPU 0 is in MIG mode"):
            mig.allocate(Req("b", gpu_ids=("0",)))

    def test_named_mig_devices(self, mig, mig_node):
        _, inv = mig_node
        uuid = inv.gpus[0].mig_instances[0].uuid
        assert mig.allocate(Req("a", gpu_ids=(uuid,))).mig.profile == "3g.40gb"
        assert mig.allocate(Req("b", gpu_ids=("0:1",))).mig.profile == "2g.20gb"
        with pytest.raises(PlacementError, match="is held by a"):
            mig.allocate(Req("c", gpu_ids=(uuid,)))
        assert mig.migs_in_use() == {uuid: "a", inv.gpus[0].mig_instances[1].uuid: "b"}
        assert mig.gpus_in_use() == {0: ("a", "b")}

    def test_soft_missing_profile(self, mig):
        p = mig.allocate(Req("a", mig_profile="7g.80gb"), hard=False)
        assert p.mig is None and p.gpus == ()
        assert "does not create MIG instances" in p.warnings[0]
