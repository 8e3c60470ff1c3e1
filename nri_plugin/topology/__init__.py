"""Node facts: CPUs, SMT siblings, NUMA nodes (sysfs) and GPUs (NVML, sysfs or snapshot).

Importers name the module they need (`cpus`, `cpulist`, `gpus`, `inventory`, `snapshot`):
the OCI hook imports `nri_plugin.topology.cpulist` on every container start (cpuset
read-backs), and this package imports nothing so that it pays for no YAML, logging or NVML.
"""
