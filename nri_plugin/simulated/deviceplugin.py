"""The NVIDIA GPU device plugin, simulated: what it advertises, what its Allocate answers
in each of its device-list strategies, and the CDI specs its node has.

The kubelet (kubelet.py) picks the device ids; Allocate turns them into what the runtime
gets in the CRI request. The NVIDIA device plugin's strategies (`deviceListStrategy`):

* envvar: NVIDIA_VISIBLE_DEVICES=<uuid,...>; nvidia-container-runtime (legacy mode)
  reads it and mounts the GPUs in;
* volume-mounts: one mount per device at /var/run/nvidia-container-devices/<uuid> (and
  NVIDIA_VISIBLE_DEVICES pointing there), read by the runtime when configured to;
* cdi-cri: CRI CDI devices `k8s.device-plugin.nvidia.com/gpu=<uuid>`;
* cdi-annotations: the same names in a `cdi.k8s.io/` annotation (containerd resolves
  those too);

and, as its passDeviceSpecs option (and other device plugins, and `nri-sla
device-plugin`) answer, device-nodes: /dev/nvidiaN with the host's numbers plus the
control nodes; for a MIG device its parent's node and its /dev/nvidia-caps access nodes.

Device ids are the GPUs' UUIDs (the plugin's default `device-id-strategy`); MIG-mode GPUs
are not advertised whole. With `mig=True` (its `mixed` MIG strategy, one resource for
brevity) the MIG devices are advertised instead, by MIG UUID. With `replicas` (its
time-slicing or MPS sharing) every device is advertised that many times as
`<id>::<n>`, under `resource` (`nvidia.com/gpu.shared` with renameByDefault); the grant
of a replica is its device.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from nri_plugin.errors import InvalidInput
from nri_plugin.simulated.cdi import CdiSpec, ContainerEdits, DeviceNode, Mount
from nri_plugin.simulated.ocispec import DEVICE_MOUNT_DIR, ENV_VISIBLE, NVIDIA_MAJOR
from nri_plugin.topology.gpus import Gpu, GpuInventory, MigInstance

RESOURCE = "nvidia.com/gpu"
STRATEGIES = ("envvar", "volume-mounts", "cdi-cri", "cdi-annotations", "device-nodes")
PLUGIN_CDI_KIND = "k8s.device-plugin.nvidia.com/gpu"  # the names the plugin's CDI uses
CDI_KINDS = ("nvidia.com/gpu", PLUGIN_CDI_KIND)  # what nvidia-ctk and the plugin generate
ANNOTATION_KEY = "cdi.k8s.io/nvidia-device-plugin_gpu"
NVIDIACTL = DeviceNode("/dev/nvidiactl", "c", NVIDIA_MAJOR, 255)
# nvidia-uvm's major is given out by the kernel at load time; any value but 195 will do.
NVIDIA_UVM = DeviceNode("/dev/nvidia-uvm", "c", 508, 0)
CAPS_MAJOR = 511  # nvidia-caps: the kernel's choice too (/proc/devices)


@dataclass(frozen=True)
class ContainerAllocation:
    """The plugin's ContainerAllocateResponse: what the kubelet puts in the CRI request."""

    envs: Mapping[str, str] = field(default_factory=dict, hash=False)
    mounts: tuple[Mount, ...] = ()
    devices: tuple[DeviceNode, ...] = ()
    annotations: Mapping[str, str] = field(default_factory=dict, hash=False)
    cdi_devices: tuple[str, ...] = ()


def gpu_node(gpu: Gpu) -> DeviceNode:
    return DeviceNode(f"/dev/nvidia{gpu.device_minor}", "c", NVIDIA_MAJOR, gpu.device_minor)


def mig_nodes(parent: Gpu, mig: MigInstance) -> tuple[DeviceNode, ...]:
    """What opens a MIG device: its parent's node and its access nodes."""
    return (
        gpu_node(parent),
        *(
            DeviceNode(f"/dev/nvidia-caps/nvidia-cap{m}", "c", CAPS_MAJOR, m)
            for m in mig.caps_minors
        ),
    )


class DevicePlugin:
    def __init__(
        self,
        inventory: GpuInventory,
        strategy: str = "cdi-cri",
        *,
        mig: bool = False,
        replicas: int = 0,
        resource: str = RESOURCE,
    ) -> None:
        if strategy not in STRATEGIES:
            raise InvalidInput(
                f"device list strategy {strategy!r}: allowed {', '.join(STRATEGIES)}"
            )
        self.strategy = strategy
        self.resource = resource
        self.replicas = replicas
        self._gpus = {g.uuid: g for g in inventory.gpus if not g.mig_enabled and g.uuid}
        self._migs = (
            {m.uuid: (g, m) for g in inventory.gpus if g.mig_enabled for m in g.mig_instances}
            if mig
            else {}
        )

    def device_ids(self) -> tuple[str, ...]:
        """What ListAndWatch advertises for its resource, in the inventory's order."""
        ids = tuple(self._migs) if self._migs else tuple(self._gpus)
        if not self.replicas:
            return ids
        return tuple(f"{i}::{n}" for i in ids for n in range(self.replicas))

    def allocate(self, ids: Sequence[str]) -> ContainerAllocation:
        unknown = [i for i in ids if i not in self.device_ids()]
        if unknown:
            raise InvalidInput(f"Allocate: unknown device ids {', '.join(unknown)}")
        devices = list(dict.fromkeys(i.partition("::")[0] for i in ids))  # replicas: once
        names = ",".join(devices)
        if self.strategy == "envvar":
            return ContainerAllocation(envs={ENV_VISIBLE: names})
        if self.strategy == "volume-mounts":
            return ContainerAllocation(
                envs={ENV_VISIBLE: DEVICE_MOUNT_DIR.rstrip("/")},
                mounts=tuple(Mount(DEVICE_MOUNT_DIR + i, "/dev/null") for i in devices),
            )
        cdi = tuple(f"{PLUGIN_CDI_KIND}={i}" for i in devices)
        if self.strategy == "cdi-cri":
            return ContainerAllocation(cdi_devices=cdi)
        if self.strategy == "cdi-annotations":
            return ContainerAllocation(annotations={ANNOTATION_KEY: ",".join(cdi)})
        nodes = [
            n
            for i in devices
            for n in (mig_nodes(*self._migs[i]) if i in self._migs else (gpu_node(self._gpus[i]),))
        ]
        return ContainerAllocation(devices=(*dict.fromkeys(nodes), NVIDIACTL, NVIDIA_UVM))


def nvidia_cdi_specs(inventory: GpuInventory) -> list[CdiSpec]:
    """The node's CDI specs for its whole GPUs and MIG devices, under both kinds, each GPU
    by UUID and by index (and `all`), each MIG device by UUID and "<gpu>:<mig>"; the common
    edits add the control nodes and, as nvidia-ctk's specs do, NVIDIA_VISIBLE_DEVICES=void
    so that the legacy runtime adds nothing on top."""
    whole = [g for g in inventory.gpus if not g.mig_enabled]
    devices: dict[str, ContainerEdits] = {}
    for gpu in whole:
        edits = ContainerEdits(device_nodes=(gpu_node(gpu),))
        devices[str(gpu.index)] = edits
        if gpu.uuid:
            devices[gpu.uuid] = edits
    for gpu in inventory.gpus:
        for mig in gpu.mig_instances if gpu.mig_enabled else ():
            edits = ContainerEdits(device_nodes=mig_nodes(gpu, mig))
            devices[f"{gpu.index}:{mig.index}"] = devices[mig.uuid] = edits
    devices["all"] = ContainerEdits(device_nodes=tuple(gpu_node(g) for g in whole))
    common = ContainerEdits(env=(f"{ENV_VISIBLE}=void",), device_nodes=(NVIDIACTL, NVIDIA_UVM))
    return [CdiSpec(kind=kind, devices=devices, edits=common) for kind in CDI_KINDS]
