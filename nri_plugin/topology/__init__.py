"""Node facts: CPUs, SMT siblings, NUMA nodes (sysfs) and GPUs (NVML, sysfs or snapshot).

Names are imported lazily (PEP 562): the OCI hook imports `nri_plugin.topology.cpulist` on
every container start (cpuset read-backs) and must not pay for YAML, logging, NVML or
importlib modules it does not use.
"""

from __future__ import annotations

from nri_plugin.lazyexports import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(globals(), {
    "cpulist": ("format_cpulist", "parse_cpulist"),
    "cpus": ("NumaNode", "Topology", "read_topology"),
    "errors": ("CpuListError", "InventoryError", "SnapshotError", "TopologyError"),
    "gpus": ("Gpu", "GpuInventory", "MigInstance"),
    "inventory": ("load_inventory",),
    "snapshot": ("NodeSnapshot", "load_snapshot", "save_snapshot"),
})
