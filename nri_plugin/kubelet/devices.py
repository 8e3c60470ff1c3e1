"""What `nri-sla device-plugin` advertises: one table of devices per extended resource,
built from a GPU inventory and a MIG strategy (NVIDIA's device plugin's names):

* none: whole GPUs as `<resource>` (default `nvidia.com/gpu`); MIG-enabled GPUs are left
  out (handing one out whole would bypass its MIG instances);
* single: every GPU is MIG-enabled with MIG devices of one profile, and those MIG devices
  are `<resource>`; without a MIG-enabled GPU, whole GPUs as with none. A node mixing
  them is refused (MigLayoutError), as NVIDIA's plugin refuses it;
* mixed: whole non-MIG GPUs as `<resource>`, MIG devices as `<domain>/mig-<profile>`
  (`nvidia.com/mig-1g.10gb`); profiles whose compute slices differ from their GPU
  slices (`1c.2g.20gb`) get no resource, as with NVIDIA's.

A device is Unhealthy when its GPU (a MIG device's parent) is not healthy by the
inventory (lost, unreadable: its last good facts are kept, its MIG mode unknown) or by
`health` given per device id. A device advertised once stays in its table, Unhealthy,
when a later read does not show it (NVML lost count of the GPU, a MIG layout changed):
a read failure never shrinks what the kubelet was told.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from nri_plugin.config.convert import MIG_STRATEGIES
from nri_plugin.kubelet.errors import MigLayoutError
from nri_plugin.kubelet.pb import deviceplugin_v1beta1_pb2 as pb
from nri_plugin.topology.gpus import Gpu, GpuInventory, MigInstance

if TYPE_CHECKING:
    from nri_plugin.config.convert import MigStrategy

log = logging.getLogger("nri_sla.kubelet.devices")

HEALTHY, UNHEALTHY = "Healthy", "Unhealthy"
# a MIG profile NVIDIA's plugin turns into a resource: <g>g.<mem>gb[+attributes]
_WHOLE_SLICE_PROFILE = re.compile(r"^\d+g\.\d+gb(\+[a-z0-9.]+)*$")


@dataclass(frozen=True)
class Device:
    """One advertised device: a whole GPU, or a MIG device of `gpu` (its parent)."""

    id: str
    gpu: Gpu
    mig: MigInstance | None = None
    healthy: bool = True

    @property
    def numa_node(self) -> int | None:
        return self.gpu.numa_node


def device_id(gpu: Gpu) -> str:
    """The id the kubelet knows a whole GPU by: its UUID, else its PCI bus id."""
    return gpu.uuid or gpu.pci_bus_id


@dataclass(frozen=True)
class DeviceTable:
    """One resource's devices by id (in advertising order) and the inventory they are
    from (GetPreferredAllocation scores whole GPUs with it)."""

    resource: str
    inventory: GpuInventory
    by_id: Mapping[str, Device]

    @property
    def unhealthy(self) -> frozenset[str]:
        return frozenset(i for i, d in self.by_id.items() if not d.healthy)

    @property
    def whole_gpus(self) -> bool:
        return all(d.mig is None for d in self.by_id.values())

    def devices(self) -> list[pb.Device]:
        return [
            pb.Device(
                ID=i,
                health=HEALTHY if d.healthy else UNHEALTHY,
                topology=None
                if d.numa_node is None
                else pb.TopologyInfo(nodes=[pb.NUMANode(ID=d.numa_node)]),
            )
            for i, d in self.by_id.items()
        ]


def mig_resource(resource: str, profile: str) -> str | None:
    """The mixed strategy's resource of a MIG profile (None: the profile gets none)."""
    if not _WHOLE_SLICE_PROFILE.match(profile):
        return None
    domain = resource.partition("/")[0]
    return f"{domain}/mig-{profile.replace('+', '.')}"


def build_tables(
    inventory: GpuInventory,
    strategy: MigStrategy,
    resource: str,
    health: Mapping[str, bool] | None = None,
    previous: Mapping[str, DeviceTable] | None = None,
) -> dict[str, DeviceTable]:
    """Resource -> its DeviceTable. Raises MigLayoutError when the single strategy meets
    a node it cannot advertise."""
    if strategy not in MIG_STRATEGIES:
        raise MigLayoutError(
            f"device-plugin.mig-strategy {strategy!r} is not one of {', '.join(MIG_STRATEGIES)}"
        )
    found: dict[str, dict[str, Device]] = {resource: {}}
    whole = [g for g in inventory.gpus if not g.mig_enabled]
    mig = [g for g in inventory.gpus if g.mig_enabled]
    if strategy == "single" and mig:
        _check_single(whole, mig)
    for g in whole:
        if device_id(g):  # a GPU NVML never told anything of has no id to list it by
            found[resource][device_id(g)] = Device(device_id(g), g, healthy=_fit(g))
    if strategy != "none":
        for g in mig:
            for m in g.mig_instances:
                name = resource if strategy == "single" else mig_resource(resource, m.profile)
                if name is None:
                    log.warning(
                        "MIG device %s (profile %s) of GPU %d: no resource for this "
                        "profile under the mixed strategy; not advertised",
                        m.uuid,
                        m.profile,
                        g.index,
                    )
                    continue
                found.setdefault(name, {})[m.uuid] = Device(m.uuid, g, m, healthy=_fit(g))
    health = health or {}
    tables = {}
    for name in sorted(found.keys() | (previous or {}).keys()):
        devices = {
            i: d if health.get(i) is not False else _unhealthy(d)
            for i, d in found.get(name, {}).items()
        }
        if previous and name in previous:
            for i, d in previous[name].by_id.items():
                devices.setdefault(i, _unhealthy(d))  # gone from this read: kept
        tables[name] = DeviceTable(name, inventory, devices)
    return tables


def _fit(gpu: Gpu) -> bool:
    """Whether the GPU may be handed out: healthy, and its MIG mode read this time."""
    return gpu.health.healthy and not gpu.mig_unknown


def _unhealthy(d: Device) -> Device:
    return d if not d.healthy else Device(d.id, d.gpu, d.mig, healthy=False)


def _check_single(whole: list[Gpu], mig: list[Gpu]) -> None:
    if whole:
        raise MigLayoutError(
            f"device-plugin.mig-strategy single needs every GPU in MIG mode or none; MIG "
            f"mode is on for {_gpus(mig)} and off for {_gpus(whole)} (use mixed)"
        )
    empty = [g for g in mig if not g.mig_instances]
    if empty:
        raise MigLayoutError(
            f"device-plugin.mig-strategy single: MIG mode is on for "
            f"{_gpus(empty)} without MIG devices"
        )
    profiles = sorted({m.profile for g in mig for m in g.mig_instances})
    if len(profiles) > 1:
        raise MigLayoutError(
            f"device-plugin.mig-strategy single needs MIG devices of one "
            f"profile, found {', '.join(profiles)} (use mixed)"
        )


def _gpus(gpus: list[Gpu]) -> str:
    return ("GPU " if len(gpus) == 1 else "GPUs ") + ", ".join(str(g.index) for g in gpus)
