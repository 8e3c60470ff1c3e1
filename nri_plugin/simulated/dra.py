"""NVIDIA's DRA driver for GPUs (k8s-dra-driver-gpu), simulated: the CDI names and specs
a prepared claim leaves, and the PodResources entry the kubelet reports for it.

The driver's kubelet plugin writes one standard spec (kind `k8s.gpu.nvidia.com/device`)
naming each GPU `gpu-<minor>` and each MIG device `gpu-<parent minor>-mig-<profile
without dots>-...` (its placement; the simulation puts the GPU instance id there, which
the inventory holds), whose edits open the device, and per prepared claim a spec of kind
`k8s.gpu.nvidia.com/claim` naming `<claim uid>-<device name>`, whose edits carry the
claim's configuration (sharing settings: env only). The kubelet hands the container both
names as CRI CDI devices, and reports them under the claim in PodResources
`dynamic_resources`.
"""

from __future__ import annotations

from collections.abc import Sequence

from nri_plugin.kubelet.pb import podresources_v1_pb2 as pr
from nri_plugin.simulated.cdi import CdiSpec, ContainerEdits
from nri_plugin.simulated.deviceplugin import NVIDIA_UVM, NVIDIACTL, gpu_node, mig_nodes
from nri_plugin.topology.gpus import Gpu, GpuInventory, MigInstance

DRIVER = "gpu.nvidia.com"
DEVICE_KIND = "k8s.gpu.nvidia.com/device"
CLAIM_KIND = "k8s.gpu.nvidia.com/claim"
KINDS = (DEVICE_KIND, CLAIM_KIND)


def device_name(gpu: Gpu, mig: MigInstance | None = None) -> str:
    """The driver's name for a GPU or one of its MIG devices."""
    if mig is None:
        return f"gpu-{gpu.device_minor}"
    return f"gpu-{gpu.device_minor}-mig-{mig.profile.replace('.', '')}-{mig.gi_id}"


def standard_spec(inventory: GpuInventory) -> CdiSpec:
    """The driver's spec for every GPU and MIG device of the node."""
    devices: dict[str, ContainerEdits] = {}
    for gpu in inventory.gpus:
        if gpu.mig_enabled:
            for mig in gpu.mig_instances:
                devices[device_name(gpu, mig)] = ContainerEdits(device_nodes=mig_nodes(gpu, mig))
        else:
            devices[device_name(gpu)] = ContainerEdits(device_nodes=(gpu_node(gpu),))
    return CdiSpec(
        DEVICE_KIND,
        devices,
        ContainerEdits(env=("NVIDIA_VISIBLE_DEVICES=void",), device_nodes=(NVIDIACTL, NVIDIA_UVM)),
    )


def claim_spec(claim_uid: str, names: Sequence[str]) -> CdiSpec:
    """The spec of one prepared claim for its devices (by the driver's names)."""
    return CdiSpec(
        CLAIM_KIND,
        {f"{claim_uid}-{n}": ContainerEdits(env=(f"NVIDIA_DRA_CLAIM={claim_uid}",)) for n in names},
    )


def cdi_names(claim_uid: str, names: Sequence[str]) -> tuple[str, ...]:
    """The CDI names the kubelet passes the container for the claim's devices."""
    return tuple(
        cdi for n in names for cdi in (f"{DEVICE_KIND}={n}", f"{CLAIM_KIND}={claim_uid}-{n}")
    )


def dynamic_resource(
    claim: str, namespace: str, claim_uid: str, pool: str, names: Sequence[str]
) -> pr.DynamicResource:
    """The claim as PodResources reports it for the container."""
    return pr.DynamicResource(
        claim_name=claim,
        claim_namespace=namespace,
        claim_resources=[
            pr.ClaimResource(
                driver_name=DRIVER,
                pool_name=pool,
                device_name=n,
                cdi_devices=[
                    pr.CDIDevice(name=f"{DEVICE_KIND}={n}"),
                    pr.CDIDevice(name=f"{CLAIM_KIND}={claim_uid}-{n}"),
                ],
            )
            for n in names
        ],
    )
