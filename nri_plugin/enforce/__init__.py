"""Enforcement: cgroup facts and paths, plan -> cgroup writes, the one cgroup writer with
read-back, node capabilities (block devices, BFQ), the RT budget of ancestor cgroups.

Import the modules themselves (`nri_plugin.enforce.cgfile`, ...): this package's __init__
is empty on purpose. The OCI hook imports its light modules (cgpaths, cgfile, readback,
errors) on every container start, and even lazy re-exports here would cost each start one
module more (docs/hook.md). Nothing here imports protobuf; the NRI adjustment is built on
the plugin side (nri_plugin.plugin); cgroupspy is imported only by v1 writes.
"""
