"""Allocate/release sequences over grants: invariants hold, placements are deterministic,
and choosing in a row (the device plugin's choice) limits fragmentation."""

from hypothesis import given, settings
from hypothesis import strategies as st

from nri_plugin.plan.allocator import Allocator
from nri_plugin.plan.errors import PlacementError
from nri_plugin.plan.gpu_selection import fits
from nri_plugin.topology.cpulist import format_cpulist
from tests.support.grant_helpers import Node, granted

OPS = st.lists(
    st.one_of(
        st.tuples(
            st.just("alloc"),
            st.frozensets(st.integers(0, 7), max_size=4),
            st.sampled_from(["any", "numa", "nvlink"]),
            st.integers(0, 6),
        ),
        st.tuples(st.just("release"), st.integers(0, 30)),
    ),
    min_size=1,
    max_size=25,
)


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
        _, grant, topology, cpus = op
        owner = f"c{n}"
        try:
            p = alloc.allocate(
                granted(alloc, owner, *sorted(grant), topology=topology, exclusive_cpus=cpus)
            )
        except PlacementError:
            continue
        live.append(owner)
        assert {g.index for g in p.gpus} == grant  # exactly the grant, never another
        if topology == "numa" and len(grant) > 1:
            assert len({g.numa_node for g in p.gpus}) == 1
        if topology == "nvlink":
            assert fits(alloc.inventory, p.gpus, "nvlink")  # NVLink-connected
        assert len(p.exclusive_cpus) >= cpus and not p.exclusive_cpus & {0, 16}
        if grant and cpus:
            assert {alloc.topology.node_of(c) for c in p.exclusive_cpus} <= {
                g.numa_node for g in p.gpus
            }
    held = alloc.exclusive_cpus_in_use()
    assert alloc.shared_cpus() == alloc.topology.online - {0, 16} - held.keys()
    holders: dict[int, set[str]] = {}
    for owner in live:
        for g in alloc.placement_of(owner).gpus:
            holders.setdefault(g.index, set()).add(owner)
    assert {i: set(h) for i, h in alloc.gpus_in_use().items()} == holders


def test_decisions_are_deterministic(dgx_node):
    def replay():
        alloc = Allocator(*dgx_node)
        out = []
        for i, grant in enumerate([(0,), (4, 5), (1,), (2, 3, 6), (7,)]):
            p = alloc.allocate(granted(alloc, f"c{i}", *grant, exclusive_cpus=2))
            out.append(([g.index for g in p.gpus], format_cpulist(p.exclusive_cpus)))
            if i == 2:
                alloc.release("c0")
        return out

    assert replay() == replay()


def test_holes_after_release(dgx_node):
    node = Node(dgx_node[1])
    for i in range(8):
        assert node.pick(1, owner=f"c{i}") == [i]
    del node.holders[1], node.holders[6]
    assert node.pick(2, "numa", owner="x") is None  # free: GPU 1 (NUMA 0), GPU 6 (NUMA 1)
    assert node.pick(2, owner="x") == [1, 6]  # any may span nodes
    del node.holders[1], node.holders[6], node.holders[2]  # node 0: 1 and 2, a linked pair
    assert node.pick(2, "nvlink", owner="y") == [1, 2]


def test_release_and_reuse_cycle_does_not_leak(dgx):
    for i in range(200):
        dgx.allocate(
            granted(dgx, f"c{i}", *range(i % 4, i % 4 + 1 + i % 4), exclusive_cpus=2 * (i % 3))
        )
        dgx.release(f"c{i}")
    assert dgx.gpus_in_use() == {} and dgx.exclusive_cpus_in_use() == {}
    assert dgx.owners() == ()
