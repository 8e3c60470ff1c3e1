"""The topology layer's failures. Lean (only nri_plugin.errors): the OCI hook loads it
with the CPU-list parser on every container start."""

from nri_plugin.errors import InternalFailure, InvalidInput


class CpuListError(InvalidInput, ValueError):
    """A CPU list that is not in the kernel's "0-3,8-11" notation."""

    def __init__(self, text: str, detail: str) -> None:
        self.text = text
        self.detail = detail  # `reason` stays the metric label
        super().__init__(f"invalid CPU list {text!r}: {detail} (expected e.g. '0-3,8-11')")


class TopologyError(InternalFailure):
    """sysfs does not describe a usable CPU topology."""


class InventoryError(InternalFailure):
    """A GPU inventory source cannot be read (NVML, sysfs, an unknown source name), or a
    GPU's facts contradict each other."""


class SnapshotError(InvalidInput):
    """A snapshot file nri-sla cannot use: the operator's input (`--inventory`,
    gpu.inventory), not a host fact that failed (InventoryError)."""
