"""Choosing GPUs (gpu_selection.choose: the pure choice `nri-sla device-plugin` makes for
the kubelet) on fresh fake nodes and after a few choices. The NRI plugin and the hook
never choose: tests/plan/test_runtime.py verifies grants against the SLA."""

import pytest

from tests.support.grant_helpers import Node, make_inventory


@pytest.fixture
def dgx_gpus(dgx_node):
    return Node(dgx_node[1])


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ((1,), [0]),
        ((2,), [0, 1]),
        ((4, "nvlink"), [0, 1, 2, 3]),
        ((4, "numa"), [0, 1, 2, 3]),
        ((3, "nvlink"), [0, 1, 2]),
        ((5,), [0, 1, 2, 3, 4]),  # spans nodes: fewest nodes, fullest first
        ((8,), list(range(8))),
        ((0,), []),
        ((5, "nvlink"), [0, 1, 2, 3, 4]),  # connected (best connected), not every pair linked
        ((5, "numa"), None),
        ((9,), None),
    ],
)
def test_dgx_fresh(dgx_gpus, args, expected):
    assert dgx_gpus.pick(*args) == expected


def test_requested_numa_nodes(dgx_gpus):
    assert dgx_gpus.pick(2, "nvlink", numa_nodes={1}) == [4, 5]
    assert dgx_gpus.pick(1, numa_nodes={1}) == [6]


def test_best_fit_keeps_room_for_an_nvlink_quad(dgx_gpus):
    # best fit: both singles land on node 0, the pair fills node 0, the quad gets node 1;
    # a worst-fit (emptiest node) choice would have split node 1 and failed the quad
    assert dgx_gpus.pick(1, owner="a") == [0]
    assert dgx_gpus.pick(1, owner="b") == [1]
    assert dgx_gpus.pick(2, "nvlink", owner="c") == [2, 3]
    assert dgx_gpus.pick(4, "nvlink", owner="d") == [4, 5, 6, 7]


def test_one_gpu_taken_then_nvlink_quad_goes_to_the_other_node(dgx_gpus):
    dgx_gpus.pick(1, owner="a")
    assert dgx_gpus.pick(4, "nvlink", owner="b") == [4, 5, 6, 7]
    assert dgx_gpus.pick(4, "nvlink", owner="c") is None


def test_nvlinks_come_before_staying_on_one_numa_node():
    # 0 and 1 share node 0 without NVLink; 0-2 are NVLinked across the nodes
    inventory = make_inventory((0, 0, {2}), (1, 0, set()), (2, 1, {0}))
    assert Node(inventory).pick(2) == [0, 2]
    assert Node(inventory).pick(2, "numa") == [0, 1]


def test_one_numa_node_comes_before_what_is_left_free(dgx_gpus):
    for owner in "abc":
        dgx_gpus.pick(1, owner=owner)  # GPUs 0,1,2: node 0 has one left
    # 3-7 (across the nodes) and 4-5 have the same NVLinks; taking 3-7 would leave more
    # links free (4-5-6), but 4-5 stays on one node
    assert dgx_gpus.pick(2, owner="d") == [4, 5]


def test_does_not_break_a_free_nvlink_pair_when_a_loose_gpu_exists():
    # node 0: NVLink pair 0-1; node 1: three PCIe GPUs. Fewest-free alone would pick node 0.
    node = Node(
        make_inventory((0, 0, {1}), (1, 0, {0}), (2, 1, set()), (3, 1, set()), (4, 1, set()))
    )
    assert [node.pick(1, owner=o) for o in "abc"] == [[2], [3], [4]]
    assert node.pick(2, "nvlink", owner="d") == [0, 1]


def test_bandwidth_comes_before_keeping_pairs_free():
    # a 2-GPU request, even `any`, gets the NVLinked pair over two PCIe GPUs
    node = Node(make_inventory((0, 0, {1}), (1, 0, {0}), (2, 1, set()), (3, 1, set())))
    assert node.pick(2, owner="a") == [0, 1]


def test_inside_a_node_loose_gpus_go_first():
    node = Node(make_inventory((0, 0, {1}), (1, 0, {0}), (2, 0, set())))
    assert node.pick(1, owner="a") == [2]
    assert node.pick(2, "nvlink", owner="b") == [0, 1]


def test_pcie_box(pcie_node):
    node = Node(pcie_node[1])
    assert node.pick(2, "numa", owner="a") == [0, 1]
    assert node.pick(2, "numa", owner="b") == [2, 3]
    assert node.pick(1, owner="c") is None
    assert Node(pcie_node[1]).pick(2, "nvlink") is None  # a PCIe box has no NVLink


def test_shared_gpus_pack_and_never_mix_with_exclusive(dgx_gpus):
    assert dgx_gpus.pick(1, owner="s1", shared=True) == [0]
    assert dgx_gpus.pick(1, owner="s2", shared=True) == [0]  # packs
    assert dgx_gpus.pick(1, owner="x") == [1]  # exclusive avoids the shared GPU
    assert dgx_gpus.holders == {0: {"s1": "shared", "s2": "shared"}, 1: {"x": "exclusive"}}


def test_the_mig_gpu_is_never_chosen_whole(mig_node):
    node = Node(mig_node[1])
    assert node.pick(1, owner="a") == [1]
    assert node.pick(1, owner="b") is None
