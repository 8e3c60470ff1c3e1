"""preferred_gpus(): the adapter GetPreferredAllocation asks, on the DGX-like box (quads
0-3 and 4-7 fully NVLinked, plus i <-> i+4)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nri_plugin.kubelet.selection import preferred_gpus
from nri_plugin.topology.snapshot import load_snapshot

DGX = load_snapshot(Path(__file__).resolve().parents[2] / "examples" / "dgx-like.yaml").inventory
G = DGX.gpus


def _indices(gpus):
    return [g.index for g in gpus]


def _linked(gpus) -> bool:
    return all(h.index in g.nvlink_peers for g in gpus for h in gpus if h is not g)


@pytest.mark.parametrize("size", [1, 2, 3, 4])
def test_unpinned_choices_are_nvlinked_within_one_numa_node(size):
    picked = preferred_gpus(DGX, G, (), size)
    assert len(picked) == size and _linked(picked)
    assert len({g.numa_node for g in picked}) == 1


def test_no_linked_set_falls_back_to_one_numa_node_then_anywhere():
    # 0 and 5: not linked, different nodes; 1 and 2 free on node 0 too
    assert _indices(preferred_gpus(DGX, [G[0], G[5], G[7]], (), 2)) == [5, 7]
    picked = preferred_gpus(DGX, [G[0], G[6]], (), 2)
    assert _indices(picked) == [0, 6]  # the only two there are


def test_pinned_gpus_are_completed_with_their_best_linked_peers():
    picked = preferred_gpus(DGX, G, [G[0], G[5]], 3)
    # 1 and 4 are NVLinked to both 0 and 5: one of them completes the set
    assert {0, 5} <= set(_indices(picked)) and len(picked) == 3
    extra = next(g for g in picked if g.index not in (0, 5))
    assert {0, 5} <= extra.nvlink_peers
    assert _indices(preferred_gpus(DGX, G, [G[3]], 1)) == [3]
    assert _indices(preferred_gpus(DGX, G, (), 0)) == []
