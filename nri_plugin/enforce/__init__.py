"""Enforcement: cgroup facts and paths, plan -> cgroup writes, the one cgroup writer with
read-back, node capabilities (block devices, BFQ), the RT budget of ancestor cgroups.

Importing this package (and any module in it) must stay cheap and free of protobuf: the
OCI hook imports it on every container start. The NRI adjustment is built on the plugin
side (nri_plugin.plugin); cgroupspy is imported only by v1 writes.
"""

# Re-exports resolved on first use (PEP 562): the OCI hook imports single light modules
# (readback, systemd) on every container start and must not pay for the writers, node
# facts and dataclasses that importing them all here would cost.
_EXPORTS = {
    "cgfile": ("CgroupWrite", "CgroupWriter", "WriteResult"),
    "cgpaths": ("CgroupFacts", "CgroupPaths", "Hierarchy"),
    "cgroupdetect": ("detect_cgroup_facts",),
    "errors": ("CgroupFactsError", "CgroupPathError", "CgroupWriteError", "DeviceError",
               "EnforceError", "RtBudgetError"),
    "rt": ("RtChange", "raise_rt_ancestors", "release_rt_ancestors"),
}
_WHERE = {name: module for module, names in _EXPORTS.items() for name in names}


def __getattr__(name: str) -> object:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_WHERE])


__all__ = sorted(_WHERE)  # resolved by __getattr__
