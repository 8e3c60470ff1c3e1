"""Allocate/release sequences: invariants hold and best fit limits fragmentation."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nri_plugin.plan.allocator import Allocator
from nri_plugin.plan.gpu_selection import fits
from nri_plugin.plan.placement_values import PlacementError
from nri_plugin.plan.placement_values import PlacementRequest as Req
from nri_plugin.topology import format_cpulist

OPS = st.lists(st.one_of(
    st.tuples(st.just("alloc"), st.integers(0, 4), st.sampled_from(["any", "numa", "nvlink"]),
              st.integers(0, 6), st.booleans()),
    st.tuples(st.just("release"), st.integers(0, 30)),
), min_size=1, max_size=25)


@settings(max_examples=40, deadline=None)
@given(ops=OPS)
def test_random_sequences_keep_the_invariants(dgx_node, ops):
    alloc = Allocator(*dgx_node, reserved_cpus={0, 16})
    live: list[str] = []
    for n, op in enumerate(ops):
        if op[0] == "release":
            if live:
                alloc.release(live.pop(op[1] % len(live)))
            continue
        _, count, topology, cpus, shared = op
        owner = f"c{n}"
        try:
            p = alloc.allocate(Req(owner, gpu_count=count, topology=topology,
                                   exclusive_cpus=cpus, shared_gpus=shared))
        except PlacementError:
            continue
        live.append(owner)
        assert len(p.gpus) == count
        if topology == "numa" and count:
            assert len({g.numa_node for g in p.gpus}) == 1
        if topology == "nvlink":
            assert fits(alloc.inventory, p.gpus, "nvlink")  # NVLink-connected
        assert len(p.exclusive_cpus) >= cpus and not p.exclusive_cpus & {0, 16}
        if count and cpus:
            assert {alloc.topology.node_of(c) for c in p.exclusive_cpus} <= {
                g.numa_node for g in p.gpus}
    held = alloc.exclusive_cpus_in_use()
    assert alloc.shared_cpus() == alloc.topology.online - {0, 16} - held.keys()
    exclusive_gpus = [i for i, owners in alloc.gpus_in_use().items()
                      if not alloc.placement_of(owners[0]).shared_gpus]
    assert all(len(alloc.gpus_in_use()[i]) == 1 for i in exclusive_gpus)


def test_decisions_are_deterministic(dgx_node):
    def replay():
        alloc = Allocator(*dgx_node)
        out = []
        for i, (count, topology) in enumerate([(1, "any"), (2, "nvlink"), (1, "numa"),
                                               (3, "any"), (1, "any")]):
            p = alloc.allocate(Req(f"c{i}", gpu_count=count, topology=topology,
                                   exclusive_cpus=2))
            out.append(([g.index for g in p.gpus], format_cpulist(p.exclusive_cpus)))
            if i == 2:
                alloc.release("c0")
        return out

    assert replay() == replay()


def test_holes_after_release(dgx, ids):
    for i in range(8):
        dgx.allocate(Req(f"c{i}", gpu_count=1))
    dgx.release("c1")
    dgx.release("c6")
    with pytest.raises(PlacementError, match=r"free: GPU 1 \(NUMA 0\), GPU 6 \(NUMA 1\)$"):
        dgx.allocate(Req("x", gpu_count=2, topology="numa"))
    assert ids(dgx.allocate(Req("x", gpu_count=2))) == [1, 6]  # any may span nodes
    dgx.release("x")
    dgx.release("c2")  # node 0 now has 1 and 2 free, a connected pair
    assert ids(dgx.allocate(Req("y", gpu_count=2, topology="nvlink"))) == [1, 2]


def test_release_and_reuse_cycle_does_not_leak(dgx):
    for i in range(200):
        dgx.allocate(Req(f"c{i}", gpu_count=1 + i % 4, topology="nvlink",
                         exclusive_cpus=2 * (i % 3)))
        dgx.release(f"c{i}")
    assert dgx.gpus_in_use() == {} and dgx.exclusive_cpus_in_use() == {}
    assert dgx.owners() == ()
