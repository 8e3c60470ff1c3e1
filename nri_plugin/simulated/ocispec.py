"""The OCI spec of a container as the simulator models it, built the way containerd
builds it, and what the created container can open.

containerd (internal/cri/server/container_create*.go, 1.7 and 2.x) builds the spec from
the CRI request (env, mounts, device nodes, annotations, resources) and, still while
building it, resolves the CDI devices of the request and of its `cdi.k8s.io/*`
annotations and applies their edits. Only then does NRI see the container: the plugins
get the spec's env, mounts, devices and annotations (CDI edits included) and the CRI
request's CDI names, and containerd applies their merged adjustment to the finished
spec, in the order of the NRI spec generator (pkg/runtime-tools/generate in
containerd/nri): annotations, env, CDI devices, device nodes, resources, mounts.

An adjustment can remove env variables, device nodes and mounts (a key, path or
destination marked with a leading "-"), but CDI devices only ever get added
(containerd/nri pkg/adaptation/result.go: "we only allow CDI device references to be
added"): what the CRI's CDI devices injected stays in the spec whatever a plugin says.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from nri_plugin.nri.pb import nri_pb2 as pb
from nri_plugin.simulated.cdi import (
    CdiRegistry,
    ContainerEdits,
    DeviceNode,
    Mount,
    annotation_devices,
)
from nri_plugin.topology.gpus import GpuInventory

NVIDIA_MAJOR = 195  # /dev/nvidiaN; minors 255 (nvidiactl) and 254 (modeset) are no GPU
ENV_VISIBLE = "NVIDIA_VISIBLE_DEVICES"
DEVICE_MOUNT_DIR = "/var/run/nvidia-container-devices/"  # the volume-mounts strategy
_NO_DEVICES = {"", "none", "void"}
_CPU_VALUES: tuple[
    Literal["shares", "quota", "period", "realtime_runtime", "realtime_period"], ...
] = ("shares", "quota", "period", "realtime_runtime", "realtime_period")


@dataclass
class OciSpec:
    env: list[str] = field(default_factory=list)  # "KEY=value", in order
    devices: list[DeviceNode] = field(default_factory=list)  # linux.devices
    mounts: list[Mount] = field(default_factory=list)
    annotations: dict[str, str] = field(default_factory=dict)
    resources: pb.LinuxResources = field(default_factory=pb.LinuxResources)
    cdi_devices: list[str] = field(default_factory=list)  # every CDI name injected


@dataclass(frozen=True)
class NvidiaRuntime:
    """How nvidia-container-runtime (legacy mode, its prestart hook) picks the GPUs it
    mounts into a container, from the container's spec; its config.toml keys:
    `accept-nvidia-visible-devices-envvar-when-unprivileged` (default true) and
    `accept-nvidia-visible-devices-as-volume-mounts` (default false; the device plugin's
    volume-mounts strategy needs it true)."""

    accept_env: bool = True
    accept_mounts: bool = True


def update_resources(current: pb.LinuxResources, new: pb.LinuxResources) -> None:
    """What an adjustment or a ContainerUpdate changes in the resources: the CPU and
    memory values it sets, its unified entries, and the cpuset (containerd copies
    cpus/mems only when non-empty)."""
    cpu, wanted = current.cpu, new.cpu
    if wanted.cpus:
        cpu.cpus = wanted.cpus
    if wanted.mems:
        cpu.mems = wanted.mems
    for name in _CPU_VALUES:
        if wanted.HasField(name):
            getattr(cpu, name).CopyFrom(getattr(wanted, name))
    if new.memory.HasField("limit"):
        current.memory.limit.CopyFrom(new.memory.limit)
    current.unified.update(new.unified)


# -- building the spec --------------------------------------------------------------------


def _env_key(entry: str) -> str:
    return entry.partition("=")[0]


def _set_env(spec: OciSpec, entry: str) -> None:
    """Replace the variable in place, or append it (runtime-tools' AddProcessEnv, which
    CDI's edits use)."""
    key = _env_key(entry)
    for i, old in enumerate(spec.env):
        if _env_key(old) == key:
            spec.env[i] = entry
            return
    spec.env.append(entry)


def _set_device(spec: OciSpec, node: DeviceNode) -> None:
    spec.devices = [d for d in spec.devices if d.path != node.path] + [node]


def _set_mount(spec: OciSpec, mount: Mount) -> None:
    spec.mounts = [m for m in spec.mounts if m.destination != mount.destination] + [mount]


def apply_edits(spec: OciSpec, edits: ContainerEdits) -> None:
    for entry in edits.env:
        _set_env(spec, entry)
    for node in edits.device_nodes:
        _set_device(spec, node)
    for mount in edits.mounts:
        _set_mount(spec, mount)


def inject_cdi(spec: OciSpec, names: list[str], cdi: CdiRegistry | None) -> None:
    """Resolve CDI names and apply their edits (InvalidInput: creation fails). Without a
    registry the simulator keeps the names as references only: the tests that look at
    nothing but the plugin's answer need no CDI spec."""
    names = [n for n in dict.fromkeys(names) if n not in spec.cdi_devices]
    if not names:
        return
    if cdi is not None:
        for edits in cdi.resolve(names):
            apply_edits(spec, edits)
    spec.cdi_devices += names


def spec_from_request(ctr: pb.Container, cdi: CdiRegistry | None) -> OciSpec:
    """The spec containerd builds from a CRI CreateContainer request (`ctr` carries the
    request's env, mounts, devices, annotations, resources and CDI devices), CDI devices
    already injected."""
    spec = OciSpec(
        env=list(ctr.env),
        devices=[DeviceNode(d.path, d.type, d.major, d.minor) for d in ctr.linux.devices],
        mounts=[Mount(m.destination, m.source, m.type, tuple(m.options)) for m in ctr.mounts],
        annotations=dict(ctr.annotations),
    )
    spec.resources.CopyFrom(ctr.linux.resources)
    names = [d.name for d in ctr.CDI_devices] + annotation_devices(spec.annotations)
    inject_cdi(spec, names, cdi)
    return spec


def _removal(key: str) -> tuple[str, bool]:
    return (key[1:], True) if key.startswith("-") else (key, False)


def apply_adjustment(
    spec: OciSpec, adjust: pb.ContainerAdjustment, cdi: CdiRegistry | None
) -> None:
    """All of an NRI adjustment the model keeps, in the NRI spec generator's order."""
    for key, value in adjust.annotations.items():
        name, removed = _removal(key)
        if removed:
            spec.annotations.pop(name, None)
        else:
            spec.annotations[name] = value
    for kv in adjust.env:
        name, removed = _removal(kv.key)
        if removed:
            spec.env = [e for e in spec.env if _env_key(e) != name]
        else:
            _set_env(spec, f"{name}={kv.value}")
    inject_cdi(spec, [d.name for d in adjust.CDI_devices], cdi)
    for dev in adjust.linux.devices:
        path, removed = _removal(dev.path)
        if removed:
            spec.devices = [d for d in spec.devices if d.path != path]
        else:
            _set_device(spec, DeviceNode(path, dev.type, dev.major, dev.minor))
    update_resources(spec.resources, adjust.linux.resources)
    for m in adjust.mounts:
        destination, removed = _removal(m.destination)
        if removed:
            spec.mounts = [x for x in spec.mounts if x.destination != destination]
        else:
            _set_mount(spec, Mount(destination, m.source, m.type, tuple(m.options)))


def write_container(spec: OciSpec, ctr: pb.Container) -> None:
    """The spec into the NRI view of the container (what plugins and a later
    Synchronize see). CDI_devices stay the CRI request's: containerd reports those."""
    del ctr.env[:]
    ctr.env.extend(spec.env)
    del ctr.linux.devices[:]
    ctr.linux.devices.extend(
        pb.LinuxDevice(path=d.path, type=d.type, major=d.major, minor=d.minor) for d in spec.devices
    )
    del ctr.mounts[:]
    ctr.mounts.extend(
        pb.Mount(destination=m.destination, source=m.source, type=m.type, options=list(m.options))
        for m in spec.mounts
    )
    ctr.annotations.clear()
    ctr.annotations.update(spec.annotations)
    ctr.linux.resources.CopyFrom(spec.resources)


# -- what the container can open ----------------------------------------------------------


def _named(inventory: GpuInventory, names: list[str]) -> set[int]:
    found: set[int] = set()
    for name in names:
        if name.lower() == "all":
            found.update(g.index for g in inventory.gpus)
            continue
        mig = inventory.find_mig(name)
        gpu = mig[0] if mig is not None else inventory.find(name)
        if gpu is not None:
            found.add(gpu.index)
    return found


def _env_value(spec: OciSpec, key: str) -> str | None:
    values = [e.partition("=")[2] for e in spec.env if _env_key(e) == key]
    return values[-1] if values else None


def openable_gpus(
    spec: OciSpec, inventory: GpuInventory, runtime: NvidiaRuntime = NvidiaRuntime()
) -> frozenset[int]:
    """Indexes of the GPUs (a MIG device: its GPU) the created container can open: its
    GPU device nodes (major 195, a GPU's minor), and what nvidia-container-runtime in
    legacy mode mounts in on top, from the device-list mounts or else from
    NVIDIA_VISIBLE_DEVICES.

    The env part is the runtime's leak, and the real system has it: whoever writes
    NVIDIA_VISIBLE_DEVICES (a pod author, every CUDA image) gets those GPUs from a
    runtime that accepts the variable, whatever Kubernetes granted. Only the runtime's
    own config closes it (accept_env=False); nri-sla cannot take it away.
    """
    minors = {g.device_minor: g.index for g in inventory.gpus}
    found = {
        minors[d.minor]
        for d in spec.devices
        if d.type == "c" and d.major == NVIDIA_MAJOR and d.minor in minors
    }
    listed = [
        m.destination[len(DEVICE_MOUNT_DIR) :].strip("/")
        for m in spec.mounts
        if m.destination.startswith(DEVICE_MOUNT_DIR)
    ]
    if runtime.accept_mounts and listed:
        found |= _named(inventory, listed)
    elif runtime.accept_env:
        visible = _env_value(spec, ENV_VISIBLE)
        if visible is not None and visible.strip().lower() not in _NO_DEVICES:
            found |= _named(inventory, [n.strip() for n in visible.split(",") if n.strip()])
    return frozenset(found)
