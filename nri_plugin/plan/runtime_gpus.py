"""A container's GPU grant, read only from what the runtime and the kubelet wrote.

Evidence (nri_plugin.granted.GrantedResources, already bounded by its readers):
* CDI device names of a kind in the node config's `gpu.grant-cdi-kinds`; the name after
  "=" is an index, GPU UUID, MIG UUID, "<gpu>:<mig>" or "all";
* GPU device nodes (major 195) whose minor is a GPU's in the inventory (nvidiactl and
  nvidia-modeset are not GPUs);
* device ids of mounts under /var/run/nvidia-container-devices/ (the NVIDIA device
  plugin's volume-mounts strategy);
* device ids the kubelet reports for the container (PodResources), passed as `extra_ids`.

NVIDIA_VISIBLE_DEVICES is never a grant: a pod author or the image writes it. When it is
the only evidence, the grant is empty and `env_only` says what the env named, so that the
log and a refusal can say so.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from itertools import islice

from nri_plugin.granted import MAX_GRANT_ITEMS, NVIDIA_MAJOR, GrantedResources
from nri_plugin.topology.gpus import Gpu, GpuInventory, MigInstance

_NOTHING = {"", "none", "void"}
_CONTROL_MINORS = {254, 255}  # nvidia-modeset, nvidiactl


@dataclass(frozen=True)
class GpuGrant:
    """What a container was granted: whole GPUs, MIG devices, names that matched nothing
    on this node, and the env's GPU list when it was the only evidence (not a grant)."""

    gpus: tuple[Gpu, ...] = ()
    migs: tuple[tuple[Gpu, MigInstance], ...] = ()  # (parent GPU, MIG device)
    unknown: tuple[str, ...] = ()
    env_only: str | None = None

    @property
    def empty(self) -> bool:
        return not (self.gpus or self.migs)


NO_GRANT = GpuGrant()


def cdi_grant_names(cdi_devices: Iterable[str], kinds: Iterable[str]) -> list[str]:
    """The device names of the CDI devices whose kind ("vendor/class") is in `kinds`."""
    wanted = set(kinds)
    names = []
    for cdi in cdi_devices:
        kind, sep, name = cdi.partition("=")
        if sep and kind.strip() in wanted and name.strip():
            names.append(name.strip())
    return names


def resolve_grant(inventory: GpuInventory, granted: GrantedResources,
                  cdi_kinds: Iterable[str], extra_ids: Iterable[str] = ()) -> GpuGrant:
    """The GPUs and MIG devices `granted` names on this node (see the module docstring).
    `extra_ids`: the kubelet's device ids for the container (GPU UUIDs, MIG UUIDs or
    indexes), at most MAX_GRANT_ITEMS of them read."""
    if not granted.gpu_evidence and extra_ids == ():
        return NO_GRANT  # most containers: no evidence at all, nothing to look up
    names = cdi_grant_names(granted.cdi_devices, cdi_kinds)
    names += granted.device_mounts
    names += [str(i)[:128] for i in islice(extra_ids, MAX_GRANT_ITEMS)]
    gpus: dict[int, Gpu] = {}
    migs: dict[str, tuple[Gpu, MigInstance]] = {}
    unknown: list[str] = []
    by_minor = {g.device_minor: g for g in inventory.gpus}
    for major, minor in granted.gpu_devices:
        gpu = by_minor.get(minor) if major == NVIDIA_MAJOR else None
        if gpu is not None and minor not in _CONTROL_MINORS:
            gpus.setdefault(gpu.index, gpu)
    for name in names:
        if name.lower() == "all":
            gpus.update((g.index, g) for g in inventory.gpus)
            continue
        found_mig = inventory.find_mig(name)
        if found_mig is not None:
            migs.setdefault(found_mig[1].uuid, found_mig)
            continue
        gpu = inventory.find(name)
        if gpu is None:
            if name not in unknown:
                unknown.append(name)
        else:
            gpus.setdefault(gpu.index, gpu)
    env = granted.env_gpus
    env_only = None
    if not (gpus or migs or unknown) and env is not None and env.strip().lower() not in _NOTHING:
        env_only = env.strip()
    return GpuGrant(tuple(sorted(gpus.values(), key=lambda g: g.index)), tuple(migs.values()),
                    tuple(unknown), env_only)
