"""Enforcement: cgroup facts and paths, plan -> cgroup writes, the one cgroup writer with
read-back, node capabilities (block devices, BFQ), the RT budget of ancestor cgroups.

Importing this package (and any module in it) must stay cheap and free of protobuf: the
OCI hook imports it on every container start. The NRI adjustment is built on the plugin
side (nri_plugin.plugin); cgroupspy is imported only by v1 writes.
"""

from nri_plugin.lazyexports import lazy_exports

# The OCI hook imports single light modules (readback, systemd) on every container start
# and must not pay for the writers, node facts and dataclasses behind these names.
__getattr__, __dir__, __all__ = lazy_exports(globals(), {
    "cgfile": ("CgroupWrite", "CgroupWriter", "WriteResult"),
    "cgpaths": ("CgroupFacts", "CgroupPaths", "Hierarchy"),
    "cgroupdetect": ("detect_cgroup_facts",),
    "errors": ("CgroupFactsError", "CgroupPathError", "CgroupWriteError", "DeviceError",
               "EnforceError", "RtBudgetError"),
    "rt": ("RtChange", "raise_rt_ancestors", "release_rt_ancestors"),
})
