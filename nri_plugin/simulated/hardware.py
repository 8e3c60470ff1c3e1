"""Simulated hardware: fake sysfs trees (CPUs, NUMA nodes, NVIDIA PCI functions and the PCI
bridges above them), an NVML stand-in and example machines (DGX-like, PCIe box, MIG box,
and for GPU selection: DGX-1V-like and DGX-1P-like boxes, an NVSwitch box, a box of PCIe
switch pairs, a box of 4 RTX 8000s with NVLink bridges).

Real hardware is not available in CI (no GPUs, one NUMA node), so these builders write
the same files the kernel exposes (devices/system/{cpu,node}, bus/pci/devices) and offer
the pynvml functions `nri_plugin.topology.nvml_gpus` calls, with the same error behaviour.
The tests read node facts through them, and the example snapshots in examples/ were
written from them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import takewhile
from pathlib import Path
from types import SimpleNamespace

from nri_plugin.topology.cpulist import format_cpulist

GIB = 1024**3


def build_sysfs(
    root: Path,
    nodes: int = 1,
    cores_per_node: int = 4,
    threads: int = 1,
    numa_dirs: bool = True,
    offline: Iterable[int] = (),
    pci: Sequence[tuple[str, int, int]] = (),
) -> Path:
    """Write a fake /sys under `root` and return it.

    CPUs are numbered like Linux on x86: first thread of every core (node by node), then
    the second threads, so with 2 nodes x 4 cores x 2 threads node 0 holds 0-3,8-11.
    `pci` entries are (bus id "0000:07:00.0", PCI class e.g. 0x030200, numa node) for
    NVIDIA functions. `numa_dirs=False` mimics a kernel without CONFIG_NUMA.
    """
    total_cores = nodes * cores_per_node
    cpus = range(total_cores * threads)
    online = sorted(set(cpus) - set(offline))
    cpu_dir = root / "devices/system/cpu"
    cpu_dir.mkdir(parents=True, exist_ok=True)
    (cpu_dir / "online").write_text(format_cpulist(online) + "\n")
    (cpu_dir / "possible").write_text(format_cpulist(cpus) + "\n")

    def core_threads(core: int) -> list[int]:
        return [core + t * total_cores for t in range(threads)]

    for core in range(total_cores):
        siblings = format_cpulist(core_threads(core)) + "\n"
        for cpu in core_threads(core):
            topo = cpu_dir / f"cpu{cpu}/topology"
            topo.mkdir(parents=True, exist_ok=True)
            (topo / "thread_siblings_list").write_text(siblings)
            (topo / "core_cpus_list").write_text(siblings)
    if numa_dirs:
        node_dir = root / "devices/system/node"
        node_dir.mkdir(parents=True, exist_ok=True)
        all_nodes = format_cpulist(range(nodes)) + "\n"
        for name in ("online", "possible", "has_memory", "has_cpu"):
            (node_dir / name).write_text(all_nodes)
        for n in range(nodes):
            d = node_dir / f"node{n}"
            d.mkdir(exist_ok=True)
            mine = [
                c
                for core in range(n * cores_per_node, (n + 1) * cores_per_node)
                for c in core_threads(core)
            ]
            (d / "cpulist").write_text(format_cpulist(mine) + "\n")
            (d / "distance").write_text(
                " ".join("10" if m == n else "21" for m in range(nodes)) + "\n"
            )
    for bus, pci_class, numa in pci:
        dev = root / "bus/pci/devices" / bus
        dev.mkdir(parents=True, exist_ok=True)
        (dev / "vendor").write_text("0x10de\n")
        (dev / "class").write_text(f"0x{pci_class:06x}\n")
        (dev / "numa_node").write_text(f"{numa}\n")
    return root


# --- fake NVML --------------------------------------------------------------------------

NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_UNKNOWN = 999
NVML_XID_CRITICAL_ERROR = 0x8  # nvmlEventTypeXidCriticalError
NVML_NO_INSTANCE = 0xFFFFFFFF  # an event's GPU/compute instance id when not a MIG device
NVML_TOPOLOGY_SINGLE, NVML_TOPOLOGY_HOSTBRIDGE = 10, 30
NVML_TOPOLOGY_NODE, NVML_TOPOLOGY_SYSTEM = 40, 50


class FakeNVMLError(Exception):
    def __init__(self, value: int) -> None:
        self.value = value
        super().__init__(f"NVML error {value}")


@dataclass
class FakeMig:
    uuid: str
    profile: str
    gi: int
    ci: int
    memory: int


@dataclass
class FakeGpu:
    uuid: str
    bus: str  # NVML form "00000000:07:00.0"
    numa: int | None  # None: nvmlDeviceGetNumaNodeId answers NOT_SUPPORTED
    memory: int = 80 * GIB
    name: str = "NVIDIA A100-SXM4-80GB"
    minor: int = 0
    links: list[str] = field(default_factory=list)  # remote bus ids, one per NVLink
    mig: bool = False
    migs: list[FakeMig] = field(default_factory=list)
    # Faults: a lost GPU fails every call about it with GPU_IS_LOST; `errors` fails the
    # named pynvml functions for this GPU only (e.g. {"nvmlDeviceGetMigMode": 999});
    # `xid_events=False`: the GPU cannot register for XID events (NOT_SUPPORTED).
    lost: bool = False
    errors: dict[str, int] = field(default_factory=dict)
    xid_events: bool = True
    # the PCI bridges above the GPU, root bus first ("pci0000:00", root port, switch
    # ports...); empty: NVML cannot tell the PCIe topology (older drivers)
    pci_path: tuple[str, ...] = ()


@dataclass
class _Handle:
    gpu: FakeGpu
    mig: FakeMig | None = None


@dataclass
class FakeEventSet:
    gpus: list[FakeGpu] = field(default_factory=list)  # registered for XID events
    freed: bool = False


class FakeNvml:
    """Implements the subset of pynvml that nri-sla uses, backed by FakeGpu values."""

    NVMLError = FakeNVMLError
    NVML_FEATURE_ENABLED = 1
    NVML_FEATURE_DISABLED = 0
    NVML_DEVICE_MIG_ENABLE = 1
    NVML_NVLINK_MAX_LINKS = 12

    nvmlEventTypeXidCriticalError = NVML_XID_CRITICAL_ERROR

    def __init__(self, gpus: Sequence[FakeGpu], fail_init: int | None = None) -> None:
        self.gpus = list(gpus)
        self.fail_init = fail_init
        self.initialized = 0
        self.calls = 0
        self.xids: list[SimpleNamespace] = []  # queued XID events, oldest first
        self.waits: list[int] = []  # the timeout (ms) of every nvmlEventSetWait_v2

    def _check(self, gpu: FakeGpu | None = None, call: str = "") -> None:
        self.calls += 1
        if self.initialized <= 0:
            raise FakeNVMLError(NVML_ERROR_UNINITIALIZED)
        if gpu is not None and gpu.lost:
            raise FakeNVMLError(NVML_ERROR_GPU_IS_LOST)
        if gpu is not None and call in gpu.errors:
            raise FakeNVMLError(gpu.errors[call])

    def queue_xid(
        self, gpu: FakeGpu, xid: int, gi: int = NVML_NO_INSTANCE, ci: int = NVML_NO_INSTANCE
    ) -> None:
        """An XID error the driver reports for `gpu` (gi/ci: on one of its MIG devices)."""
        self.xids.append(
            SimpleNamespace(
                device=_Handle(gpu),
                eventType=NVML_XID_CRITICAL_ERROR,
                eventData=xid,
                gpuInstanceId=gi,
                computeInstanceId=ci,
            )
        )

    def nvmlInit(self) -> None:
        if self.fail_init is not None:
            raise FakeNVMLError(self.fail_init)
        self.initialized += 1

    def nvmlShutdown(self) -> None:
        self.initialized -= 1

    def nvmlDeviceGetCount(self) -> int:
        self._check()
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:
        self._check()
        if not 0 <= index < len(self.gpus):
            raise FakeNVMLError(NVML_ERROR_INVALID_ARGUMENT)
        self._check(self.gpus[index], "nvmlDeviceGetHandleByIndex")
        return _Handle(self.gpus[index])

    def nvmlDeviceGetUUID(self, h: _Handle) -> str:
        self._check(h.gpu, "nvmlDeviceGetUUID")
        return h.mig.uuid if h.mig else h.gpu.uuid

    def nvmlDeviceGetName(self, h: _Handle) -> str:
        self._check(h.gpu, "nvmlDeviceGetName")
        return f"{h.gpu.name} MIG {h.mig.profile}" if h.mig else h.gpu.name

    def nvmlDeviceGetPciInfo(self, h: _Handle) -> SimpleNamespace:
        self._check(h.gpu, "nvmlDeviceGetPciInfo")
        return SimpleNamespace(busId=h.gpu.bus.encode())  # older pynvml gives bytes

    def nvmlDeviceGetNumaNodeId(self, h: _Handle) -> int:
        self._check(h.gpu, "nvmlDeviceGetNumaNodeId")
        if h.gpu.numa is None:
            raise FakeNVMLError(NVML_ERROR_NOT_SUPPORTED)
        return h.gpu.numa

    def nvmlDeviceGetMemoryInfo(self, h: _Handle) -> SimpleNamespace:
        self._check(h.gpu, "nvmlDeviceGetMemoryInfo")
        total = h.mig.memory if h.mig else h.gpu.memory
        return SimpleNamespace(total=total, free=total, used=0)

    def nvmlDeviceGetMinorNumber(self, h: _Handle) -> int:
        self._check(h.gpu, "nvmlDeviceGetMinorNumber")
        return h.gpu.minor

    def nvmlDeviceGetNvLinkState(self, h: _Handle, link: int) -> int:
        self._check(h.gpu, "nvmlDeviceGetNvLinkState")
        if link >= len(h.gpu.links):
            raise FakeNVMLError(NVML_ERROR_NOT_SUPPORTED)
        return self.NVML_FEATURE_ENABLED

    def nvmlDeviceGetNvLinkRemotePciInfo(self, h: _Handle, link: int) -> SimpleNamespace:
        self._check(h.gpu, "nvmlDeviceGetNvLinkRemotePciInfo")
        if link >= len(h.gpu.links):
            raise FakeNVMLError(NVML_ERROR_NOT_SUPPORTED)
        return SimpleNamespace(busId=h.gpu.links[link])

    def nvmlDeviceGetTopologyCommonAncestor(self, h1: _Handle, h2: _Handle) -> int:
        """NVML's level for the nearest common PCI ancestor, read off the fake tree."""
        self._check(h1.gpu, "nvmlDeviceGetTopologyCommonAncestor")
        self._check(h2.gpu, "nvmlDeviceGetTopologyCommonAncestor")
        a, b = h1.gpu.pci_path, h2.gpu.pci_path
        if not a or not b:
            raise FakeNVMLError(NVML_ERROR_NOT_SUPPORTED)
        shared = len(list(takewhile(lambda pair: pair[0] == pair[1], zip(a, b, strict=False))))
        if shared >= 2:
            return NVML_TOPOLOGY_SINGLE
        if shared == 1:
            return NVML_TOPOLOGY_HOSTBRIDGE
        return NVML_TOPOLOGY_NODE if h1.gpu.numa == h2.gpu.numa else NVML_TOPOLOGY_SYSTEM

    def nvmlDeviceGetMigMode(self, h: _Handle) -> tuple[int, int]:
        self._check(h.gpu, "nvmlDeviceGetMigMode")
        mode = int(h.gpu.mig)
        return mode, mode

    def nvmlDeviceGetMaxMigDeviceCount(self, h: _Handle) -> int:
        self._check(h.gpu, "nvmlDeviceGetMaxMigDeviceCount")
        return 7 if h.gpu.mig else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h: _Handle, index: int) -> _Handle:
        self._check(h.gpu, "nvmlDeviceGetMigDeviceHandleByIndex")
        if index >= len(h.gpu.migs):
            raise FakeNVMLError(NVML_ERROR_NOT_FOUND)
        return _Handle(h.gpu, h.gpu.migs[index])

    def nvmlDeviceGetGpuInstanceId(self, h: _Handle) -> int:
        self._check(h.gpu, "nvmlDeviceGetGpuInstanceId")
        if h.mig is None:
            raise FakeNVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return h.mig.gi

    def nvmlDeviceGetComputeInstanceId(self, h: _Handle) -> int:
        self._check(h.gpu, "nvmlDeviceGetComputeInstanceId")
        if h.mig is None:
            raise FakeNVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return h.mig.ci

    # --- events (XIDs) ---------------------------------------------------------------

    def nvmlEventSetCreate(self) -> FakeEventSet:
        self._check()
        return FakeEventSet()

    def nvmlDeviceGetSupportedEventTypes(self, h: _Handle) -> int:
        self._check(h.gpu, "nvmlDeviceGetSupportedEventTypes")
        return NVML_XID_CRITICAL_ERROR if h.gpu.xid_events else 0

    def nvmlDeviceRegisterEvents(self, h: _Handle, types: int, events: FakeEventSet) -> None:
        self._check(h.gpu, "nvmlDeviceRegisterEvents")
        if not h.gpu.xid_events:
            raise FakeNVMLError(NVML_ERROR_NOT_SUPPORTED)
        events.gpus.append(h.gpu)

    def nvmlEventSetWait_v2(self, events: FakeEventSet, timeout_ms: int) -> SimpleNamespace:
        """The oldest queued event of a registered GPU; TIMEOUT at once when none (the
        fake does not sleep)."""
        self._check()
        self.waits.append(timeout_ms)
        for i, event in enumerate(self.xids):
            if any(event.device.gpu is g for g in events.gpus):
                return self.xids.pop(i)
        raise FakeNVMLError(NVML_ERROR_TIMEOUT)

    def nvmlEventSetFree(self, events: FakeEventSet) -> None:
        events.freed = True


def _bus(n: int) -> str:
    return f"00000000:{n:02X}:00.0"


def dgx_like_gpus() -> list[FakeGpu]:
    """8 GPUs on 2 NUMA nodes, NVLink hybrid cube-mesh: quads 0-3 and 4-7 fully
    connected, plus pairs i <-> i+4 across the quads (as on a DGX-1)."""
    buses = [0x07, 0x0F, 0x47, 0x4E, 0x87, 0x90, 0xB7, 0xBD]
    gpus = []
    for i, b in enumerate(buses):
        quad = range(0, 4) if i < 4 else range(4, 8)
        peers = [j for j in quad if j != i] + [(i + 4) % 8]
        # two links to every peer, as real boxes bond several NVLinks per pair
        links = [_bus(buses[j]) for j in peers for _ in range(2)]
        gpus.append(
            FakeGpu(
                uuid=f"GPU-d0000000-0000-0000-0000-00000000000{i}",
                bus=_bus(b),
                numa=0 if i < 4 else 1,
                minor=i,
                links=links,
            )
        )
    return gpus


def dgx_like_pci() -> list[tuple[str, int, int]]:
    return [
        (f"0000:{b:02x}:00.0", 0x030200, 0 if i < 4 else 1)
        for i, b in enumerate([0x07, 0x0F, 0x47, 0x4E, 0x87, 0x90, 0xB7, 0xBD])
    ]


def pcie_box_gpus() -> list[FakeGpu]:
    """4 PCIe GPUs, 2 per NUMA node, no NVLink; NVML cannot tell the NUMA node (sysfs can)."""
    return [
        FakeGpu(
            uuid=f"GPU-c0000000-0000-0000-0000-00000000000{i}",
            bus=_bus(b),
            numa=None,
            memory=48 * GIB,
            name="NVIDIA L40S",
            minor=i,
        )
        for i, b in enumerate([0x17, 0x31, 0x98, 0xB1])
    ]


def pcie_box_pci() -> list[tuple[str, int, int]]:
    return [
        (f"0000:{b:02x}:00.0", 0x030200, 0 if i < 2 else 1)
        for i, b in enumerate([0x17, 0x31, 0x98, 0xB1])
    ]


def mig_box_gpus() -> list[FakeGpu]:
    """2 GPUs on NUMA node 0: GPU 0 in MIG mode (3g.40gb, 2g.20gb, 1g.10gb x2), GPU 1 not."""
    migs = [
        FakeMig("MIG-a0000000-0000-0000-0000-000000000001", "3g.40gb", 2, 0, 40 * GIB),
        FakeMig("MIG-a0000000-0000-0000-0000-000000000002", "2g.20gb", 3, 0, 20 * GIB),
        FakeMig("MIG-a0000000-0000-0000-0000-000000000003", "1g.10gb", 9, 0, 10 * GIB),
        FakeMig("MIG-a0000000-0000-0000-0000-000000000004", "1g.10gb", 10, 0, 10 * GIB),
    ]
    return [
        FakeGpu(
            uuid="GPU-a0000000-0000-0000-0000-000000000000",
            bus=_bus(0x07),
            numa=0,
            minor=0,
            mig=True,
            migs=migs,
        ),
        FakeGpu(uuid="GPU-a0000000-0000-0000-0000-000000000010", bus=_bus(0x0F), numa=0, minor=1),
    ]


def build_mig_proc(root: Path, gpu_minor: int, migs: Sequence[FakeMig]) -> Path:
    """Write proc/driver/nvidia-caps/mig-minors entries for the MIG devices given (added
    to those of other GPUs already written)."""
    d = root / "driver/nvidia-caps"
    d.mkdir(parents=True, exist_ok=True)
    table = d / "mig-minors"
    lines = table.read_text().splitlines() if table.exists() else ["config 1", "monitor 2"]
    minor = 3 + 200 * gpu_minor  # the driver numbers each GPU's minors apart
    for m in migs:
        lines.append(f"gpu{gpu_minor}/gi{m.gi}/access {minor + m.gi * 9}")
        lines.append(f"gpu{gpu_minor}/gi{m.gi}/ci{m.ci}/access {minor + m.gi * 9 + 1 + m.ci}")
    table.write_text("\n".join(lines) + "\n")
    return root


# --- PCI trees and the selection machines ---------------------------------------------


def build_pci_tree(root: Path, gpus: Sequence[FakeGpu], pci_class: int = 0x030200) -> Path:
    """Write the GPUs under /sys/devices/<pci_path...>/<bus> and link them from
    /sys/bus/pci/devices, as the kernel does. Use instead of build_sysfs(pci=...)."""
    for g in gpus:
        bus = f"{int(g.bus.split(':')[0], 16):04x}:{g.bus.split(':', 1)[1].lower()}"
        dev = root / "devices" / Path(*g.pci_path) / bus
        dev.mkdir(parents=True, exist_ok=True)
        (dev / "vendor").write_text("0x10de\n")
        (dev / "class").write_text(f"0x{pci_class:06x}\n")
        (dev / "numa_node").write_text(f"{-1 if g.numa is None else g.numa}\n")
        links = root / "bus/pci/devices"
        links.mkdir(parents=True, exist_ok=True)
        (links / bus).symlink_to(Path("../../..") / dev.relative_to(root))
    return root


def _switch_pairs(buses: Sequence[int], roots: Sequence[int]) -> list[tuple[str, ...]]:
    """PCI paths for GPUs in pairs behind one PCIe switch each; pair k's switch hangs off
    a root port of the root complex whose bus is roots[k] (equal roots: one host bridge)."""
    paths: list[tuple[str, ...]] = []
    for i in range(len(buses)):
        k, root = i // 2, roots[i // 2]
        up = buses[2 * k] - 2  # the switch's upstream port, then its downstream ports
        port = sum(1 for r in roots[:k] if r == root) + 1
        paths.append(
            (
                f"pci0000:{root:02x}",
                f"0000:{root:02x}:{port:02x}.0",
                f"0000:{up:02x}:00.0",
                f"0000:{up + 1:02x}:{8 * (1 + i % 2):02x}.0",
            )
        )
    return paths


# A DGX-1 with V100s (nvidia-smi topo -m: NV2 = two bonded NVLinks, NV1 = one; the link
# counts and bus ids agree with NCCL's topology dump of one, NVIDIA/nccl issue 671). Each
# V100 has 6 links: quads 0-3 and 4-7 fully connected, plus i <-> i+4.
DGX1V_LINKS = {
    (0, 1): 1,
    (0, 2): 1,
    (0, 3): 2,
    (0, 4): 2,
    (1, 2): 2,
    (1, 3): 1,
    (1, 5): 2,
    (2, 3): 2,
    (2, 6): 1,
    (3, 7): 1,
    (4, 5): 1,
    (4, 6): 1,
    (4, 7): 2,
    (5, 6): 2,
    (5, 7): 1,
    (6, 7): 2,
}
DGX1V_BUSES = [0x06, 0x07, 0x0A, 0x0B, 0x85, 0x86, 0x89, 0x8A]


def dgx1v_gpus() -> list[FakeGpu]:
    """8 V100s, hybrid cube-mesh with weighted links (DGX1V_LINKS), 2 NUMA nodes; PCIe
    pairs 0-1, 2-3 behind switches under one host bridge per socket (likewise 4-7)."""
    paths = _switch_pairs(DGX1V_BUSES, [0x00, 0x00, 0x80, 0x80])
    gpus = []
    for i, b in enumerate(DGX1V_BUSES):
        links = [
            _bus(DGX1V_BUSES[j if k == i else k])
            for (k, j), n in DGX1V_LINKS.items()
            if i in (k, j)
            for _ in range(n)
        ]
        gpus.append(
            FakeGpu(
                uuid=f"GPU-e0000000-0000-0000-0000-00000000000{i}",
                bus=_bus(b),
                numa=i // 4,
                memory=32 * GIB,
                name="Tesla V100-SXM2-32GB",
                minor=i,
                links=links,
                pci_path=paths[i],
            )
        )
    return gpus


# A DGX-1 with P100s: 4 NVLinks per GPU, one to each peer of its quad and one to i+4.
DGX1P_LINKS = {
    pair: 1
    for pair in [
        (0, 1),
        (0, 2),
        (0, 3),
        (1, 2),
        (1, 3),
        (2, 3),
        (4, 5),
        (4, 6),
        (4, 7),
        (5, 6),
        (5, 7),
        (6, 7),
        (0, 4),
        (1, 5),
        (2, 6),
        (3, 7),
    ]
}


def dgx1p_gpus() -> list[FakeGpu]:
    """8 P100s, hybrid cube-mesh with one NVLink per linked pair (DGX1P_LINKS), 2 NUMA
    nodes; PCIe as on the DGX-1V."""
    paths = _switch_pairs(DGX1V_BUSES, [0x00, 0x00, 0x80, 0x80])
    gpus = []
    for i, b in enumerate(DGX1V_BUSES):
        links = [_bus(DGX1V_BUSES[j if k == i else k]) for (k, j) in DGX1P_LINKS if i in (k, j)]
        gpus.append(
            FakeGpu(
                uuid=f"GPU-90000000-0000-0000-0000-00000000000{i}",
                bus=_bus(b),
                numa=i // 4,
                memory=16 * GIB,
                name="Tesla P100-SXM2-16GB",
                minor=i,
                links=links,
                pci_path=paths[i],
            )
        )
    return gpus


RTX8000_BUSES = [0x1A, 0x3D, 0x88, 0xB1]


def rtx8000_gpus() -> list[FakeGpu]:
    """4 Quadro RTX 8000s, 2 per socket, each on a root port of its own host bridge;
    NVLink bridges (2 links) join 0-2 and 1-3, across the sockets, as boxes cabled for
    GPU pairs rather than for NUMA often are."""
    paths = [(f"pci0000:{r:02x}", f"0000:{r:02x}:01.0") for r in (0x00, 0x20, 0x80, 0xA0)]
    bridge = {0: 2, 2: 0, 1: 3, 3: 1}
    return [
        FakeGpu(
            uuid=f"GPU-80000000-0000-0000-0000-00000000000{i}",
            bus=_bus(b),
            numa=i // 2,
            memory=48 * GIB,
            name="Quadro RTX 8000",
            minor=i,
            links=[_bus(RTX8000_BUSES[bridge[i]])] * 2,
            pci_path=paths[i],
        )
        for i, b in enumerate(RTX8000_BUSES)
    ]


NVSWITCH_BUSES = [0x07, 0x0F, 0x47, 0x4E, 0x87, 0x90, 0xB7, 0xBD]


def nvswitch_gpus() -> list[FakeGpu]:
    """8 A100s, each with 12 NVLinks, 2 into each of 6 NVSwitches (every pair has full
    bandwidth); PCIe pairs behind switches, one root complex per switch, 2 per socket."""
    switches = [_bus(0xC4 + s) for s in range(6)]
    paths = _switch_pairs(NVSWITCH_BUSES, [0x00, 0x40, 0x80, 0xA0])
    return [
        FakeGpu(
            uuid=f"GPU-f0000000-0000-0000-0000-00000000000{i}",
            bus=_bus(b),
            numa=i // 4,
            minor=i,
            links=[s for s in switches for _ in range(2)],
            pci_path=paths[i],
        )
        for i, b in enumerate(NVSWITCH_BUSES)
    ]


PCIE_PAIRS_BUSES = [0x1A, 0x1B, 0x3C, 0x3D, 0x9A, 0x9B, 0xBC, 0xBD]


def pcie_pairs_gpus() -> list[FakeGpu]:
    """8 L40S without NVLink: pairs behind PCIe switches, 2 switches per socket on
    different root complexes (host bridges)."""
    paths = _switch_pairs(PCIE_PAIRS_BUSES, [0x00, 0x30, 0x80, 0xB0])
    return [
        FakeGpu(
            uuid=f"GPU-b0000000-0000-0000-0000-00000000000{i}",
            bus=_bus(b),
            numa=i // 4,
            memory=48 * GIB,
            name="NVIDIA L40S",
            minor=i,
            pci_path=paths[i],
        )
        for i, b in enumerate(PCIE_PAIRS_BUSES)
    ]
