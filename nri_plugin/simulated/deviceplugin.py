"""A GPU device plugin, simulated, for `nri-sla demo` and `explain`.

The kubelet asks the device plugin for the GPUs a container's limits name
(`nvidia.com/gpu: N`) and hands them to the runtime, here as CDI device names. Like a
device plugin without topology hints it gives the lowest free GPUs; nri-sla may then
choose better-placed ones of the same count (nri_plugin.plan.grants).
"""

from __future__ import annotations

from nri_plugin.topology.gpus import GpuInventory

CDI_PREFIX = "nvidia.com/gpu="  # the NVIDIA device plugin's CDI kind


class DevicePlugin:
    """Whole GPUs handed out in index order; each once."""

    def __init__(self, inventory: GpuInventory) -> None:
        self._free = [g for g in inventory.gpus if not g.mig_enabled]

    def allocate(self, count: int) -> tuple[str, ...]:
        """CDI names of `count` GPUs (fewer when the node has no more: the kubelet would
        not admit such a pod; a dry run shows what the rest makes of it)."""
        taken, self._free = self._free[:count], self._free[count:]
        return tuple(f"{CDI_PREFIX}{g.uuid}" for g in taken)
