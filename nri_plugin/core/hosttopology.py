"""The host's GPUs and topology as a node sees them: the GPU inventory reader, one read of
it, and the GPU / exclusive-CPU allocator over them (or over a replayed snapshot). The
plugin's node is built with them (core.nodebuild); the OCI hook's one-shot node builds an
allocator only for an SLA that asks for placement, so nothing here is imported before.
"""

from __future__ import annotations

TYPE_CHECKING = False  # `typing` costs the OCI hook start-up time; only checkers need it
if TYPE_CHECKING:
    from nri_plugin.config.values import NodeConfig
    from nri_plugin.plan.allocator import Allocator
    from nri_plugin.topology.gpus import GpuInventory
    from nri_plugin.topology.inventory import InventoryReader


def inventory_reader(
    config: NodeConfig, sysfs_root: str = "/sys", inventory_file: str | None = None
) -> InventoryReader:
    """The reader of the node's GPUs from where the config says (or a replayed snapshot
    file); one per process, so that it keeps NVML's last good read."""
    from pathlib import Path

    from nri_plugin.topology.inventory import InventoryReader, configured_reader

    if inventory_file:
        return InventoryReader("snapshot", snapshot=Path(inventory_file))
    return configured_reader(config.gpu.inventory, Path(sysfs_root))


def read_gpu_inventory(
    config: NodeConfig, sysfs_root: str = "/sys", inventory_file: str | None = None
) -> GpuInventory:
    """The node's GPUs from where the config says (or a replayed snapshot file), once."""
    return inventory_reader(config, sysfs_root, inventory_file).read()


def node_allocator(
    config: NodeConfig,
    sysfs_root: str = "/sys",
    *,
    inventory_file: str | None = None,
    gpus: bool = True,
    inventory: GpuInventory | None = None,
) -> Allocator:
    """The GPU / exclusive-CPU allocator over this node (or a replayed snapshot).
    gpus=False: topology only, no GPU inventory (NVML) loaded; `inventory`: one already
    read."""
    from nri_plugin.plan.allocator import Allocator
    from nri_plugin.topology.cpus import read_topology
    from nri_plugin.topology.gpus import GpuInventory

    reserved = frozenset(config.reserved_cpus)
    if inventory_file:
        from pathlib import Path

        from nri_plugin.topology.snapshot import load_snapshot

        snapshot = load_snapshot(Path(inventory_file))
        return Allocator(snapshot.topology, inventory or snapshot.inventory, reserved)
    if inventory is None:
        inventory = read_gpu_inventory(config, sysfs_root) if gpus else GpuInventory()
    return Allocator(read_topology(sysfs_root), inventory, reserved)
