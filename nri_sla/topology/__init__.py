"""Node facts: CPUs, SMT siblings, NUMA nodes (sysfs) and GPUs (NVML, sysfs or snapshot)."""

from nri_sla.topology.cpulist import CpuListError, format_cpulist, parse_cpulist
from nri_sla.topology.cpus import NumaNode, Topology, TopologyError, read_topology
from nri_sla.topology.gpus import Gpu, GpuInventory, InventoryError, MigInstance
from nri_sla.topology.inventory import load_inventory
from nri_sla.topology.snapshot import NodeSnapshot, load_snapshot, save_snapshot

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
