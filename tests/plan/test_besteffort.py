"""nri-sla's GPU choice (GetPreferredAllocation's preferred_gpus) against a model of
NVIDIA's best-effort allocator (tests/support/besteffort.py), over every free-GPU state
and request size of five simulated boxes: never worse on NVLinks, then NUMA span, then
PCIe locality. bench/bench_selection.py --compare prints the same counts and adds
pinned GPUs (must_include)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from nri_plugin.kubelet.selection import preferred_gpus
from nri_plugin.plan.gpu_selection import choose_gpus
from nri_plugin.simulated.hardware import (
    FakeGpu,
    FakeNvml,
    build_pci_tree,
    build_sysfs,
    dgx1p_gpus,
    dgx1v_gpus,
    nvswitch_gpus,
    pcie_pairs_gpus,
    rtx8000_gpus,
)
from nri_plugin.topology.gpus import GpuInventory
from nri_plugin.topology.inventory import load_inventory
from tests.support.besteffort import best_effort, compare, every_case, pair_scores

BOXES: dict[str, Callable[[], list[FakeGpu]]] = {
    "dgx1v": dgx1v_gpus,
    "dgx1p": dgx1p_gpus,
    "nvswitch": nvswitch_gpus,
    "pcie-pairs": pcie_pairs_gpus,
    "rtx8000": rtx8000_gpus,
}


def read_box(root: Path, make: Callable[[], list[FakeGpu]]) -> GpuInventory:
    sysfs = build_pci_tree(build_sysfs(root, nodes=2), make())
    return load_inventory("nvml", sysfs_root=sysfs, nvml=FakeNvml(make()))


@pytest.fixture(scope="module")
def boxes(tmp_path_factory) -> dict[str, tuple[GpuInventory, list[list[int]]]]:
    return {
        name: (read_box(tmp_path_factory.mktemp(name), make), pair_scores(FakeNvml(make())))
        for name, make in BOXES.items()
    }


def preferred(inventory: GpuInventory) -> Callable[[frozenset[int], int], list[int]]:
    by_index = {g.index: g for g in inventory.gpus}
    return lambda free, size: [
        g.index for g in preferred_gpus(inventory, [by_index[i] for i in sorted(free)], (), size)
    ]


# (cases, where nri-sla is better) over every free state and size; nri-sla worse: never
EXPECTED = {
    "dgx1v": (1024, 46),
    "dgx1p": (1024, 24),
    "nvswitch": (1024, 32),
    "pcie-pairs": (1024, 32),
    "rtx8000": (32, 0),
}


@pytest.mark.parametrize("name", sorted(BOXES))
def test_never_worse_than_nvidias_best_effort_allocator(boxes, name):
    inventory, scores = boxes[name]
    tally = compare(inventory, scores, every_case(inventory), preferred(inventory))
    assert tally.worse == []
    assert (tally.cases, tally.ours_better) == EXPECTED[name]


def test_one_numa_node_before_links_left_free(boxes):
    inventory, scores = boxes["dgx1v"]
    # 0-3, 0-4 and 2-3 have two NVLinks each; 0-4 crosses the sockets. Ranking what is
    # left free before the NUMA span chose 0-4; NVIDIA's allocator chooses 0-3 (one host
    # bridge), nri-sla 2-3 (one PCIe switch)
    assert preferred(inventory)(frozenset({0, 1, 2, 3, 4}), 2) == [2, 3]
    assert best_effort(scores, [0, 1, 2, 3, 4], (), 2) == (0, 3)
    inventory, _ = boxes["dgx1p"]
    assert preferred(inventory)(frozenset({0, 1, 2, 3, 4}), 2) in ([0, 1], [2, 3])


def test_pcie_locality_among_gpus_with_equal_nvlinks(boxes):
    inventory, _ = boxes["nvswitch"]
    # every pair has 12 NVLinks; 2-3 share a PCIe switch, 0-2 only a socket
    assert choose_gpus(inventory, {0, 2, 3}, 2).gpus == (2, 3)
    assert choose_gpus(inventory, {0, 1, 2, 3, 4, 5}, 4).gpus == (0, 1, 2, 3)


def test_nvlinks_before_numa_span(boxes):
    inventory, scores = boxes["rtx8000"]
    # the NVLink bridges join 0-2 and 1-3 across the sockets: a bridged pair beats a
    # pair on one node, as NVIDIA's allocator has it too
    assert preferred(inventory)(frozenset(range(4)), 2) == [0, 2]
    assert best_effort(scores, [0, 1, 2, 3], (), 2) == (0, 2)
