"""WatchedInventory: the node's GPUs as one reader reads them, with the health a
GpuHealthMonitor knows of each applied. The NRI plugin and the device plugin both read
GPUs through it, so both see the same health for the same read."""

from __future__ import annotations

from nri_plugin.topology.gpus import GpuInventory
from nri_plugin.topology.health_monitor import GpuHealthMonitor, HealthChange
from nri_plugin.topology.inventory import InventoryReader


class WatchedInventory:
    """`read()` reads the GPUs again; `poll()` waits for health events (none without a
    monitor). `reader`: anything with read() -> GpuInventory (an InventoryReader)."""

    def __init__(self, reader: InventoryReader, monitor: GpuHealthMonitor | None = None) -> None:
        self.reader = reader
        self.monitor = monitor
        self.last: GpuInventory | None = None  # the last read, health applied

    @classmethod
    def of(cls, reader: InventoryReader) -> WatchedInventory:
        """`reader`'s GPUs, their health watched when NVML reads them (a snapshot or sysfs
        read has no NVML to hear XIDs from; NVML may answer later even if not now)."""
        return cls(reader, GpuHealthMonitor() if reader.source in ("auto", "nvml") else None)

    def read(self) -> GpuInventory:
        """Raises InventoryError (or OSError) when the GPUs cannot be read."""
        inventory = self.reader.read()
        if self.monitor is not None:
            self.monitor.track(inventory)
            inventory = self.monitor.apply(inventory)
        self.last = inventory
        return inventory

    def poll(self, timeout_ms: int = 0) -> HealthChange | None:
        """One health step; None when nothing is watched."""
        if self.monitor is None:
            return None
        return self.monitor.poll(timeout_ms)

    def with_health(self, inventory: GpuInventory) -> GpuInventory:
        """`inventory` with the health known now."""
        return self.monitor.apply(inventory) if self.monitor is not None else inventory

    def close(self) -> None:
        if self.monitor is not None:
            self.monitor.close()
