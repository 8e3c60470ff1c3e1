"""Allocators over fake nodes: a DGX-like box, a PCIe box, a MIG box, a one-node box.
Requests for granted GPUs, small inventories, the GPUs a placement holds:
tests/support/grant_helpers.py."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from nri_plugin.plan.allocator import Allocator
from nri_plugin.simulated.hardware import (
    FakeNvml,
    build_mig_proc,
    build_sysfs,
    dgx_like_gpus,
    dgx_like_pci,
    mig_box_gpus,
    pcie_box_gpus,
    pcie_box_pci,
)
from nri_plugin.topology.cpus import Topology, read_topology
from nri_plugin.topology.gpus import GpuInventory
from nri_plugin.topology.inventory import load_inventory

Node = tuple[Topology, GpuInventory]


def _node(
    root: Path, nodes: int, cores: int, threads: int, pci, gpus, proc: Path | None = None
) -> Node:
    sysfs = build_sysfs(root / "sys", nodes=nodes, cores_per_node=cores, threads=threads, pci=pci)
    inv = load_inventory(
        "nvml", sysfs_root=sysfs, nvml=FakeNvml(gpus), proc_root=proc or root / "proc"
    )
    return read_topology(sysfs), inv


# node facts are immutable values: build each fake tree once per session


@pytest.fixture(scope="session")
def dgx_node(tmp_path_factory) -> Node:
    """2 NUMA nodes x 8 cores x 2 threads (node 0: CPUs 0-7,16-23), 8 GPUs, cube-mesh."""
    return _node(tmp_path_factory.mktemp("dgx"), 2, 8, 2, dgx_like_pci(), dgx_like_gpus())


@pytest.fixture(scope="session")
def pcie_node(tmp_path_factory) -> Node:
    """2 NUMA nodes x 4 cores x 2 threads, 4 GPUs (0,1 on node 0; 2,3 on node 1)."""
    return _node(tmp_path_factory.mktemp("pcie"), 2, 4, 2, pcie_box_pci(), pcie_box_gpus())


@pytest.fixture(scope="session")
def mig_node(tmp_path_factory) -> Node:
    root = tmp_path_factory.mktemp("mig")
    gpus = mig_box_gpus()
    proc = build_mig_proc(root / "proc", 0, gpus[0].migs)
    return _node(root, 1, 4, 2, [], gpus, proc)


@pytest.fixture
def dgx(dgx_node) -> Allocator:
    return Allocator(*dgx_node)


@pytest.fixture
def pcie(pcie_node) -> Allocator:
    return Allocator(*pcie_node)


@pytest.fixture
def mig(mig_node) -> Allocator:
    return Allocator(*mig_node)


@pytest.fixture(scope="session")
def topology_of(tmp_path_factory) -> Callable[..., Topology]:
    cache: dict[tuple[int, int, int], Topology] = {}

    def build(nodes: int = 2, cores: int = 4, threads: int = 2) -> Topology:
        key = (nodes, cores, threads)
        if key not in cache:
            root = tmp_path_factory.mktemp("topo")
            cache[key] = read_topology(
                build_sysfs(root, nodes=nodes, cores_per_node=cores, threads=threads)
            )
        return cache[key]

    return build
