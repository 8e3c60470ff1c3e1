"""The chooser against an exhaustive oracle on DGX-1V-like (weighted NVLinks), NVSwitch and
PCIe-pairs boxes: no free-GPU state where the oracle finds a strictly better set; and the
failure modes of the per-NUMA, all-pairs-linked chooser this one replaced."""

from __future__ import annotations

from itertools import permutations
from pathlib import Path

import pytest

from nri_plugin.errors import ProgrammingError
from nri_plugin.plan.allocator import Allocator
from nri_plugin.plan.errors import PlacementError
from nri_plugin.plan.gpu_graph import graph_of
from nri_plugin.plan.gpu_selection import choose_gpus, score_gpu_set
from nri_plugin.plan.placement_values import PlacementRequest
from nri_plugin.simulated.hardware import (
    DGX1V_LINKS,
    FakeNvml,
    build_pci_tree,
    build_sysfs,
    dgx1v_gpus,
    nvswitch_gpus,
    pcie_pairs_gpus,
)
from nri_plugin.topology.cpus import Topology, read_topology
from nri_plugin.topology.gpus import Gpu, GpuInventory
from nri_plugin.topology.inventory import load_inventory
from nri_plugin.value import replace
from tests.support.selection_oracle import best, free_states, greedy, key

MACHINES = {"dgx1v": dgx1v_gpus, "nvswitch": nvswitch_gpus, "pcie-pairs": pcie_pairs_gpus}


def machine(root: Path, name: str) -> tuple[Topology, GpuInventory]:
    sysfs = build_pci_tree(
        build_sysfs(root / "sys", nodes=2, cores_per_node=4, threads=2), MACHINES[name]()
    )
    return read_topology(sysfs), load_inventory(
        "nvml", sysfs_root=sysfs, nvml=FakeNvml(MACHINES[name]())
    )


@pytest.fixture(scope="module")
def boxes(tmp_path_factory) -> dict[str, tuple[Topology, GpuInventory]]:
    return {name: machine(tmp_path_factory.mktemp(name), name) for name in MACHINES}


def compare(inventory: GpuInventory, topology: str) -> tuple[int, list[str]]:
    """(states compared, mismatches) over every free state and request size."""
    states, mismatches = 0, []
    for free in free_states(inventory):
        for count in range(1, len(free) + 1):
            states += 1
            want = best(inventory, free, count, topology)
            got = choose_gpus(inventory, free, count, topology=topology)
            got_key = None if got is None else got.score.key()
            if got_key != want:
                mismatches.append(
                    f"free {sorted(free)} count {count}: chose {got and got.gpus}, oracle {want}"
                )
    return states, mismatches


@pytest.mark.parametrize("topology", ["any", "numa", "nvlink"])
@pytest.mark.parametrize("name", sorted(MACHINES))
def test_no_state_where_the_oracle_finds_a_better_set(boxes, name, topology):
    states, mismatches = compare(boxes[name][1], topology)
    assert states == 1024  # every (free set, size) on 8 GPUs: sum of n * C(8, n)
    assert mismatches == []


def test_must_include_against_the_oracle(boxes):
    inv = boxes["dgx1v"][1]
    for free in free_states(inv):
        for must in free:
            for count in range(1, min(len(free), 4) + 1):
                got = choose_gpus(inv, free, count, must_include={must}, topology="nvlink")
                want = best(inv, free, count, "nvlink", must={must})
                assert (None if got is None else got.score.key()) == want
                assert got is None or must in got.gpus


def test_score_matches_the_oracle_key(boxes):
    inv = boxes["dgx1v"][1]
    free = [g for g in inv.gpus if g.index != 5]
    score = score_gpu_set(inv, (0, 3, 4), [g.index for g in free])
    assert score.key() == key([inv.gpus[i] for i in (0, 3, 4)], free)
    # 0-3 and 0-4 have two NVLinks each; 3-4 none. PCIe: 0-3 one host bridge (2), 0-4
    # and 3-4 across sockets (0)
    assert (score.nvlink_links, score.pcie, score.numa_nodes) == (4, 2, 2)
    pairs = score_gpu_set(boxes["pcie-pairs"][1], (0, 1, 2), range(8))
    assert (pairs.nvlink_links, pairs.pcie, pairs.numa_nodes) == (0, 3 + 1 + 1, 1)


# --- the failure modes of the previous chooser ---------------------------------------


def collapsed(inv: GpuInventory) -> GpuInventory:
    """The inventory as a peers-only source saw it: one link per peer."""
    return GpuInventory(
        tuple(replace(g, nvlink_links=(), nvlink_peers=g.nvlink_peers) for g in inv.gpus),
        inv.source,
    )


def test_link_counts_choose_the_double_linked_pair(boxes):
    inv = boxes["dgx1v"][1]
    # 0-3 have two NVLinks, 0-1 and 1-3 one each
    assert choose_gpus(inv, {0, 1, 3}, 2, topology="nvlink").gpus == (0, 3)
    # counted as peers only, every pair looks alike and the lowest indexes win
    assert choose_gpus(collapsed(inv), {0, 1, 3}, 2, topology="nvlink").gpus == (0, 1)


def test_a_single_gpu_does_not_break_a_free_pair(boxes):
    pairs = boxes["pcie-pairs"][1]
    # GPU 1 is taken: its switch partner 0 goes before half of the intact pair 2-3
    assert choose_gpus(pairs, {0, 2, 3, 4, 5}, 1).gpus == (0,)
    dgx = boxes["dgx1v"][1]
    # node 0 free but GPU 3: 0-3 is a double link... it is gone, so 0 is least tied
    choice = choose_gpus(dgx, {0, 1, 2}, 1, topology="numa")
    assert choice.gpus == (0,) and choice.score.left_nvlink_links == 2  # 1-2 stays


@pytest.mark.parametrize("count", [5, 6, 7, 8])
def test_large_nvlink_requests_fit_on_a_cube_mesh(boxes, count):
    inv = boxes["dgx1v"][1]
    choice = choose_gpus(inv, range(8), count, topology="nvlink")
    assert choice is not None and len(choice.gpus) == count
    assert choice.score.key() == best(inv, range(8), count, "nvlink")


@pytest.mark.parametrize("name", sorted(MACHINES))
def test_every_order_of_1_1_2_4_fits(boxes, name):
    topology, inv = boxes[name]
    for order in set(permutations([1, 1, 2, 4])):
        alloc = Allocator(topology, inv)
        for k, count in enumerate(order):
            try:
                alloc.allocate(PlacementRequest(f"c{k}", gpu_count=count, topology="numa"))
            except PlacementError as exc:
                pytest.fail(f"{name}: order {order}: request {k} ({count}) failed: {exc}")


@pytest.mark.parametrize("topology", ["any", "numa", "nvlink"])
def test_best_first_finds_a_set_whenever_one_exists(boxes, topology):
    # the search used beyond EXHAUSTIVE_LIMIT sets, forced here on 8 GPUs
    inv = boxes["dgx1v"][1]
    for free in free_states(inv):
        for count in range(1, len(free) + 1):
            got = choose_gpus(inv, free, count, topology=topology, exhaustive_limit=0)
            want = best(inv, free, count, topology)
            assert (got is None) == (want is None)
            if got is not None:
                assert got.search == "best-first" and set(got.gpus) <= free
                assert got.score.key() >= want  # never better than the optimum
                # and the set a from-scratch best-first search finds
                assert got.score.key() == greedy(inv, free, count, topology)


def test_big_box_uses_best_first_with_must_include():
    # 24 GPUs: three NVLink octets of DGX-1V shape, one per NUMA node
    gpus = []
    for i in range(24):
        base, local = i - i % 8, i % 8
        links = tuple(
            (base + (b if a == local else a), n)
            for (a, b), n in DGX1V_LINKS.items()
            if local in (a, b)
        )
        gpus.append(Gpu(i, f"GPU-{i}", f"0000:{i + 1:02x}:00.0", i // 8, nvlink_links=links))
    inv = GpuInventory(tuple(gpus), "snapshot")
    # any: C(23, 7) sets hold GPU 9, too many; best-first grows the set from GPU 9
    choice = choose_gpus(inv, range(24), 8, must_include={9})
    assert choice.search == "best-first"
    assert set(choice.gpus) == set(range(8, 16))  # the whole octet: 24 NVLinks inside
    assert choice.score.nvlink_links == 24
    # nvlink: only GPU 9's NVLink component (its octet) can hold a connected set
    choice = choose_gpus(inv, range(24), 8, topology="nvlink", must_include={9})
    assert choice.search == "exhaustive" and choice.evaluated == 1
    assert set(choice.gpus) == set(range(8, 16))
    assert choose_gpus(inv, range(24), 2).gpus == (0, 3)  # a double link, lowest indexes
    assert choose_gpus(inv, range(24), 9, topology="numa") is None


def test_a_link_listed_on_one_side_joins_both():
    # a hand-written snapshot may list an NVLink on one GPU only
    inv = GpuInventory(
        (
            Gpu(0, "", "0000:01:00.0", 0, nvlink_links=((1, 2),)),
            Gpu(1, "", "0000:02:00.0", 0),
            Gpu(2, "", "0000:03:00.0", 0),
        ),
        "snapshot",
    )
    choice = choose_gpus(inv, {0, 1, 2}, 2, topology="nvlink")
    assert choice.gpus == (0, 1) and choice.score.nvlink_links == 2
    assert score_gpu_set(inv, (1, 0), {0, 1, 2}) == choice.score


def test_edge_requests(boxes):
    inv = boxes["dgx1v"][1]
    for topology in ("any", "numa", "nvlink"):
        assert choose_gpus(inv, (), 0, topology=topology).gpus == ()
        assert choose_gpus(inv, {3}, 1, topology=topology).gpus == (3,)
    assert choose_gpus(inv, {0, 1}, 3) is None
    assert choose_gpus(inv, {0, 1}, 1, must_include={5}) is None  # 5 is not free
    assert choose_gpus(inv, {0, 1}, 1, must_include={0, 1}) is None  # more than asked
    with pytest.raises(ProgrammingError, match="'ring' is not one of any, numa, nvlink"):
        choose_gpus(inv, {0}, 1, topology="ring")


def test_a_rescan_with_the_same_facts_reuses_the_graph(boxes):
    inv = boxes["dgx1v"][1]
    again = GpuInventory(tuple(replace(g, memory_bytes=1) for g in inv.gpus), "nvml")
    assert graph_of(again) is graph_of(inv)
    moved = GpuInventory(tuple(replace(g, numa_node=0) for g in inv.gpus), "nvml")
    assert graph_of(moved) is not graph_of(inv)
    assert choose_gpus(moved, range(8), 8, topology="numa") is not None  # one node now
