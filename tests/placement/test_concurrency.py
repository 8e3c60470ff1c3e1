"""Concurrent allocate/restore/release: no GPU or CPU is ever held twice."""

import threading
from collections import Counter

from nri_plugin.plan.allocator import Allocator
from nri_plugin.plan.placement_values import PlacementError
from nri_plugin.plan.placement_values import PlacementRequest as Req


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
    gpus = Counter()
    cpus = Counter()
    for owner in alloc.owners():
        p = alloc.placement_of(owner)
        if not p.shared_gpus:
            gpus.update(g.index for g in p.gpus)
        cpus.update(p.exclusive_cpus)
    assert all(n == 1 for n in gpus.values()), gpus
    assert all(n == 1 for n in cpus.values()), cpus


def test_parallel_allocations_never_share(dgx):
    barrier = threading.Barrier(16)
    won, lost = [], []

    def worker(i):
        def go():
            barrier.wait()
            for round_ in range(20):
                owner = f"c{i}-{round_}"
                try:
                    dgx.allocate(Req(owner, gpu_count=1, exclusive_cpus=2))
                    won.append(owner)
                except PlacementError:
                    lost.append(owner)
                _assert_no_double_holding(dgx)
                if round_ % 3 == 2:
                    dgx.release(owner)
        return go

    _run([worker(i) for i in range(16)])
    assert won and lost
    _assert_no_double_holding(dgx)
    assert len(dgx.gpus_in_use()) <= 8


def test_restores_race_allocations(dgx_node):
    source = Allocator(*dgx_node)
    records = {f"old{i}": source.allocate(Req(f"old{i}", gpu_count=1, exclusive_cpus=2))
               .to_record() for i in range(6)}
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
                target.allocate(Req(f"new{i}", gpu_count=1, exclusive_cpus=2))
                outcomes["allocated"] += 1
            except PlacementError:
                outcomes["full"] += 1
        return go

    _run([restorer(o, r) for o, r in records.items()] + [allocator(i) for i in range(6)])
    assert sum(outcomes.values()) == 12
    _assert_no_double_holding(target)
    # every restore either got exactly its recorded GPU or was refused as a conflict
    for owner in records:
        p = target.placement_of(owner)
        if p is not None:
            assert [g.ref for g in p.gpus] == records[owner]["gpus"]
