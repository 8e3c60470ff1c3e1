"""A container's GPU grant, read only from what the runtime and the kubelet wrote.

Evidence (nri_plugin.granted.GrantedResources, already bounded by its readers):
* CDI device names of a kind in the node config's `gpu.grant-cdi-kinds`; the name after
  "=" is an index, GPU UUID, MIG UUID, "<gpu>:<mig>", "all", or a name NVIDIA's DRA
  driver writes (`gpu-<minor>`, `gpu-<minor>-mig-<profile>-...`, each possibly after
  `<claim uid>-`);
* GPU device nodes (major 195) whose minor is a GPU's in the inventory (nvidiactl and
  nvidia-modeset are not GPUs), and MIG access nodes (/dev/nvidia-caps/nvidia-capN): a
  MIG device is granted when the container has all of its caps minors, and then its
  parent's /dev/nvidiaN is the way to it, not a whole GPU;
* device ids of /dev/null mounts under /var/run/nvidia-container-devices/ (the NVIDIA
  device plugin's volume-mounts strategy);
* device ids the kubelet reports for the container (PodResources), passed as `extra_ids`:
  device-plugin ids and the CDI names of its DRA claims.

A device id `<id>::<n>` is replica n of a GPU or MIG device that NVIDIA's device plugin
shares by time-slicing or MPS: the device is granted, shared by design (`replicas`), so
that other replicas' holders beside it are no double grant.

A container whose device cgroup allows every device (privileged) sees every device node
without a grant: a system holder, whose device nodes are not read (`system`); its other
evidence still is.

NVIDIA_VISIBLE_DEVICES is never a grant: a pod author or the image writes it. When it is
the only evidence, the grant is empty and `env_only` says what the env named, so that the
log and a refusal can say so.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from itertools import islice

from nri_plugin.granted import MAX_GRANT_ITEMS, MAX_GRANT_NAME, NVIDIA_MAJOR, GrantedResources
from nri_plugin.topology.gpus import Gpu, GpuInventory, MigInstance
from nri_plugin.value import Frozen

_NOTHING = {"", "none", "void"}
_CONTROL_MINORS = {254, 255}  # nvidia-modeset, nvidiactl
REPLICA_SEPARATOR = "::"  # NVIDIA's annotated device id: <id>::<replica>
DRA_KINDS = ("k8s.gpu.nvidia.com/device", "k8s.gpu.nvidia.com/claim")  # NVIDIA's DRA driver
# NVIDIA's DRA driver: a GPU is "gpu-<minor>", a MIG device "gpu-<parent minor>-mig-..."
# (the rest names its profile without dots and its placement, in forms that changed
# between releases); claim-specific CDI names put "<claim uid>-" before it. Compiled at
# its first match (re keeps it), not at import: an OCI hook's cold run for a numa SLA
# imports this module and matches no DRA name.
_DRA_NAME = (
    r"(?:[0-9a-f]{8}(?:-[0-9a-f]{4}){3}-[0-9a-f]{12}-)?"
    r"gpu-(\d{1,6})(?:-mig-([a-z0-9-]{1,96}))?"
)


class GpuGrant(Frozen):
    """What a container was granted: whole GPUs, MIG devices, names that matched nothing
    on this node, and the env's GPU list when it was the only evidence (not a grant)."""

    gpus: tuple[Gpu, ...] = ()
    migs: tuple[tuple[Gpu, MigInstance], ...] = ()  # (parent GPU, MIG device)
    unknown: tuple[str, ...] = ()
    env_only: str | None = None
    # Gpu.identity of the GPUs and uuids of the MIG devices granted only as replicas
    # (time-slicing, MPS): shared with other replicas' holders by design.
    replicas: frozenset[str] = frozenset()
    system: bool = False  # it sees every device node (privileged): those are no grant

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


def resolve_grant(
    inventory: GpuInventory,
    granted: GrantedResources,
    cdi_kinds: Iterable[str],
    extra_ids: Iterable[str] = (),
) -> GpuGrant:
    """The GPUs and MIG devices `granted` names on this node (see the module docstring).
    `extra_ids`: the kubelet's device ids for the container (GPU UUIDs, MIG UUIDs,
    indexes, replica ids) and its DRA claims' CDI names, at most MAX_GRANT_ITEMS read."""
    if not granted.gpu_evidence and extra_ids == ():
        return NO_GRANT  # most containers: no evidence at all, nothing to look up
    kinds = tuple(cdi_kinds)
    extra = [str(i)[:MAX_GRANT_NAME] for i in islice(extra_ids, MAX_GRANT_ITEMS)]
    cdi = [*granted.cdi_devices, *(i for i in extra if "=" in i)]
    dra_kinds = [k for k in kinds if k in DRA_KINDS]
    names = cdi_grant_names(cdi, [k for k in kinds if k not in DRA_KINDS])
    names += granted.device_mounts
    names += [i for i in extra if "=" not in i]
    found = _Found(inventory)
    if not granted.all_devices:
        found.device_nodes(granted.gpu_devices, granted.caps_minors)
    for name in names:
        found.name(name)
    for name in cdi_grant_names(cdi, dra_kinds) if dra_kinds else ():
        found.dra(name)
    env = granted.env_gpus
    env_only = None
    if (
        not (found.gpus or found.migs or found.unknown)
        and env is not None
        and env.strip().lower() not in _NOTHING
    ):
        env_only = env.strip()
    replicas = frozenset(
        found.replicas - {g.identity for g in found.whole.values()} - set(found.whole_migs)
    )
    return GpuGrant(
        tuple(sorted(found.gpus.values(), key=lambda g: g.index)),
        tuple(found.migs.values()),
        tuple(found.unknown),
        env_only,
        replicas,
        granted.all_devices,
    )


class _Found:
    """What resolve_grant has found so far, by kind of evidence."""

    def __init__(self, inventory: GpuInventory) -> None:
        self.inventory = inventory
        self.gpus: dict[int, Gpu] = {}  # index -> GPU, granted whole (or as replicas)
        self.whole: dict[int, Gpu] = {}  # ... of which granted whole, not as a replica
        self.migs: dict[str, tuple[Gpu, MigInstance]] = {}
        self.whole_migs: dict[str, None] = {}  # uuids granted other than as replicas
        self.replicas: set[str] = set()
        self.unknown: list[str] = []

    def gpu(self, gpu: Gpu, replica: bool = False) -> None:
        self.gpus.setdefault(gpu.index, gpu)
        if replica:
            self.replicas.add(gpu.identity)
        else:
            self.whole.setdefault(gpu.index, gpu)

    def mig(self, found: tuple[Gpu, MigInstance], replica: bool = False) -> None:
        uuid = found[1].uuid
        self.migs.setdefault(uuid, found)
        if replica:
            self.replicas.add(uuid)
        else:
            self.whole_migs.setdefault(uuid)

    def device_nodes(self, numbers: Iterable[tuple[int, int]], caps: Iterable[int]) -> None:
        """GPU device nodes and MIG access nodes: a MIG device whose caps minors are all
        there is granted, and its parent's node is the way to it."""
        held = set(caps)
        parents: set[int] = set()
        if held:
            for gpu in self.inventory.gpus:
                for mig in gpu.mig_instances:
                    if mig.caps_minors and held.issuperset(mig.caps_minors):
                        self.mig((gpu, mig))
                        parents.add(gpu.device_minor)
        by_minor = {g.device_minor: g for g in self.inventory.gpus}
        for major, minor in numbers:
            node_gpu = by_minor.get(minor) if major == NVIDIA_MAJOR else None
            if node_gpu is not None and minor not in _CONTROL_MINORS and minor not in parents:
                self.gpu(node_gpu)

    def name(self, name: str) -> None:
        base, sep, replica = name.rpartition(REPLICA_SEPARATOR)
        is_replica = bool(sep) and replica.isdigit() and bool(base)
        text = base if is_replica else name
        if text.lower() == "all":
            for g in self.inventory.gpus:
                self.gpu(g)
            return
        found_mig = self.inventory.find_mig(text)
        if found_mig is not None:
            self.mig(found_mig, is_replica)
            return
        gpu = self.inventory.find(text)
        if gpu is not None:
            self.gpu(gpu, is_replica)
        else:
            self._unknown(name)

    def dra(self, name: str) -> None:
        """A device name NVIDIA's DRA driver writes. Its MIG names carry the parent's
        minor, the profile without dots (older releases: a profile id) and the
        placement, which the inventory does not hold: a name that fits several MIG
        devices is the one among them the access nodes grant (the runtime resolved the
        name into them: containerd up to 2.1, the OCI hook), else it matches nothing
        here. Other names of the driver's kinds (a passthrough GPU `gpu-vfio-<n>`, an
        IMEX channel) are no CUDA device: not read. Run after device_nodes."""
        m = re.fullmatch(_DRA_NAME, name)
        if m is None:
            return
        minor = int(m.group(1))
        parent = next((g for g in self.inventory.gpus if g.device_minor == minor), None)
        if parent is None:
            self._unknown(name)
            return
        rest = m.group(2)
        if rest is None:
            self.gpu(parent)
            return
        candidates = [
            (parent, mig)
            for mig in parent.mig_instances
            if rest.startswith(mig.profile.replace(".", "").lower() + "-")
        ] or [(parent, mig) for mig in parent.mig_instances]
        if len(candidates) == 1:
            self.mig(candidates[0])
        elif not any(mig.uuid in self.migs for _, mig in candidates):
            self._unknown(name)

    def _unknown(self, name: str) -> None:
        if name not in self.unknown:
            self.unknown.append(name)
