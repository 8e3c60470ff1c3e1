"""A Python model of NVIDIA's best-effort GPU allocator (github.com/NVIDIA/go-gpuallocator,
`gpuallocator/besteffort_policy.go` and the pair links `gpuallocator/device.go` builds),
which NVIDIA's k8s-device-plugin runs for GetPreferredAllocation. Written here from
reading it, to compare nri-sla's choices with NVIDIA's on the simulated boxes.

What it models:
* a pair's score: its PCIe level from nvmlDeviceGetTopologyCommonAncestor (same board 60,
  one switch 50, several switches 40, host bridge 30, same CPU 20, across CPUs 10) plus
  100 per NVLink whose remote end is the other GPU's bus id. Links into an NVSwitch name
  the switch, not a GPU, so they score nothing (the allocator leaves NVSwitch to do);
* a set's score: the sum over its pairs; a partition's: the sum over its sets;
* the choice: of every partition of the available GPUs (padded with empty slots to a
  multiple of `size`, sets holding either no padding or all of it) into sets of `size`,
  the first with the highest score among those with a padding-free set holding every
  required GPU; from it, the first highest-scoring set holding the required GPUs.
  Ties go to the first found, in the order the Go loops walk (available order).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any

from nri_plugin.simulated.hardware import FakeNvml
from nri_plugin.topology.gpus import GpuInventory
from tests.support.selection_oracle import free_states, sums

# NVML topology level (nvmlGpuTopologyLevel_t) -> the allocator's PCIe pair score
_PCIE_SCORE = {0: 60, 10: 50, 20: 40, 30: 30, 40: 20, 50: 10}
_NVLINK_SCORE = 100


def pair_scores(nvml: FakeNvml) -> list[list[int]]:
    """The allocator's score of every pair of NVML's GPUs (by NVML index)."""
    nvml.nvmlInit()
    try:
        handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
        buses = [nvml.nvmlDeviceGetPciInfo(h).busId for h in handles]
        remotes = [_nvlink_remotes(nvml, h) for h in handles]
        n = len(handles)
        scores = [[0] * n for _ in range(n)]
        for i, j in combinations(range(n), 2):
            score = _pcie(nvml, handles[i], handles[j])
            score += _NVLINK_SCORE * sum(1 for bus in remotes[i] if _same_bus(bus, buses[j]))
            scores[i][j] = scores[j][i] = score
        return scores
    finally:
        nvml.nvmlShutdown()


def _pcie(nvml: FakeNvml, a: Any, b: Any) -> int:
    try:
        return _PCIE_SCORE[nvml.nvmlDeviceGetTopologyCommonAncestor(a, b)]
    except nvml.NVMLError:
        return 0  # the allocator records no PCIe link when NVML cannot tell


def _nvlink_remotes(nvml: FakeNvml, handle: Any) -> list[str]:
    found = []
    for link in range(nvml.NVML_NVLINK_MAX_LINKS):
        try:
            if nvml.nvmlDeviceGetNvLinkState(handle, link) != nvml.NVML_FEATURE_ENABLED:
                continue
            found.append(nvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link).busId)
        except nvml.NVMLError:
            continue
    return found


def _same_bus(a: str | bytes, b: str | bytes) -> bool:
    text = [x.decode() if isinstance(x, bytes) else x for x in (a, b)]
    return text[0].lower() == text[1].lower()


def _partitions(
    devices: list[int | None], size: int, callback: Callable[[list[tuple[int | None, ...]]], None]
) -> None:
    """Every partition into sets of `size`, first device of each set in increasing
    order, sets with some but not all of the padding skipped (iterateGPUPartitions)."""
    if size == 1:
        for d in devices:
            callback([(d,)])
        return
    padded = list(devices) + [None] * (-len(devices) % size)
    padding = padded.count(None)

    def walk(rest: list[int | None], accum: list[tuple[int | None, ...]]) -> None:
        if len(rest) == size:
            callback([*accum, tuple(rest)])
            return
        for tail in combinations(rest[1:], size - 1):  # the Go loops' order
            chosen = (rest[0], *tail)
            p = chosen.count(None)
            if p not in (0, padding):
                continue
            remaining = list(rest)
            for d in chosen:
                remaining.remove(d)
            walk(remaining, [*accum, chosen])

    walk(padded, [])


def best_effort(
    scores: list[list[int]], available: Sequence[int], required: Sequence[int], size: int
) -> tuple[int, ...]:
    """The GPUs (indexes) NVIDIA's best-effort policy picks; () when it picks none."""
    if size <= 0 or len(available) < size or len(required) > size:
        return ()
    need = set(required)

    def set_score(gpus: tuple[int | None, ...]) -> int:
        real = [g for g in gpus if g is not None]
        return sum(scores[a][b] for a, b in combinations(real, 2))

    def holds(gpus: tuple[int | None, ...]) -> bool:
        return need <= set(gpus)

    found: dict[str, Any] = {}  # the best partition so far and its score

    def consider(partition: list[tuple[int | None, ...]]) -> None:
        if not any(holds(s) and None not in s for s in partition):
            return
        score = sum(set_score(s) for s in partition)
        if not found or score > found["score"]:
            found.update(partition=partition, score=score)

    _partitions(list(available), size, consider)
    if not found:
        return ()
    candidates = [s for s in found["partition"] if holds(s)]
    if not candidates:
        return ()
    chosen = candidates[0]
    for s in candidates[1:]:
        if set_score(s) > set_score(chosen):
            chosen = s
    # a set with padding only wins where NVML told no pair's PCIe level (every score 0)
    return tuple(sorted(g for g in chosen if g is not None))


# --- comparing nri-sla's choices with the model's ---------------------------------------

METRICS = ("NVLinks", "NUMA nodes", "PCIe closeness")


def metrics(inventory: GpuInventory, gpus: Sequence[int]) -> tuple[int, int, int]:
    """What the comparison weighs a set by, each better when larger: (NVLinks over its
    pairs, minus the NUMA nodes it spans, PCIe closeness over its pairs)."""
    chosen = [g for g in inventory.gpus if g.index in set(gpus)]
    links, pcie = sums(chosen)
    return links, -len({g.numa_node for g in chosen}), pcie


@dataclass
class Tally:
    """Cases where either chooser's set is better, taking the metrics in order (NVLinks,
    then NUMA span, then PCIe locality), and each metric on its own."""

    cases: int = 0
    ours_better: int = 0
    theirs_better: int = 0
    by_metric: dict[str, list[int]] = field(
        default_factory=lambda: {m: [0, 0] for m in METRICS}
    )  # [ours, theirs] better
    worse: list[str] = field(default_factory=list)  # the cases where ours is worse

    def add(self, case: str, ours: tuple[int, ...], theirs: tuple[int, ...]) -> None:
        self.cases += 1
        if ours != theirs:
            if ours > theirs:
                self.ours_better += 1
            else:
                self.theirs_better += 1
                self.worse.append(f"{case}: ours {ours}, NVIDIA's {theirs}")
        for name, a, b in zip(METRICS, ours, theirs, strict=True):
            if a != b:
                self.by_metric[name][0 if a > b else 1] += 1


def compare(
    inventory: GpuInventory,
    scores: list[list[int]],
    cases: Iterable[tuple[frozenset[int], int]],
    choose: Callable[[frozenset[int], int], Sequence[int]],
) -> Tally:
    """Over (free GPUs, size) cases: nri-sla's set (`choose`) against the model's."""
    tally = Tally()
    for free, size in cases:
        ours = tuple(choose(free, size))
        theirs = best_effort(scores, sorted(free), (), size)
        if len(ours) != size or len(theirs) != size:
            raise AssertionError(
                f"free {sorted(free)} size {size}: ours {ours}, NVIDIA's {theirs}: not {size} GPUs"
            )
        tally.add(
            f"free {sorted(free)} size {size} ({ours} vs {theirs})",
            metrics(inventory, ours),
            metrics(inventory, theirs),
        )
    return tally


def every_case(inventory: GpuInventory) -> Iterator[tuple[frozenset[int], int]]:
    """Every free-GPU state with every request size it can serve."""
    for free in free_states(inventory):
        for size in range(1, len(free) + 1):
            yield free, size
