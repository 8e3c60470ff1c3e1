"""Exclusive CPUs (the count asked, as logical CPUs) and cpus/mems alignment.

DGX-like fake: node 0 = CPUs 0-7,16-23, node 1 = 8-15,24-31; core k = {k, k+16}.
"""

import pytest

from nri_plugin.plan.allocator import Allocator
from nri_plugin.plan.errors import PlacementError
from nri_plugin.plan.placement_values import PlacementRequest as Req
from nri_plugin.topology.cpulist import format_cpulist as fmt
from tests.support.grant_helpers import gpu_ids, granted, make_inventory


def test_gpu_aligned_exclusive_cpus_are_whole_cores_from_the_gpu_node(dgx):
    p = dgx.allocate(granted(dgx, "a", 0, exclusive_cpus=4))
    assert fmt(p.exclusive_cpus) == "6-7,22-23"  # highest cores of node 0
    assert p.cpus == p.exclusive_cpus and p.mems == {0}
    assert dgx.exclusive_cpus_in_use() == dict.fromkeys(p.exclusive_cpus, "a")


def test_odd_counts_are_never_rounded_up_to_whole_cores(dgx):
    p = dgx.allocate(Req("a", exclusive_cpus=3))
    # one whole core and one thread of the next: Kubernetes' count, not 4
    assert fmt(p.exclusive_cpus) == "7,22-23"
    # the next odd request takes the split core's free thread before a whole core
    q = dgx.allocate(Req("b", exclusive_cpus=1))
    assert fmt(q.exclusive_cpus) == "6"
    # 28 one-CPU pods hold 28 CPUs, not 56: a 16-CPU pod still fits whole cores
    for i in range(26):
        dgx.allocate(Req(f"one{i}", exclusive_cpus=1))
    assert len(dgx.exclusive_cpus_in_use()) == 3 + 1 + 26
    assert len(dgx.allocate(Req("big", exclusive_cpus=2)).exclusive_cpus) == 2


def test_full_cores_takes_whole_cores_only(dgx):
    dgx.allocate(Req("a", exclusive_cpus=1))  # splits a core
    p = dgx.allocate(Req("b", exclusive_cpus=4, full_cores=True))
    assert all(dgx.topology.core_of(c) <= p.exclusive_cpus for c in p.exclusive_cpus)
    assert len(p.exclusive_cpus) == 4 and not p.exclusive_cpus & dgx.topology.core_of(23)


def test_aligned_container_gets_its_node_minus_reserved_and_exclusive(dgx_node):
    alloc = Allocator(*dgx_node, reserved_cpus={0, 16})
    alloc.allocate(granted(alloc, "x", 0, exclusive_cpus=2))  # takes 7,23
    p = alloc.allocate(granted(alloc, "a", 1))
    assert fmt(p.cpus) == "1-6,17-22" and p.mems == {0} and not p.exclusive_cpus
    assert fmt(alloc.shared_cpus()) == "1-6,8-15,17-22,24-31"
    # a later exclusive grab shrinks what "a" should now get
    alloc.allocate(granted(alloc, "y", 2, exclusive_cpus=2))
    assert fmt(alloc.current_cpus("a")) == "1-5,17-21"
    alloc.release("x")
    assert fmt(alloc.current_cpus("a")) == "1-5,7,17-21,23"


def test_gpus_on_two_nodes_align_to_both(pcie):
    p = pcie.allocate(granted(pcie, "a", 0, 1, 2))
    assert gpu_ids(p) == [0, 1, 2] and p.mems == {0, 1}
    assert p.cpus == pcie.topology.online


def test_align_false_leaves_cpus_alone(dgx):
    p = dgx.allocate(granted(dgx, "a", 0, align=False))
    assert p.cpus == frozenset() and p.mems == frozenset()
    assert "aligned" not in p.to_record()


def test_numa_nodes_without_gpus(dgx):
    p = dgx.allocate(Req("a", numa_nodes=(1,)))
    assert fmt(p.cpus) == "8-15,24-31" and p.mems == {1}
    p = dgx.allocate(Req("b", numa_nodes=(1,), exclusive_cpus=2))
    assert fmt(p.exclusive_cpus) == "15,31" and p.mems == {1}


def test_no_gpu_no_numa_no_exclusive_is_unconstrained(dgx):
    p = dgx.allocate(Req("a"))
    assert (p.cpus, p.mems, p.exclusive_cpus, p.gpus) == (frozenset(), frozenset(), frozenset(), ())


def test_exclusive_without_gpus_prefers_a_node_without_gpus(topology_of):
    # 4 nodes x 4 cores; GPUs only on nodes 0 and 1
    alloc = Allocator(topology_of(nodes=4), make_inventory((0, 0, set()), (1, 1, set())))
    p = alloc.allocate(Req("a", exclusive_cpus=2))
    assert alloc.topology.node_of(min(p.exclusive_cpus)) == 2
    # best fit among GPU-less nodes: node 2 now has fewer free cores, so it is chosen again
    p = alloc.allocate(Req("b", exclusive_cpus=2))
    assert alloc.topology.node_of(min(p.exclusive_cpus)) == 2 and p.mems == {2}
    # too big for node 2's remaining 2 cores: node 3
    p = alloc.allocate(Req("c", exclusive_cpus=6))
    assert p.mems == {3}


def test_exclusive_spanning_nodes_when_no_single_node_fits(dgx):
    p = dgx.allocate(Req("a", exclusive_cpus=20))
    assert len(p.exclusive_cpus) == 20 and p.mems == {0, 1}


def test_not_enough_cores_on_the_gpu_node(dgx):
    dgx.allocate(granted(dgx, "a", 0, exclusive_cpus=12))  # 6 of node 0's 8 cores
    with pytest.raises(PlacementError) as err:
        dgx.allocate(granted(dgx, "b", 1, exclusive_cpus=6))
    assert err.value.field == "cpu.exclusive"
    assert str(err.value) == (
        "requested 6 exclusive CPUs on NUMA node(s) 0; not that many CPUs can be given there now"
    )
    soft = dgx.allocate(granted(dgx, "b", 1, exclusive_cpus=6), hard=False)
    assert len(soft.exclusive_cpus) == 6
    assert {0, 1, 16, 17} < soft.exclusive_cpus  # the rest from the nearest node
    assert soft.warnings[-1].startswith("gave 6 exclusive CPUs")


def test_reserved_cpus_are_never_exclusive(dgx_node):
    alloc = Allocator(*dgx_node, reserved_cpus={7})
    p = alloc.allocate(granted(alloc, "a", 0, exclusive_cpus=2))
    assert 7 not in p.exclusive_cpus and 23 not in p.exclusive_cpus  # 23 shares 7's core


def test_numa_nodes_that_do_not_hold_the_named_gpus(dgx):
    with pytest.raises(PlacementError, match=r"numa\.nodes 1 does not hold the granted GPUs"):
        dgx.allocate(granted(dgx, "a", 0, gpu_ids=("0",), numa_nodes=(1,)))


def test_unknown_gpu_node_on_a_multi_node_box(topology_of):
    alloc = Allocator(topology_of(nodes=2), make_inventory((0, None, set())))
    with pytest.raises(PlacementError, match=r"NUMA node of GPU 0 .* is unknown"):
        alloc.allocate(granted(alloc, "a", 0))
    p = alloc.allocate(granted(alloc, "a", 0), hard=False)
    assert p.gpus and not p.cpus and p.warnings


def test_unknown_gpu_node_on_a_one_node_box_is_node_0(topology_of):
    alloc = Allocator(topology_of(nodes=1), make_inventory((0, None, set())))
    assert alloc.allocate(granted(alloc, "a", 0)).mems == {0}
