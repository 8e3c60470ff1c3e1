"""`nri-sla demo`: the plugin against the built-in runtime simulator, with example pods.

Everything crosses a real unix socket as containerd would send it: the simulator
registers, configures and synchronizes the plugin, then creates each example pod's
containers with the resources the kubelet derives from the manifest (CPU shares, quota,
memory limit, and GPUs the simulated kubelet books from a device plugin with the NVIDIA
cdi-cri strategy, resolved against the node's CDI specs, or another device-list strategy);
the simulated kubelet serves its books on its PodResources socket, which the plugin asks
(never a real kubelet's). The table shows the grant, the GPUs the created container can
open (from its final OCI spec) and those nri-sla holds for it, and what it got back (the
adjustment) or the error containerd would show. The node is the
replayed DGX-like inventory with the demo's node policy (examples/demo-config.yaml); on
cgroup v1 the RT budget of the pods' ancestors is raised in a scratch cgroup tree, so
nothing on this machine is touched.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import re
import sys
import tempfile
import textwrap
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nri_plugin.commands.common import add_node_arguments, node_from_args
from nri_plugin.commands.manifests import ManifestError, PodSpec, load_pods
from nri_plugin.errors import ProgrammingError
from nri_plugin.ops.logsetup import FORMATS, setup_logging
from nri_plugin.simulated.deviceplugin import STRATEGIES
from nri_plugin.simulated.ocispec import ENV_VISIBLE, NvidiaRuntime
from nri_plugin.topology.gpus import GpuInventory
from nri_plugin.value import replace

if TYPE_CHECKING:  # the simulator and the plugin are loaded when the demo runs, not for --help
    from nri_plugin.core.nodestate import NodeState
    from nri_plugin.nri.pb.nri_pb2 import PodSandbox
    from nri_plugin.plugin import SlaPlugin
    from nri_plugin.simulated.kubelet import Grant, Kubelet
    from nri_plugin.simulated.runtime import PluginSession, RuntimeSimulator

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "pods",
        nargs="*",
        metavar="POD.yaml",
        help=f"pod manifests (default: {EXAMPLES}/pods/*.yaml)",
    )
    add_node_arguments(
        parser,
        config=str(EXAMPLES / "demo-config.yaml"),
        cgroup="v2",
        inventory=str(EXAMPLES / "dgx-like.yaml"),
    )
    parser.add_argument(
        "--runtime",
        choices=("containerd-2.3", "containerd-1.7"),
        default="containerd-2.3",
        help="which runtime the simulator plays",
    )
    parser.add_argument(
        "--device-list-strategy",
        choices=STRATEGIES,
        default="cdi-cri",
        help="how the simulated NVIDIA device plugin hands each grant to the "
        "runtime; with envvar the node's runtime accepts "
        "NVIDIA_VISIBLE_DEVICES (that strategy needs it) and nri-sla "
        "learns the grant from the kubelet's PodResources",
    )
    parser.add_argument(
        "--verbose",
        "-v",
        action="store_true",
        help="show the plugin's log on stderr, as `nri-sla run` writes it "
        "(decisions with their fields)",
    )
    parser.add_argument(
        "--log-format",
        choices=FORMATS,
        default="text",
        help="the format of --verbose's lines (default text)",
    )


def summarize(response: Any, prefix: str) -> list[str]:
    """The adjustment in a few readable lines."""
    from nri_plugin.nri.pb import nri_pb2 as pb

    adj = response.adjust
    res = adj.linux.resources
    lines = []
    cpu = []
    if res.cpu.HasField("quota"):
        cpu.append(f"quota {res.cpu.quota.value}us/{res.cpu.period.value}us")
    if res.cpu.cpus:
        cpu.append(f"cpus {res.cpu.cpus}")
    if res.cpu.mems:
        cpu.append(f"mems {res.cpu.mems}")
    if res.cpu.HasField("realtime_runtime"):
        cpu.append(f"rt {res.cpu.realtime_runtime.value}us/{res.cpu.realtime_period.value}us")
    if cpu:
        lines.append("cpu: " + ", ".join(cpu))
    if res.memory.HasField("limit"):
        lines.append(f"memory.max: {res.memory.limit.value}")
    lines += [f"unified {k}: {v}" for k, v in sorted(res.unified.items())]
    if adj.linux.HasField("memory_policy"):
        policy = adj.linux.memory_policy
        mode = pb.MpolMode.Name(policy.mode)
        lines.append(f"memory policy: {mode} nodes {policy.nodes}")
    lines += [f"env {e.key}={e.value}" for e in adj.env]
    lines += [f"CDI device {d.name}" for d in adj.CDI_devices]
    lines += [f"device {d.path}" for d in adj.linux.devices]
    warnings = adj.annotations.get(f"{prefix}/warnings")
    if warnings:
        # "; "-joined, each warning led by its annotation key (a message may hold "; ").
        lines += [f"warning: {w}" for w in re.split(f"; (?={re.escape(prefix)}/)", warnings)]
    return lines or ["(nothing to change)"]


Row = tuple[str, str, str, list[str]]


def demo_runtime(strategy: str) -> NvidiaRuntime:
    """The node's nvidia-container-runtime as NVIDIA recommends it beside a device plugin
    with `strategy`: NVIDIA_VISIBLE_DEVICES from an unprivileged container's env opens
    nothing, unless the envvar strategy needs the env accepted (then a tenant's env is the
    runtime's leak)."""
    return NvidiaRuntime(accept_env=strategy == "envvar")


def numbers(indexes: Iterable[int]) -> str:
    return ",".join(str(i) for i in sorted(indexes))


def gpu_lines(inventory: GpuInventory, device_ids: Iterable[str], env: list[str]) -> list[str]:
    """The kubelet's grant in a line (GPU indexes and their NUMA nodes), or what an env
    that names GPUs gets: nothing."""
    gpus = [g for g in (inventory.find(i) for i in device_ids) if g is not None]
    if gpus:
        nodes = numbers({g.numa_node for g in gpus if g.numa_node is not None})
        return [
            f"granted GPUs {numbers(g.index for g in gpus)} (NUMA {nodes}) by the device plugin"
        ]
    named = [e for e in env if e.startswith(f"{ENV_VISIBLE}=")]
    return [f"granted no GPU: {named[-1]} in the env is not a grant"] if named else []


RT_ROOT = {"cpu.rt_runtime_us": "950000", "cpu.rt_period_us": "1000000"}  # kernel default
RT_NEW_GROUP = {"cpu.rt_runtime_us": "0", "cpu.rt_period_us": "1000000"}  # a new cgroup


def v1_cpu_tree(root: Path, parent: str) -> None:
    """The cpu hierarchy of a cgroup v1 node as the kernel and kubelet leave it before
    CreateContainer: the kernel's RT budget at the root, none in the pod's ancestors."""
    group = root / "cpu"
    for name, value in RT_ROOT.items():
        if not (group / name).exists():
            group.mkdir(parents=True, exist_ok=True)
            (group / name).write_text(value)
    for part in Path(parent.lstrip("/")).parts:
        group = group / part
        if not group.exists():
            group.mkdir()
            for name, value in RT_NEW_GROUP.items():
                (group / name).write_text(value)


def rt_ancestors(root: Path, parent: str) -> str:
    """The ancestors' cpu.rt_runtime_us after the plugin made room, in one line."""
    group, raised = root / "cpu", []
    for part in Path(parent.lstrip("/")).parts:
        group = group / part
        runtime = (group / "cpu.rt_runtime_us").read_text().strip()
        raised.append(f"{'pod' if part.startswith('pod') else part} {runtime}us")
    return (
        f"rt budget of the ancestors: {', '.join(raised)} (node: "
        f"{RT_ROOT['cpu.rt_runtime_us']}us per {RT_ROOT['cpu.rt_period_us']}us)"
    )


def held_line(inventory: GpuInventory, opens: Iterable[int], held: frozenset[str]) -> str:
    """What the container can open, and the GPUs nri-sla holds for it (by identity)."""
    held_gpus = [g.index for g in inventory.gpus if g.identity in held]
    opened = list(opens)
    return (
        f"{f'opens GPUs {numbers(opened)}' if opened else 'opens no GPU'}, nri-sla holds "
        f"{f'GPUs {numbers(held_gpus)}' if held_gpus else 'none'}"
    )


@dataclass(frozen=True)
class DemoNode:
    """The simulated node one demo runs on: the runtime's plugin session, the plugin it
    drives, the kubelet that admits the pods, and the scratch cgroup v1 tree (None on v2)."""

    node: NodeState
    inventory: GpuInventory
    kubelet: Kubelet
    nvidia_runtime: NvidiaRuntime
    sim: RuntimeSimulator
    session: PluginSession
    plugin: SlaPlugin
    rt_tree: Path | None

    async def run_pod(self, spec: PodSpec) -> list[Row]:
        """One row per container of the pod: sandbox, then each container created."""
        from nri_plugin.simulated.kubelet import AdmissionRefused
        from nri_plugin.simulated.runtime import make_pod

        pod = make_pod(spec.name, namespace=spec.namespace, annotations=spec.annotations)
        if self.rt_tree is not None:
            v1_cpu_tree(self.rt_tree, pod.linux.cgroup_parent)
        await self.session.run_pod_sandbox(pod)
        rows: list[Row] = []
        for name in spec.containers:
            where = (f"{spec.namespace}/{spec.name}", name)
            # What the kubelet (and the device plugin) give the runtime for the manifest's
            # resources; the SLA may only tighten these.
            try:
                grant = self.kubelet.admit(
                    pod.uid, pod.namespace, pod.name, name, spec.resources[name].gpus
                )
            except AdmissionRefused as exc:
                rows.append((*where, "NOT ADMITTED", [str(exc)]))
                continue
            rows.append((*where, *await self.create(spec, pod, name, grant)))
        return rows

    async def create(
        self, spec: PodSpec, pod: PodSandbox, name: str, grant: Grant
    ) -> tuple[str, list[str]]:
        """The admitted container created through the plugin: its result and details."""
        from nri_plugin.simulated.kubelet import container_request
        from nri_plugin.simulated.ocispec import openable_gpus
        from nri_plugin.simulated.runtime import PluginCallError, make_resources

        env = [f"{k}={v}" for k, v in spec.environments.get(name, {}).items()]
        granted = spec.resources[name].kubelet_grant()
        ctr = container_request(
            pod,
            name,
            grant,
            env=env,
            resources=make_resources(
                cpu_shares=granted.cpu_shares,
                cpu_quota=granted.cpu_quota,
                cpu_period=granted.cpu_period,
                memory_limit=granted.memory_limit,
            ),
        )
        gpus = gpu_lines(self.inventory, grant.device_ids, env)
        try:
            response = await self.session.create_container(pod, ctr)
        except PluginCallError as exc:
            return "REFUSED", [*gpus, exc.message]
        opens = openable_gpus(self.sim.state.specs[ctr.id], self.inventory, self.nvidia_runtime)
        entry = self.plugin.registry.get(ctr.id)
        held = entry.gpus.whole if entry is not None else frozenset()
        if gpus or opens or held:
            gpus.append(held_line(self.inventory, opens, held))
        lines = [*gpus, *summarize(response, self.node.prefix)]
        if (
            self.rt_tree is not None
            and response is not None
            and response.adjust.linux.resources.cpu.HasField("realtime_runtime")
        ):
            lines.insert(len(gpus) + 1, rt_ancestors(self.rt_tree, pod.linux.cgroup_parent))
        warned = any(line.startswith("warning") for line in lines)
        return "warned" if warned else "enforced", lines


@asynccontextmanager
async def demo_node(node: NodeState, runtime: str, strategy: str) -> AsyncIterator[DemoNode]:
    """The plugin serving `node` to the runtime simulator over a real unix socket, beside
    the simulated kubelet's PodResources socket, all in a scratch directory."""
    from nri_plugin.enforce.cgpaths import CgroupFacts
    from nri_plugin.nri.stub import Stub
    from nri_plugin.plugin import SlaPlugin
    from nri_plugin.simulated.cdi import CdiRegistry
    from nri_plugin.simulated.deviceplugin import DevicePlugin, nvidia_cdi_specs
    from nri_plugin.simulated.kubelet import Kubelet
    from nri_plugin.simulated.podresources_server import PodResourcesServer
    from nri_plugin.simulated.runtime import RuntimeSimulator, SimulatorOptions

    mode = "v0.12" if runtime == "containerd-2.3" else "v0.8"
    if node.allocator is None:
        raise ProgrammingError("the demo's node has no allocator (build it with its GPUs)")
    inventory = node.allocator.inventory
    kubelet = Kubelet(DevicePlugin(inventory, strategy))
    with (
        tempfile.TemporaryDirectory(prefix="nri-sla-demo-") as tmp,
        PodResourcesServer(kubelet, f"{tmp}/kubelet.sock") as books,
    ):
        # the plugin asks the simulated kubelet's books, never a real kubelet's
        node.config = replace(
            node.config, gpu=replace(node.config.gpu, podresources_socket=books.socket_path)
        )
        rt_tree = None
        if node.cgroup_version == 1:  # the plugin makes RT room in this scratch tree
            rt_tree = Path(tmp) / "cgroup"
            node.facts = CgroupFacts(version=1, driver="cgroupfs", root=rt_tree)
        socket_path = f"{tmp}/nri.sock"
        async with RuntimeSimulator(
            socket_path, SimulatorOptions(mode=mode), cdi=CdiRegistry(nvidia_cdi_specs(inventory))
        ) as sim:
            plugin = SlaPlugin(node)
            stub = Stub(plugin, name="nri-sla", idx="50", socket_path=socket_path)
            serving = asyncio.create_task(stub.run())
            session = await sim.accept()
            plugin.on_registered(stub)
            try:
                yield DemoNode(
                    node, inventory, kubelet, demo_runtime(strategy), sim, session, plugin, rt_tree
                )
            finally:
                stub.stop()
                serving.cancel()


async def run_demo(
    pods: list[PodSpec], node: NodeState, runtime: str, strategy: str = "cdi-cri"
) -> list[Row]:
    async with demo_node(node, runtime, strategy) as demo:
        return [row for spec in pods for row in await demo.run_pod(spec)]


def print_table(rows: list[Row], out: Any) -> None:
    widths = [max(len(r[i]) for r in [*rows, ("POD", "CONTAINER", "RESULT", [])]) for i in range(3)]
    detail_width = max(40, 110 - sum(widths))
    print(
        f"{'POD':<{widths[0]}}  {'CONTAINER':<{widths[1]}}  {'RESULT':<{widths[2]}}  DETAILS",
        file=out,
    )
    for pod, container, result, details in rows:
        wrapped = [
            part
            for line in details
            for part in textwrap.wrap(line, detail_width, subsequent_indent="  ")
        ]
        first, *rest = wrapped or [""]
        print(
            f"{pod:<{widths[0]}}  {container:<{widths[1]}}  {result:<{widths[2]}}  {first}",
            file=out,
        )
        pad = " " * (sum(widths) + 6)
        for line in rest:
            print(pad + line, file=out)


def shown(path: str | None) -> str:
    """A path as the user would type it here: relative below the working directory (the
    same output in every checkout, so README can show it)."""
    if path is None:
        return "(defaults)"
    relative = os.path.relpath(path)
    return path if relative.startswith("..") else relative


def main(args: argparse.Namespace) -> int:
    # The table says it all; the log is for `run` (or --verbose, in run's own format).
    if args.verbose:
        setup_logging(args.log_format, "info")
    else:
        logging.getLogger().setLevel(logging.CRITICAL)
    paths = args.pods or sorted(str(p) for p in (EXAMPLES / "pods").glob("*.yaml"))
    if not paths:
        print(f"nri-sla demo: no pod manifests given and none in {EXAMPLES}/pods", file=sys.stderr)
        return 2
    try:
        node = node_from_args(args)
        pods = [pod for path in paths for pod in load_pods(path)]
    except (ManifestError, ValueError, OSError) as exc:
        print(f"nri-sla demo: {exc}", file=sys.stderr)
        return 2
    print(
        f"nri-sla demo: simulated {args.runtime} node, cgroup {args.cgroup}, "
        f"{len(node.allocator.inventory.gpus)} GPUs from {shown(args.inventory)},\n"
        f"node policy {shown(args.config)}\n"
    )
    print_table(
        asyncio.run(run_demo(pods, node, args.runtime, args.device_list_strategy)), sys.stdout
    )
    return 0
