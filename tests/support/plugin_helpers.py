"""Helpers for the plugin's data-path tests: a replayed DGX-like node over a fake cgroup
tree (tests/support/cgroups.py), the plugin served to the runtime simulator, what runc
and the kubelet do to the tree."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

from nri_plugin.config.cap import Cap
from nri_plugin.config.values import NodeConfig, Permissions, PodCaps
from nri_plugin.core.nodestate import NodeState
from nri_plugin.enforce.capabilities import NodeCapabilities
from nri_plugin.enforce.cgpaths import CgroupFacts
from nri_plugin.ops.metrics import NO_METRICS, MetricsSink
from nri_plugin.plan.allocator import Allocator
from nri_plugin.plan.rt_budget import RtBudget
from nri_plugin.topology.snapshot import load_snapshot
from tests.support.cgroups import CgroupTree

REPO = Path(__file__).resolve().parents[2]
DGX = REPO / "examples" / "dgx-like.yaml"
DEVICES = {"/dev/nvme0n1": (259, 0), "/dev/sda": (8, 0)}
# The node's record key: every make_node shares it, as plugin restarts share the key file.
RECORD_KEY = bytes(range(32))
# The DGX-like snapshot's NUMA node 0, and an SLA aligned to it (the CPU pool's tests).
DGX_NODE0 = "0-15,32-47"
ALIGNED = {"sla.nri.io/pod": "numa: {nodes: '0'}"}
# The design's full example (gpu: count form; mig and ids are alternatives to count).
FULL_SLA = """\
enforcement: hard
cpu:
  limit: 2.5
  period: 100ms
  rt-runtime: 5ms
  rt-period: 1s
  exclusive: 4
numa:
  nodes: auto
  memory-policy: bind
memory:
  high: 8Gi
  max: 10Gi
io:
  weight: 500
  max:
    - device: /dev/nvme0n1
      read-bps: 500Mi
      write-bps: 200Mi
      read-iops: 20000
      write-iops: 10000
gpu:
  count: 2
  topology: nvlink
  align: true
  from: plugin
"""


def guaranteed(cpus: int, memory: int = 16 << 30):
    """A Guaranteed container's resources as the kubelet sets them: requests = limits."""
    from nri_plugin.simulated.runtime import make_resources

    return make_resources(
        cpu_shares=cpus * 1024, cpu_quota=cpus * 100_000, cpu_period=100_000, memory_limit=memory
    )


def gpu_grant(*indexes: int) -> tuple[str, ...]:
    """CDI names a device plugin grants (by GPU index)."""
    return tuple(f"nvidia.com/gpu={i}" for i in indexes)


def resolve(spec: str) -> tuple[int, int]:
    if spec in DEVICES:
        return DEVICES[spec]
    major, sep, minor = spec.partition(":")
    if sep and major.isdigit() and minor.isdigit():
        return int(major), int(minor)
    raise OSError(f"{spec}: no such block device")


def make_node(
    version: int,
    tree: CgroupTree | None = None,
    *,
    realtime=("*",),
    gpus=("*",),
    rt_share: float = 0.95,
    record_key: bytes = RECORD_KEY,
    **config,
) -> NodeState:
    snapshot = load_snapshot(DGX)
    config.setdefault("permissions", Permissions(realtime=tuple(realtime), gpus=tuple(gpus)))
    cfg = NodeConfig(**config)
    facts = None
    if tree is not None:
        facts = CgroupFacts(version=version, driver="cgroupfs", root=tree.root)
    return NodeState(
        cfg,
        version,
        facts=facts,
        allocator=Allocator(snapshot.topology, snapshot.inventory, cfg.reserved_cpus),
        rt_budget=RtBudget(cfg.rt_budget * rt_share),
        capabilities=NodeCapabilities(io_weight=True, bfq=True),
        resolve_device=resolve,
        record_key=record_key,
    )


def plain_node(config: NodeConfig | None = None, version: int = 2, **kw) -> NodeState:
    """The plugin's node on the DGX-like snapshot, its RT budget the config's share of
    the kernel's default: for tests about what the books do not decide (the SLA text,
    failures, records)."""
    snapshot = load_snapshot(DGX)
    config = config or NodeConfig()
    return NodeState(
        config,
        version,
        allocator=Allocator(snapshot.topology, snapshot.inventory),
        rt_budget=RtBudget(config.rt_budget * 0.95),
        **kw,
    )


def permissive_node(version: int, tree: CgroupTree | None = None, **config) -> NodeState:
    """A node policy that lets every namespace hold CPUs and RT time without a request,
    and whole-node pod caps: for the tests about records and faults (the grant rules have
    their own tests in tests/plan/test_grants.py). GPUs are always a device plugin's grant
    (gpu_grant)."""
    config.setdefault(
        "permissions",
        Permissions(
            realtime=("*",), gpus=("*",), exclusive_cpus=("*",), exceed_runtime_limits=("*",)
        ),
    )
    return make_node(
        version,
        tree,
        pod_caps=PodCaps(exclusive_cpus=Cap(100, percent=True), rt_share=1.0),
        **config,
    )


@contextlib.asynccontextmanager
async def plugin_session(
    node: NodeState,
    tmp_path: Path,
    mode: str = "v0.12",
    metrics: MetricsSink = NO_METRICS,
    pods=(),
    containers=(),
    events=None,
    **options,
):
    """The SLA plugin served over a real unix socket to the runtime simulator (`events`:
    its plugin.pod_events.PodEvents, default none)."""
    from nri_plugin.nri.stub import Stub
    from nri_plugin.plugin import SlaPlugin
    from nri_plugin.plugin.pod_events import NO_EVENTS
    from nri_plugin.simulated.runtime import RuntimeSimulator, SimulatorOptions

    socket_path = str(tmp_path / "nri.sock")
    sim_options = SimulatorOptions(mode=mode, **options)
    async with RuntimeSimulator(socket_path, sim_options, pods=pods, containers=containers) as sim:
        plugin = SlaPlugin(node, metrics, events or NO_EVENTS)
        stub = Stub(plugin, name="nri-sla", idx="50", socket_path=socket_path)
        serving = asyncio.create_task(stub.run())
        session = await sim.accept()
        plugin.on_registered(stub)
        await plugin.restorer.restored()  # the runtime holds what the restore sent
        try:
            yield sim, session, plugin
        finally:
            stub.stop()
            serving.cancel()
            with contextlib.suppress(BaseException):
                await serving


def restore_updates(session) -> list:
    """The updates a plugin's restore after the runtime's Synchronize sent: none in the
    Synchronize answer (asserted), all as plugin-initiated UpdateContainers."""
    assert list(session.sync_updates) == [], "the Synchronize answer carries no updates"
    return [update for request in session.unsolicited for update in request.update]


def runc_create(tree: CgroupTree, container) -> dict[str, Path]:
    """What runc create does on a v1 node with the spec the runtime kept (the plugins'
    adjustments in it): the container's dirs, and the spec's CPU, cpuset and memory
    values in their files."""
    dirs = tree.add_cgroup(container.linux.cgroups_path)
    res = container.linux.resources
    cpu = res.cpu
    values = {
        ("cpu", "cpu.cfs_period_us"): cpu.period,
        ("cpu", "cpu.cfs_quota_us"): cpu.quota,
        ("cpu", "cpu.rt_period_us"): cpu.realtime_period,
        ("cpu", "cpu.rt_runtime_us"): cpu.realtime_runtime,
        ("memory", "memory.limit_in_bytes"): res.memory.limit,
    }
    for (controller, name), value in values.items():
        if value.ListFields():
            (dirs[controller] / name).write_text(str(value.value))
    for name, text in (("cpuset.cpus", cpu.cpus), ("cpuset.mems", cpu.mems)):
        if text:
            (dirs["cpuset"] / name).write_text(text)
    return dirs


def remove_pod_cgroups(tree: CgroupTree, cgroups_path: str) -> None:
    """What the kubelet does once a pod is gone: its cgroup removed in every hierarchy."""
    import shutil

    for top in tree.hierarchies().values():
        shutil.rmtree(top / Path(cgroups_path.lstrip("/")).parent, ignore_errors=True)


def make_pod_cgroups(tree: CgroupTree, cgroups_path: str) -> None:
    """What the kubelet provides before CreateContainer: the pod's cgroup (with the
    kernel's RT files in cpu; the hierarchy's root holds the node's RT budget), unless the
    pod has one already (another container's)."""
    pod = Path(cgroups_path.lstrip("/")).parent
    if not any((top / pod).is_dir() for top in tree.hierarchies().values()):
        tree.add_cgroup(str(pod))


def pool_breaches(sim, node: NodeState) -> list[str]:
    """What the node's CPU pool rule finds wrong in the cpusets the runtime holds (the
    simulator's stored specs, which every adjustment and update reached): an exclusive
    CPU in another container's cpuset, a cpuset below its CPU request, a cpuset other
    than the pool model's. Empty: the rule holds."""
    from nri_plugin.plan.cpupool import cpus_needed
    from nri_plugin.plugin.handlers import granted_resources
    from nri_plugin.plugin.unenforced import LIVE_STATES
    from nri_plugin.topology.cpulist import format_cpulist, parse_cpulist

    online = node.allocator.topology.online
    owner_of = node.allocator.exclusive_cpus_in_use()
    found = []
    for ctr in sim.state.containers.values():
        if ctr.state not in LIVE_STATES:
            continue
        text = ctr.linux.resources.cpu.cpus
        cpus = parse_cpulist(text) or online  # no cpuset: every online CPU
        theirs = {c for c in cpus if owner_of.get(c, ctr.id) != ctr.id}
        if theirs:
            found.append(f"{ctr.name}: runs on exclusive CPUs {format_cpulist(theirs)}")
        need = cpus_needed(granted_resources(ctr.linux.resources).cpu_request_millis)
        if len(cpus) < need:
            found.append(f"{ctr.name}: {len(cpus)} CPUs for a request of {need}")
        model = parse_cpulist(node.cpusets.cpuset_of(ctr.id))
        if model != cpus:
            found.append(
                f"{ctr.name}: holds {format_cpulist(cpus)}, the pool says {format_cpulist(model)}"
            )
    return found
