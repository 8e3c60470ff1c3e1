"""GPUs a device plugin already assigned: NVIDIA_VISIBLE_DEVICES and CDI names."""

from __future__ import annotations

from collections.abc import Iterable

from nri_plugin.topology.gpus import Gpu, GpuInventory, MigInstance

_NOTHING = {"", "none", "void"}
CDI_GPU_PREFIX = "nvidia.com/gpu="


def resolve_runtime_devices(inventory: GpuInventory, visible_devices: str | None,
                            cdi_devices: Iterable[str] = ()
                            ) -> tuple[tuple[Gpu, ...], tuple[MigInstance, ...], tuple[str, ...]]:
    """GPUs (and MIG devices) named by NVIDIA_VISIBLE_DEVICES and CDI device names.

    NVIDIA_VISIBLE_DEVICES: "all", "none", "void", or a comma list of indexes, GPU UUIDs,
    MIG UUIDs or "<gpu>:<mig>" names. CDI: `nvidia.com/gpu=<index|uuid|all|gpu:mig>`;
    other vendors' CDI names are ignored. Returns (gpus, migs, unknown names); the GPUs
    include the parents of the MIG devices, in order of first mention.
    """
    names: list[str] = []
    if visible_devices is not None and visible_devices.strip().lower() not in _NOTHING:
        names += [t.strip() for t in visible_devices.split(",") if t.strip()]
    for cdi in cdi_devices:
        if cdi.startswith(CDI_GPU_PREFIX):
            names.append(cdi[len(CDI_GPU_PREFIX):].strip())
    gpus: dict[int, Gpu] = {}
    migs: list[MigInstance] = []
    unknown: list[str] = []
    for name in names:
        if name.lower() == "all":
            gpus.update((g.index, g) for g in inventory.gpus)
            continue
        found_mig = inventory.find_mig(name)
        if found_mig is not None:
            gpus.setdefault(found_mig[0].index, found_mig[0])
            if found_mig[1] not in migs:
                migs.append(found_mig[1])
            continue
        gpu = inventory.find(name)
        if gpu is None:
            unknown.append(name)
        else:
            gpus.setdefault(gpu.index, gpu)
    return tuple(gpus.values()), tuple(migs), tuple(unknown)
