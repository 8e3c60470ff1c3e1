"""Node facts: CPUs, SMT siblings, NUMA nodes (sysfs) and GPUs (NVML, sysfs or snapshot).

Names are imported lazily (PEP 562): the OCI hook imports `nri_plugin.topology.cpulist` on
every container start (cpuset read-backs) and must not pay for YAML, logging, NVML or
importlib modules it does not use.
"""

from __future__ import annotations

_EXPORTS = {
    "CpuListError": "cpulist", "format_cpulist": "cpulist", "parse_cpulist": "cpulist",
    "NumaNode": "cpus", "Topology": "cpus", "TopologyError": "cpus", "read_topology": "cpus",
    "Gpu": "gpus", "GpuInventory": "gpus", "InventoryError": "gpus", "MigInstance": "gpus",
    "load_inventory": "inventory",
    "NodeSnapshot": "snapshot", "load_snapshot": "snapshot", "save_snapshot": "snapshot",
}

__all__ = [
    "CpuListError",
    "Gpu",
    "GpuInventory",
    "InventoryError",
    "MigInstance",
    "NodeSnapshot",
    "NumaNode",
    "Topology",
    "TopologyError",
    "format_cpulist",
    "load_inventory",
    "load_snapshot",
    "parse_cpulist",
    "read_topology",
    "save_snapshot",
]

TYPE_CHECKING = False  # `typing` costs the OCI hook start-up time; only checkers need it
if TYPE_CHECKING:
    from typing import Any

    from nri_plugin.topology.cpulist import CpuListError, format_cpulist, parse_cpulist
    from nri_plugin.topology.cpus import NumaNode, Topology, TopologyError, read_topology
    from nri_plugin.topology.gpus import Gpu, GpuInventory, InventoryError, MigInstance
    from nri_plugin.topology.inventory import load_inventory
    from nri_plugin.topology.snapshot import NodeSnapshot, load_snapshot, save_snapshot


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'nri_plugin.topology' has no attribute {name!r}")
    from importlib import import_module  # only here: the hook's read-backs load cpulist

    value = getattr(import_module(f"nri_plugin.topology.{module}"), name)
    globals()[name] = value
    return value
