"""Fake GPUs for the e2e suite, as far as containerd, runc and the kernel's device cgroup
see them, and what a container can open read back from its final OCI spec.

No GPU exists here. The 8 GPUs of examples/dgx-like.yaml are made as:
* character device nodes under the cluster's base dir (`mknod`, major 195 = the NVIDIA
  driver's, minor = the GPU's `minor` in the inventory) and `nvidiactl` (195:255, which
  is not a GPU);
* one CDI spec file per kind the kubelet passes (`nvidia.com/gpu`: the NVIDIA container
  toolkit's; `k8s.device-plugin.nvidia.com/gpu`: the NVIDIA device plugin's cdi-cri
  strategy), naming each GPU by index and by UUID, in the directory the harness's
  containerd config lists in `cdi_spec_dirs` (e2e_config.py);
* an inventory snapshot for `nri-sla run --inventory`: the GPUs of dgx-like.yaml
  verbatim, its 64 CPUs replaced by this host's (a cpuset naming CPUs the host lacks
  cannot be written), split in two NUMA nodes so that alignment to a GPU's node shows.
  Node 1 has no memory: this host has one memory node, and cpuset.mems may only name it.

With `mig=True`, GPU 7 is in MIG mode with the MIG devices of MIG_DEVICES: their
access nodes are mknod'ed under `nvidia-caps/` (major: `nvidia-caps` in /proc/devices,
else a free one of the kernel's local/experimental range; the plugin knows them by
path), the CDI specs name them by MIG UUID and "<gpu>:<mig>", and NVIDIA's DRA driver's
specs (`k8s.gpu.nvidia.com/device` and one `.../claim` spec) are written beside them.

A grant reaches the container as the kubelet passes a device plugin's Allocate answer:
CRI CDI devices (`cdi_grant`, `mig_cdi_grant`, `dra_grant`) or device nodes
(`device_grant`, `mig_device_grant`), in the CRI ContainerConfig
(Cluster.run_pod(grant=...)).
"""

from __future__ import annotations

import json
import os
import stat
import threading
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from nri_plugin.topology.cpulist import format_cpulist, parse_cpulist
from tests.e2e.e2e_cgroup import CGROUP_ROOT, cgroup_v2_only, read_file

REPO = Path(__file__).resolve().parents[2]
INVENTORY = REPO / "examples" / "dgx-like.yaml"  # 8 A100s on 2 NUMA nodes
NVIDIA_MAJOR = 195  # the NVIDIA driver's character device major
NOT_GPUS = frozenset({254, 255})  # nvidia-modeset, nvidiactl
KINDS = ("nvidia.com/gpu", "k8s.device-plugin.nvidia.com/gpu")
CDI_VERSION = "0.6.0"  # hostPath in deviceNodes (0.5.0); read by containerd 1.7 and 2.x
HOST_CPUS = Path("/sys/devices/system/cpu/online")
MIG_GPU = 7
# (uuid, profile, GPU instance, caps minors of the GPU and compute instance)
MIG_DEVICES = (
    ("MIG-e0000000-0000-0000-0000-000000000001", "1g.10gb", 9, (84, 85)),
    ("MIG-e0000000-0000-0000-0000-000000000002", "1g.10gb", 10, (93, 94)),
    ("MIG-e0000000-0000-0000-0000-000000000003", "2g.20gb", 3, (30, 31)),
)
DRA_KINDS = ("k8s.gpu.nvidia.com/device", "k8s.gpu.nvidia.com/claim")
CLAIM_UID = "0b5e4c3a-1f2d-4e6b-9a8c-7d6e5f4a3b2c"
PROC_DEVICES = Path("/proc/devices")
LOCAL_MAJORS = range(234, 255)  # devices.txt: "LOCAL/EXPERIMENTAL USE"


def caps_major() -> int:
    """The nvidia-caps major of a host with the driver, else a character major no driver
    holds."""
    text = PROC_DEVICES.read_text().split("Block devices:")[0]
    taken = {}
    for line in text.splitlines()[1:]:
        number, _, name = line.strip().partition(" ")
        if number.isdigit():
            taken[name] = int(number)
    if "nvidia-caps" in taken:
        return taken["nvidia-caps"]
    return next(m for m in LOCAL_MAJORS if m not in taken.values())


def dra_name(mig: int) -> str:
    """NVIDIA's DRA driver's name for MIG device `mig` of GPU 7 (its minor is 7)."""
    _, profile, gi, _ = MIG_DEVICES[mig]
    return f"gpu-{MIG_GPU}-mig-{profile.replace('.', '')}-{gi}"


@dataclass(frozen=True)
class FakeGpu:
    index: int
    uuid: str
    minor: int
    numa_node: int
    pci_bus_id: str


def inventory_gpus() -> tuple[FakeGpu, ...]:
    snapshot = yaml.safe_load(INVENTORY.read_text())
    return tuple(
        FakeGpu(g["index"], g["uuid"], g["minor"], g["numa_node"], g["pci_bus_id"])
        for g in snapshot["gpus"]
    )


GPUS = inventory_gpus()
GPU_UUIDS = [g.uuid for g in GPUS]


@dataclass(frozen=True)
class GpuAccess:
    """The GPUs (by minor) a container can open, from three places: the device nodes in
    its spec's linux.devices, the spec's device cgroup rules, and the kernel's
    devices.list (cgroup v1; None on v2, where the rules are an eBPF program)."""

    nodes: frozenset[int]
    rules: frozenset[int]
    kernel: frozenset[int] | None
    visible_env: str | None  # NVIDIA_VISIBLE_DEVICES in the final spec


@dataclass(frozen=True)
class FakeGpus:
    dev_dir: Path
    cdi_dir: Path
    inventory: Path
    gpus: tuple[FakeGpu, ...]
    node_cpus: tuple[frozenset[int], ...]  # the snapshot's NUMA nodes 0 and 1
    caps_major: int | None = None  # MIG mode (GPU 7): the access nodes' major

    @classmethod
    def make(cls, base: Path, mig: bool = False) -> FakeGpus:
        """Device nodes, CDI specs and the inventory snapshot under `base`."""
        snapshot = yaml.safe_load(INVENTORY.read_text())
        gpus = GPUS
        dev_dir, cdi_dir = base / "gpu-dev", base / "cdi"
        dev_dir.mkdir(exist_ok=True)
        cdi_dir.mkdir(exist_ok=True)
        for name, minor in [*((f"nvidia{g.minor}", g.minor) for g in gpus), ("nvidiactl", 255)]:
            os.mknod(dev_dir / name, 0o666 | stat.S_IFCHR, os.makedev(NVIDIA_MAJOR, minor))
        fake = cls(
            dev_dir,
            cdi_dir,
            base / "gpu-inventory.json",
            gpus,
            _host_nodes(),
            caps_major() if mig else None,
        )
        if mig:
            (dev_dir / "nvidia-caps").mkdir(exist_ok=True)
            for minor in (m for *_, caps in MIG_DEVICES for m in caps):
                os.mknod(
                    dev_dir / f"nvidia-caps/nvidia-cap{minor}",
                    0o666 | stat.S_IFCHR,
                    os.makedev(fake.caps_major, minor),
                )
            for spec in fake.dra_specs():
                (cdi_dir / f"{spec['kind'].replace('/', '_')}.json").write_text(
                    json.dumps(spec, indent=1)
                )
        for kind in KINDS:
            (cdi_dir / f"{kind.replace('/', '_')}.json").write_text(
                json.dumps(fake.cdi_spec(kind), indent=1)
            )
        fake.inventory.write_text(json.dumps(fake.host_snapshot(snapshot), indent=1))
        return fake

    def node(self, name: str, minor: int) -> dict:
        major = NVIDIA_MAJOR if name.startswith("nvidia") and "/" not in name else self.caps_major
        return {
            "path": f"/dev/{name}",
            "hostPath": str(self.dev_dir / name),
            "type": "c",
            "major": major,
            "minor": minor,
            "permissions": "rw",
        }

    def mig_nodes(self, mig: int) -> list[dict]:
        """What opens MIG device `mig`: its parent's node and its access nodes."""
        gpu = self.by_index(MIG_GPU)
        return [
            self.node(f"nvidia{gpu.minor}", gpu.minor),
            *(self.node(f"nvidia-caps/nvidia-cap{m}", m) for m in MIG_DEVICES[mig][3]),
        ]

    def cdi_spec(self, kind: str) -> dict:
        """A CDI spec like `nvidia-ctk cdi generate` writes: each GPU by index and UUID
        (in MIG mode, GPU 7's MIG devices by UUID and "<gpu>:<mig>" instead), the control
        device for any of them."""
        devices = [
            {
                "name": name,
                "containerEdits": {"deviceNodes": [self.node(f"nvidia{g.minor}", g.minor)]},
            }
            for g in self.gpus
            for name in (str(g.index), g.uuid)
            if self.caps_major is None or g.index != MIG_GPU
        ]
        if self.caps_major is not None:
            devices += [
                {"name": name, "containerEdits": {"deviceNodes": self.mig_nodes(i)}}
                for i, (uuid, *_) in enumerate(MIG_DEVICES)
                for name in (uuid, f"{MIG_GPU}:{i}")
            ]
        return {
            "cdiVersion": CDI_VERSION,
            "kind": kind,
            "devices": devices,
            "containerEdits": {"deviceNodes": [self.node("nvidiactl", 255)]},
        }

    def dra_specs(self) -> list[dict]:
        """NVIDIA's DRA driver's standard spec for GPU 7's MIG devices and the spec of
        one prepared claim of all of them (its edits: the claim's settings, env only)."""
        names = [dra_name(i) for i in range(len(MIG_DEVICES))]
        return [
            {
                "cdiVersion": CDI_VERSION,
                "kind": DRA_KINDS[0],
                "devices": [
                    {"name": n, "containerEdits": {"deviceNodes": self.mig_nodes(i)}}
                    for i, n in enumerate(names)
                ],
                "containerEdits": {"deviceNodes": [self.node("nvidiactl", 255)]},
            },
            {
                "cdiVersion": CDI_VERSION,
                "kind": DRA_KINDS[1],
                "devices": [
                    {
                        "name": f"{CLAIM_UID}-{n}",
                        "containerEdits": {"env": [f"NVIDIA_DRA_CLAIM={CLAIM_UID}"]},
                    }
                    for n in names
                ],
            },
        ]

    def host_snapshot(self, snapshot: dict) -> dict:
        online = frozenset().union(*self.node_cpus)
        if self.caps_major is not None:
            snapshot = snapshot | {
                "gpus": [
                    g
                    | {
                        "mig_enabled": True,
                        "mig_instances": [
                            {
                                "uuid": uuid,
                                "profile": profile,
                                "gi_id": gi,
                                "ci_id": 0,
                                "index": i,
                                "memory_bytes": 10 << 30,
                                "caps_minors": list(caps),
                            }
                            for i, (uuid, profile, gi, caps) in enumerate(MIG_DEVICES)
                        ],
                    }
                    if g["index"] == MIG_GPU
                    else g
                    for g in snapshot["gpus"]
                ]
            }
        return snapshot | {
            "cpus": {"online": format_cpulist(online), "cores": [str(c) for c in sorted(online)]},
            "numa": [
                {
                    "id": i,
                    "cpus": format_cpulist(cpus),
                    "distances": [10, 21] if i == 0 else [21, 10],
                    "has_memory": i == 0,
                }
                for i, cpus in enumerate(self.node_cpus)
            ],
        }

    def by_index(self, index: int) -> FakeGpu:
        return next(g for g in self.gpus if g.index == index)

    def cdi_grant(self, kind: str, indexes: tuple[int, ...]) -> dict:
        """CRI CDI devices for GPUs `indexes`, the first by UUID, the rest by index (the
        device plugin's two namings)."""
        names = [self.by_index(i).uuid if n == 0 else str(i) for n, i in enumerate(indexes)]
        return {"CDI_devices": [{"name": f"{kind}={name}"} for name in names]}

    def device_grant(self, indexes: tuple[int, ...]) -> dict:
        """CRI device nodes for GPUs `indexes` (and nvidiactl), as the kubelet passes a
        device plugin's DeviceSpecs."""
        names = [f"nvidia{self.by_index(i).minor}" for i in indexes] + ["nvidiactl"]
        return {
            "devices": [
                {
                    "container_path": f"/dev/{n}",
                    "host_path": str(self.dev_dir / n),
                    "permissions": "rwm",
                }
                for n in names
            ]
        }

    def mig_device_grant(self, mig: int) -> dict:
        """CRI device nodes for MIG device `mig` (its parent's node, its access nodes,
        nvidiactl), as NVIDIA's device plugin passes them with passDeviceSpecs."""
        nodes = [*self.mig_nodes(mig), self.node("nvidiactl", 255)]
        return {
            "devices": [
                {"container_path": n["path"], "host_path": n["hostPath"], "permissions": "rwm"}
                for n in nodes
            ]
        }

    @staticmethod
    def mig_cdi_grant(kind: str, mig: int) -> dict:
        return {"CDI_devices": [{"name": f"{kind}={MIG_DEVICES[mig][0]}"}]}

    @staticmethod
    def dra_grant(mig: int) -> dict:
        """The CDI names the kubelet passes for a DRA claim of MIG device `mig`."""
        name = dra_name(mig)
        return {
            "CDI_devices": [
                {"name": f"{DRA_KINDS[0]}={name}"},
                {"name": f"{DRA_KINDS[1]}={CLAIM_UID}-{name}"},
            ]
        }

    def caps_minors(self, pc) -> frozenset[int]:
        """The MIG access nodes (minors) in container `pc`'s final spec."""
        devices = pc.inspect["info"]["runtimeSpec"].get("linux", {}).get("devices") or []
        found = frozenset(
            d["minor"]
            for d in devices
            if d.get("type") == "c" and d.get("major") == self.caps_major
        )
        print(f"evidence: {pc.container_id[:12]} MIG access nodes (caps minors): {sorted(found)}")
        return found

    def minors(self, indexes: tuple[int, ...]) -> frozenset[int]:
        return frozenset(self.by_index(i).minor for i in indexes)

    def access(self, pc) -> GpuAccess:
        """What container `pc` (a PodContainer) can open, printed as evidence."""
        spec = pc.inspect["info"]["runtimeSpec"]
        all_minors = frozenset(g.minor for g in self.gpus)
        found = GpuAccess(
            spec_gpu_nodes(spec),
            rule_allowed(spec, all_minors),
            kernel_allowed(pc.cgroups_path, all_minors),
            spec_env(spec),
        )
        print(
            f"evidence: {pc.container_id[:12]} can open GPU minors: nodes "
            f"{sorted(found.nodes)}, spec rules {sorted(found.rules)}, devices.list "
            f"{'n/a' if found.kernel is None else sorted(found.kernel)}, "
            f"NVIDIA_VISIBLE_DEVICES={found.visible_env}"
        )
        return found


def _host_nodes() -> tuple[frozenset[int], ...]:
    cpus = sorted(parse_cpulist(HOST_CPUS.read_text().strip()))
    half = len(cpus) // 2
    return frozenset(cpus[:half]), frozenset(cpus[half:])


def host_has_two_cpus() -> bool:
    return len(parse_cpulist(HOST_CPUS.read_text().strip())) >= 2


def spec_gpu_nodes(spec: dict) -> frozenset[int]:
    """Minors of the GPU device nodes (char, major 195, not a control device) in the
    spec's linux.devices: the nodes runc makes in the container."""
    return frozenset(
        d["minor"]
        for d in spec.get("linux", {}).get("devices") or []
        if d.get("type") == "c"
        and d.get("major") == NVIDIA_MAJOR
        and d.get("minor") not in NOT_GPUS
    )


def _rule_matches(rule: dict, minor: int) -> bool:
    return (
        rule.get("type", "a") in ("a", "c")
        and rule.get("major") in (None, NVIDIA_MAJOR)
        and rule.get("minor") in (None, minor)
        and any(a in rule.get("access", "rwm") for a in "rw")
    )


def rule_allowed(spec: dict, minors: frozenset[int]) -> frozenset[int]:
    """GPU minors the spec's linux.resources.devices rules let the container open (read or
    write); the last matching rule decides, as in runc."""
    rules = spec.get("linux", {}).get("resources", {}).get("devices") or []
    allowed = set()
    for minor in minors:
        verdict = False
        for rule in rules:
            if _rule_matches(rule, minor):
                verdict = bool(rule.get("allow"))
        if verdict:
            allowed.add(minor)
    return frozenset(allowed)


def kernel_allowed(cgroups_path: str, minors: frozenset[int]) -> frozenset[int] | None:
    """GPU minors the kernel lets the container's cgroup open (devices.list, cgroup v1:
    `c 195:4 rw`, `a *:* rwm`, `c *:* m`)."""
    if cgroup_v2_only():
        return None
    text = read_file(CGROUP_ROOT / "devices" / cgroups_path.lstrip("/") / "devices.list")
    if text is None:
        raise AssertionError(f"no devices.list for cgroup {cgroups_path}")
    allowed = set()
    for line in text.splitlines():
        kind, numbers, access = line.split()
        major, _, minor = numbers.partition(":")
        if kind not in ("a", "c") or major not in ("*", str(NVIDIA_MAJOR)):
            continue
        if not set(access) & {"r", "w"}:
            continue
        allowed |= minors if minor == "*" else minors & {int(minor)}
    return frozenset(allowed)


def spec_gpus(spec: dict) -> list[str]:
    """The UUIDs of the GPUs an OCI spec's container can open (its GPU device nodes)."""
    minors = spec_gpu_nodes(spec)
    return [g.uuid for g in GPUS if g.minor in minors]


class NoGpuLeft(Exception):
    """The kubelet has fewer free GPUs than a pod asks: it would keep the pod pending."""


@dataclass
class GpuBooks:
    """The kubelet's GPU books (its device manager with the NVIDIA device plugin, cdi-cri
    strategy): a pod gets the lowest free GPUs as CDI devices of the device plugin's kind;
    they are free again once the test says its pod is gone. Thread-safe (rollouts)."""

    gpus: FakeGpus
    held: dict[str, tuple[int, ...]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def free(self) -> list[int]:
        with self.lock:
            taken = {i for indexes in self.held.values() for i in indexes}
            return [g.index for g in self.gpus.gpus if g.index not in taken]

    def allocate(self, pod: str, count: int) -> dict:
        """The CRI ContainerConfig fields of pod `pod`'s grant of `count` GPUs."""
        with self.lock:
            taken = {i for indexes in self.held.values() for i in indexes}
            free = [g.index for g in self.gpus.gpus if g.index not in taken]
            if len(free) < count:
                raise NoGpuLeft(f"{pod}: {count} GPUs asked, free: {free or 'none'}")
            self.held[pod] = tuple(free[:count])
            return self.gpus.cdi_grant(KINDS[1], self.held[pod])

    def release(self, pod: str) -> None:
        with self.lock:
            self.held.pop(pod, None)


def spec_env(spec: dict) -> str | None:
    for item in spec.get("process", {}).get("env", []):
        if item.startswith("NVIDIA_VISIBLE_DEVICES="):
            return item.split("=", 1)[1]
    return None
