"""Enforcement: node facts, direct cgroup writes with read-back, RT budget, NRI adjustments.

Importing this package (and any module in it except adjustment.py) must stay cheap and free
of protobuf: the OCI hook imports it on every container start. Hence no re-exports of
adjustment here, and cgroupspy is imported lazily by the writers that use it.
"""

# Re-exports resolved on first use (PEP 562): the OCI hook imports single light modules
# (readback, systemd) on every container start and must not pay for the writers, node
# facts and dataclasses that importing them all here would cost.
_EXPORTS = {
    "cgroupfs": ("CgroupV1Writer", "CgroupV2Writer", "CgroupWrite", "WriteResult",
                 "apply_to_container", "raise_for_failures", "writer_for"),
    "errors": ("CgroupFactsError", "CgroupPathError", "CgroupWriteError", "DeviceError",
               "EnforceError", "RtBudgetError"),
    "nodefacts": ("CgroupFacts", "CgroupPaths", "bfq_active", "cgroup_paths_from_proc",
                  "container_cgroup_paths", "detect_cgroup_facts", "io_scheduler",
                  "resolve_block_device"),
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
