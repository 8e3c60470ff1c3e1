"""Enforcement: node facts, direct cgroup writes with read-back, RT budget, NRI adjustments.

Importing this package (and any module in it except adjustment.py) must stay cheap and free
of protobuf: the OCI hook imports it on every container start. Hence no re-exports of
adjustment here, and cgroupspy is imported lazily by the writers that use it.
"""

from nri_sla.enforce.cgroupfs import (
    CgroupV1Writer,
    CgroupV2Writer,
    CgroupWrite,
    WriteResult,
    apply_to_container,
    raise_for_failures,
    writer_for,
)
from nri_sla.enforce.errors import (
    CgroupFactsError,
    CgroupPathError,
    CgroupWriteError,
    DeviceError,
    EnforceError,
    RtBudgetError,
)
from nri_sla.enforce.nodefacts import (
    CgroupFacts,
    CgroupPaths,
    bfq_active,
    cgroup_paths_from_proc,
    container_cgroup_paths,
    detect_cgroup_facts,
    io_scheduler,
    resolve_block_device,
)
from nri_sla.enforce.rt import RtChange, raise_rt_ancestors, release_rt_ancestors

__all__ = [
    "CgroupFacts",
    "CgroupFactsError",
    "CgroupPathError",
    "CgroupPaths",
    "CgroupV1Writer",
    "CgroupV2Writer",
    "CgroupWrite",
    "CgroupWriteError",
    "DeviceError",
    "EnforceError",
    "RtBudgetError",
    "RtChange",
    "WriteResult",
    "apply_to_container",
    "bfq_active",
    "cgroup_paths_from_proc",
    "container_cgroup_paths",
    "detect_cgroup_facts",
    "io_scheduler",
    "raise_for_failures",
    "raise_rt_ancestors",
    "release_rt_ancestors",
    "resolve_block_device",
    "writer_for",
]
