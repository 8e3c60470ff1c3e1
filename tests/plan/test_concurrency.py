"""Concurrent allocate/restore/release: no exclusive CPU is ever held twice, and every
container holds exactly the GPUs it was granted."""

import threading
from collections import Counter

from nri_plugin.plan.allocator import Allocator
from nri_plugin.plan.errors import PlacementError
from tests.support.grant_helpers import granted


def _run(threads_fn):
    errors: list[BaseException] = []

    def guard(fn):
        def run():
            try:
                fn()
            except BaseException as exc:  # surfaced in the main thread below
                errors.append(exc)

        return run

    threads = [threading.Thread(target=guard(fn)) for fn in threads_fn]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors


def _assert_no_double_holding(alloc: Allocator):
    # One consistent look: the allocator's own (re-entrant) lock held across the reads,
    # or another thread's release between owners() and placement_of() fails the check
    # without the allocator having done anything wrong.
    with alloc._lock:
        cpus = Counter()
        holders: dict[int, set[str]] = {}
        for owner in alloc.owners():
            p = alloc.placement_of(owner)
            for g in p.gpus:
                holders.setdefault(g.index, set()).add(owner)
            cpus.update(p.exclusive_cpus)
        in_use = {i: set(h) for i, h in alloc.gpus_in_use().items()}
    assert all(n == 1 for n in cpus.values()), cpus
    # the GPU tables say exactly what the placements hold
    assert in_use == holders


def test_parallel_allocations_never_share(dgx):
    barrier = threading.Barrier(16)
    won, lost = [], []

    def worker(i):
        def go():
            barrier.wait()
            for round_ in range(20):
                owner = f"c{i}-{round_}"
                try:
                    dgx.allocate(granted(dgx, owner, i % 8, exclusive_cpus=2))
                    won.append(owner)
                except PlacementError:
                    lost.append(owner)
                _assert_no_double_holding(dgx)
                if round_ % 3 == 2:
                    dgx.release(owner)

        return go

    _run([worker(i) for i in range(16)])
    assert won and lost  # the node's 16 cores run out; the GPUs are the grants'
    _assert_no_double_holding(dgx)


def test_restores_race_allocations(dgx_node):
    source = Allocator(*dgx_node)
    records = {
        f"old{i}": source.allocate(granted(source, f"old{i}", i, exclusive_cpus=2)).to_record()
        for i in range(6)
    }
    target = Allocator(*dgx_node)
    barrier = threading.Barrier(12)
    outcomes = Counter()

    def restorer(owner, record):
        def go():
            barrier.wait()
            try:
                target.restore(owner, record)
                outcomes["restored"] += 1
            except PlacementError:
                outcomes["refused"] += 1

        return go

    def allocator(i):
        def go():
            barrier.wait()
            try:
                target.allocate(granted(target, f"new{i}", i, exclusive_cpus=2))
                outcomes["allocated"] += 1
            except PlacementError:
                outcomes["full"] += 1

        return go

    _run([restorer(o, r) for o, r in records.items()] + [allocator(i) for i in range(6)])
    assert sum(outcomes.values()) == 12
    _assert_no_double_holding(target)
    # every restore either got exactly its recorded GPU or was refused (its CPUs taken)
    for owner in records:
        p = target.placement_of(owner)
        if p is not None:
            assert [g.ref for g in p.gpus] == records[owner]["gpus"]
