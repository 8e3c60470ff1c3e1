"""Exclusive CPUs within the CPU pool's floors (what running containers need), the pool's
cpusets and floors, and exclusive CPUs given back on a resize down. The DGX-like fake: 2
NUMA nodes x 8 cores x 2 threads, node 0 = CPUs 0-7,16-23."""

import pytest

from nri_plugin.plan.best_fit import SQUEEZE, choose_placement, take_cpus
from nri_plugin.plan.cpupool import CpuPool, PoolMember, ReportedCpusets, cpus_needed
from nri_plugin.plan.errors import PlacementError
from nri_plugin.plan.placement_values import CpuFloor, Holdings
from nri_plugin.plan.placement_values import PlacementRequest as Req
from nri_plugin.topology.cpulist import parse_cpulist

NODE0 = parse_cpulist("0-7,16-23")
NODE1 = parse_cpulist("8-15,24-31")


def test_take_cpus_skips_what_a_floor_keeps():
    cores = [(frozenset({7, 23}), True), (frozenset({6, 22}), True), (frozenset({15, 31}), True)]
    budgets = [(NODE0, 2)]  # of node 0, only 2 CPUs may still go
    assert take_cpus(cores, 4, budgets) == {7, 23, 15, 31}
    assert take_cpus(cores, 4) == {7, 23, 6, 22}
    assert take_cpus(cores, 6, budgets) == {7, 23, 15, 31}  # short: what the floors allow


def test_take_cpus_counts_logical_cpus_and_splits_a_split_core_first():
    whole = [(frozenset({7, 23}), True), (frozenset({6, 22}), True)]
    assert take_cpus(whole, 3) == {7, 23, 22}  # one whole core, then one thread
    assert take_cpus(whole, 1) == {23}  # never the whole core for one CPU
    # a core another container split already gives its free thread before a whole core
    split = [*whole, (frozenset({5}), False)]
    assert take_cpus(split, 3) == {7, 23, 5}
    assert take_cpus(split, 1) == {5}
    # whole cores only (cpu.exclusive-full-cores): never a thread, never above the count
    assert take_cpus(split, 3, whole_only=True) == {7, 23}
    assert take_cpus(split, 4, whole_only=True) == {7, 23, 6, 22}


def test_best_node_is_one_where_the_floors_hold(dgx):
    floors = (CpuFloor(NODE0, 10),)  # an aligned neighbour on node 0 needs 10 of its 16
    p = choose_placement(dgx.layout, Holdings(), Req("x", exclusive_cpus=8), True, floors)
    # without floors node 0 wins the tie; it would keep 8 of the 10: node 1
    free = choose_placement(dgx.layout, Holdings(), Req("x", exclusive_cpus=8), True)
    assert free.exclusive_cpus <= NODE0
    assert p.exclusive_cpus <= NODE1 and len(p.exclusive_cpus) == 8


def test_squeeze_is_refused_or_clamped_naming_only_the_policy(dgx):
    floors = (CpuFloor(NODE0, 10),)
    request = Req("x", exclusive_cpus=8, numa_nodes=(0,))
    with pytest.raises(PlacementError) as refused:
        choose_placement(dgx.layout, Holdings(), request, True, floors)
    assert refused.value.message == f"requested 8 exclusive CPUs on NUMA node(s) 0; {SQUEEZE}"
    soft = choose_placement(dgx.layout, Holdings(), request, False, floors)
    assert len(soft.exclusive_cpus & NODE0) == 6  # 16 - 10
    assert len(soft.exclusive_cpus) == 8  # completed from node 1, with a warning
    assert soft.warnings[0].endswith(SQUEEZE)


def test_a_pinned_cpuset_is_never_taken(dgx):
    pinned = frozenset({7, 23})
    p = choose_placement(
        dgx.layout,
        Holdings(),
        Req("x", exclusive_cpus=14, numa_nodes=(0,)),
        False,
        (CpuFloor(pinned, len(pinned)),),
    )
    assert not p.exclusive_cpus & pinned and len(p.exclusive_cpus) == 14


def test_the_pool_gives_every_kind_its_cpuset_and_floor(dgx):
    pool = CpuPool(dgx)
    dgx.allocate(Req("aligned", numa_nodes=(0,)))
    dgx.allocate(Req("excl", exclusive_cpus=4, numa_nodes=(0,)))
    for owner, need in (("aligned", 8), ("excl", 6), ("plain", 2)):
        pool.join(owner, PoolMember(need))
    pool.join("pinned", PoolMember(1, frozenset({8, 24})))
    held = dgx.placement_of("excl").exclusive_cpus
    everything = dgx.topology.online
    assert pool.cpuset("aligned") == NODE0 - held
    assert pool.cpuset("plain") == everything - held
    assert pool.cpuset("pinned") == {8, 24}
    # 4 exclusive CPUs for a request of 6: its own and the shared pool
    assert pool.cpuset("excl") == everything
    assert pool.cpuset("excl", need=4) == held
    assert set(pool.floors()) == {
        CpuFloor(everything, 2),
        CpuFloor(NODE0, 8),
        CpuFloor(frozenset({8, 24}), 2),
    }
    assert pool.changes() == {o: pool.cpuset(o) for o in ("aligned", "excl", "plain")}
    assert pool.changes() == {}  # told once
    dgx.release("excl")
    assert pool.changes() == {"aligned": NODE0, "plain": everything}


def test_shrink_keeps_the_highest_cores_and_an_aligned_container_its_nodes(dgx):
    p = dgx.allocate(Req("a", exclusive_cpus=8, numa_nodes=(0,)))
    given = dgx.shrink_exclusive("a", 3)
    kept = dgx.placement_of("a").exclusive_cpus
    # the request's 3 logical CPUs, never rounded up to the 2 whole cores holding them
    assert len(kept) == 3 and kept | given == p.exclusive_cpus
    assert max(kept) > max(given)  # the highest cores stay
    assert set(dgx.exclusive_cpus_in_use()) == kept
    assert dgx.shrink_exclusive("a", 0) == kept
    after = dgx.placement_of("a")
    assert not after.exclusive_cpus and after.cpus == NODE0  # aligned to node 0 still
    b = dgx.allocate(Req("b", exclusive_cpus=4))
    assert dgx.shrink_exclusive("b", 4) == frozenset() and dgx.placement_of("b") == b
    # whole cores only: 3 keeps one core of 2, never a second one above the count
    assert len(dgx.shrink_exclusive("b", 3, full_cores=True)) == 2
    assert len(dgx.placement_of("b").exclusive_cpus) == 2


def test_cpus_needed_rounds_up_and_is_never_zero():
    assert [cpus_needed(m) for m in (None, 0, 2, 1000, 1001, 2500)] == [1, 1, 1, 1, 2, 3]


def test_changes_rechecks_everyone_only_when_the_allocators_cpus_moved(dgx):
    pool = CpuPool(dgx)
    everything = dgx.topology.online
    for owner in ("a", "b"):
        pool.join(owner, PoolMember(1))
    assert pool.changes() == {"a": everything, "b": everything}  # never told before
    # A placement without CPUs moves no cpuset: nothing to re-check, nothing sent.
    generation = dgx.cpu_generation
    dgx.allocate(Req("gpu-only", align=False))
    assert dgx.cpu_generation == generation
    assert pool.changes() == {}
    # A member joined since the last call is checked without a full pass.
    pool.join("c", PoolMember(1))
    assert pool.changes() == {"c": everything}
    # An excluded member (its own CreateContainer answer) is checked the next time.
    pool.join("d", PoolMember(1))
    assert pool.changes(exclude="d") == {}
    assert pool.changes() == {"d": everything}
    # Exclusive CPUs taken: every member's cpuset moved, including the excluded one later.
    held = dgx.allocate(Req("excl", exclusive_cpus=4)).exclusive_cpus
    assert dgx.cpu_generation > generation
    assert pool.changes(exclude="a") == {o: everything - held for o in ("b", "c", "d")}
    assert pool.changes() == {"a": everything - held}
    # Given back (a release): every member again.
    dgx.release("excl")
    assert pool.changes() == {o: everything for o in ("a", "b", "c", "d")}


def test_an_answered_member_is_skipped_only_while_nothing_can_move_its_cpuset(dgx):
    """`answer` counts a member as told, so that `changes` need not look at it again, as
    long as the allocator's CPUs stay put and it does not join again; any of those moves
    is still sent (every CreateContainer answers one member and excludes it)."""
    pool = CpuPool(dgx)
    everything = dgx.topology.online
    pool.join("a", PoolMember(1))
    assert pool.answer("a") == everything
    assert pool.changes(exclude="a") == {}
    pool.join("b", PoolMember(1))
    assert pool.answer("b") == everything
    assert pool.changes(exclude="b") == {}
    assert pool.changes() == {}  # both answered what they still should have
    # Exclusive CPUs taken after "b" was answered: "b" moved, and is sent.
    p = dgx.allocate(Req("x", exclusive_cpus=2))
    pool.join("x", PoolMember(4))
    assert pool.answer("x") == everything  # its 2 and the shared pool for the rest
    assert pool.changes(exclude="x") == {o: everything - p.exclusive_cpus for o in "ab"}
    # Its need shrinks to its own CPUs after its answer (a resize, no allocator change):
    # joined again, so checked, though the allocator's CPUs did not move.
    generation = dgx.cpu_generation
    pool.join("x", PoolMember(2))
    assert dgx.cpu_generation == generation
    assert pool.changes() == {"x": p.exclusive_cpus}
    # A member excluded before any answer is still checked the next time.
    pool.join("c", PoolMember(1))
    assert pool.changes(exclude="c") == {}
    assert pool.changes() == {"c": everything - p.exclusive_cpus}


def test_reported_cpusets_say_which_cpus_other_containers_run_on():
    """A cpuset of every online CPU, none, or one the kernel would not take counts for no
    CPU; a container's own cpuset counts for it only as often as another reports it."""
    online = parse_cpulist("0-31")
    reported = ["0-31", "", "0-3", "4-5", "4-5", "6,x", "8-9"]
    cpusets = ReportedCpusets(reported, online)
    assert cpusets.elsewhere("0-3") == parse_cpulist("4-5,8-9")
    assert cpusets.elsewhere("4-5") == parse_cpulist("0-5,8-9")  # a replica has 4-5 too
    assert cpusets.elsewhere("0-31") == cpusets.elsewhere("") == parse_cpulist("0-5,8-9")
    assert ReportedCpusets(["0-31", ""], online).elsewhere("0-31") == frozenset()


def test_an_answer_looks_only_at_the_cpusets_that_must_move(dgx, monkeypatch):
    """widen=False (an answer to a create, stop or resize): only the members on CPUs that
    became exclusive since are looked at, found through the cpusets they were told, not
    by a look at every member; CPUs given back wait out of every cpuset until widen=True
    (the drift pass, a Synchronize), and the next exclusive request takes them again
    without moving anyone."""
    pool = CpuPool(dgx)
    everything = dgx.topology.online
    for i in range(1000):
        pool.join(f"n{i}", PoolMember(1))
    assert len(pool.changes()) == 1000  # never told before
    looked: list[str] = []
    real = pool.cpuset
    monkeypatch.setattr(
        pool, "cpuset", lambda owner, need=None: (looked.append(owner), real(owner, need))[1]
    )
    held = dgx.allocate(Req("e1", exclusive_cpus=4)).exclusive_cpus
    assert pool.changes("e1", widen=False) == {
        f"n{i}": everything - held for i in range(1000)
    }  # they held them: all move
    dgx.release("e1")
    looked.clear()
    assert pool.changes("e1", widen=False) == {}  # a stop moves nobody
    again = dgx.allocate(Req("e2", exclusive_cpus=4)).exclusive_cpus
    assert again == held and pool.changes("e2", widen=False) == {}
    dgx.release("e2")
    assert pool.changes("e2", widen=False) == {} and looked == []  # nobody looked at
    assert pool.current("n0") == everything - held  # what it has until widened
    assert pool.changes(widen=True) == {f"n{i}": everything for i in range(1000)}
    assert pool.current("n0") == everything
