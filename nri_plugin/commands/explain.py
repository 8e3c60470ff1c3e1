"""`nri-sla explain POD.yaml`: what each container would get on this node, or why not.

A dry run of the plugin's data path: the adjustment fields containerd would receive and
the cgroup files nri-sla would write itself at StartContainer, for the NRI version
`--nri-version` names (the first line says which). With `--inventory` (another node's
snapshot) io.max device paths are not looked up on this machine. Exit status 1 when any
container would be refused, 2 when a manifest or the node config cannot be read.
`--gpus N` instead shows the GPUs nri-sla's chooser prefers and their score
(explain_gpus.py); exit 1 when no set satisfies the request.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from nri_plugin.commands import explain_gpus
from nri_plugin.commands.common import add_node_arguments, node_from_args
from nri_plugin.commands.manifests import load_pods
from nri_plugin.commands.parsed import ParsedSlas
from nri_plugin.errors import InvalidInput


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "manifests",
        nargs="*",
        metavar="POD.yaml",
        help="Pod, List or workload manifests (Deployment, Job, ...)",
    )
    explain_gpus.add_arguments(parser)
    add_node_arguments(parser)
    parser.add_argument(
        "--nri-version",
        default=NEWEST_NRI,
        type=nri_version,
        metavar="vX.Y.Z|unversioned",
        help=f"the NRI version the node's runtime speaks ({NRI_RUNTIMES}; "
        f"default {NEWEST_NRI}); numa.memory-policy needs v0.12",
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")


NEWEST_NRI = "v0.12.0"  # the newest NRI this package speaks (nri_plugin.nri.stub)
# Which runtimes speak which (nri_plugin.nri.levels); the README shows the same words.
NRI_RUNTIMES = (
    "v0.12.0: containerd 2.3; v0.11.0: CRI-O 1.35-1.36, containerd 2.2.1+; "
    "v0.10.0: CRI-O 1.34, containerd 2.2.0; v0.8.0: containerd 1.7.26 to 2.1; "
    "unversioned: a runtime that sends no version and whose release nri-sla "
    "does not know"
)
UNVERSIONED = "unversioned"


def nri_version(text: str) -> str:
    """--nri-version: vX.Y[.Z], or `unversioned` (the plugin's name for a runtime's empty
    version); argparse reports the error as a usage error (exit 2)."""
    from nri_plugin.nri.events import parse_version
    from nri_plugin.plugin.handlers import UNVERSIONED_NRI

    if text == UNVERSIONED:
        return UNVERSIONED_NRI
    if parse_version(text) is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not vX.Y[.Z] or {UNVERSIONED}")
    return text


class ReplayedDevices:
    """io.max devices when --inventory replays another node: a MAJ:MIN is taken as
    written, a device path is that node's and cannot be looked up here. Such a path is
    planned as 0:0 and listed in `unresolved` (explain says so); the node resolves it at
    CreateContainer and, in hard mode, refuses a container whose path it lacks."""

    def __init__(self) -> None:
        self.unresolved: list[str] = []

    def __call__(self, device: str) -> tuple[int, int]:
        from nri_plugin.enforce.blockdev import parse_maj_min

        numbers = parse_maj_min(device)
        if numbers is None:
            self.unresolved.append(device)
            return 0, 0
        return numbers


def flatten(prefix: str, value: Any) -> list[tuple[str, Any]]:
    """Nested dicts from MessageToDict as dotted paths, e.g. linux.resources.cpu.quota."""
    if isinstance(value, dict):
        if set(value) == {"value"}:  # the Optional* wrappers
            return [(prefix, value["value"])]
        items: list[tuple[str, Any]] = []
        for key, sub in value.items():
            items += flatten(f"{prefix}.{key}" if prefix else key, sub)
        return items
    return [(prefix, value)]


def explain_container(
    node: Any, pod: Any, container: str, nri_version: str, kubelet: Any, parsed: ParsedSlas
) -> dict[str, Any]:
    """`kubelet`: the simulated kubelet and device plugin granting the GPUs the
    container's limits name, as on a node (the run's containers share one node);
    `parsed`: the manifest's SLAs, each parsed once. With a ReplayedDevices as the node's
    resolve_device, the paths it could not resolve become warnings."""
    from google.protobuf.json_format import MessageToDict

    from nri_plugin.core.decision import decide
    from nri_plugin.core.request import ContainerRequest
    from nri_plugin.enforce.plan_writes import cgroup_writes
    from nri_plugin.plugin.adjustment import annotated, build_adjustment
    from nri_plugin.simulated.kubelet import AdmissionRefused

    resources = pod.resources[container]
    where = {"pod": f"{pod.namespace}/{pod.name}", "container": container}
    try:
        grant = kubelet.admit(where["pod"], pod.namespace, pod.name, container, resources.gpus)
    except AdmissionRefused as exc:  # the kubelet, not nri-sla, turns the pod away
        return {**where, "outcome": "not admitted", "error": str(exc)}
    _, invalid = parsed.sla(pod, container)
    if invalid is not None:  # what decide answers, without parsing the text again
        return {**where, "outcome": "refused", "nri_version": nri_version, "error": str(invalid)}
    # What the kubelet would hand the runtime for the manifest's resources.
    granted = resources.kubelet_grant(
        cdi_devices=grant.allocation.cdi_devices,
        env_gpus=pod.environments.get(container, {}).get("NVIDIA_VISIBLE_DEVICES"),
    )
    owner = f"{pod.namespace}/{pod.name}/{container}"
    decision = decide(
        node,
        ContainerRequest(
            pod.annotations,
            container,
            namespace=pod.namespace,
            owner=owner,
            pod=f"{pod.namespace}/{pod.name}",
            nri_version=nri_version,
            granted=granted,
        ),
    )
    if decision.error is None:  # held, as on a node: the next containers see it taken
        node.admit(
            owner, decision.plan, node.gpu_grant(granted), granted.cpu_request_millis, ""
        ).commit()
    replayed = node.resolve_device if isinstance(node.resolve_device, ReplayedDevices) else None
    unresolved = [*replayed.unresolved] if replayed is not None else []
    if replayed is not None:
        replayed.unresolved.clear()
    result: dict[str, Any] = {**where, "outcome": decision.outcome, "nri_version": nri_version}
    if decision.error is not None:
        result["error"] = str(decision.error)
    if decision.plan is not None:
        plan = decision.plan
        adjustment = annotated(
            node.annotations_for(plan, "nri", owner), settings=build_adjustment(plan)
        )
        result["adjustment"] = dict(flatten("", MessageToDict(adjustment)))
        result["direct_writes"] = [
            f"{w.controller}/{w.file} = {w.value}"
            for w in cgroup_writes(plan, "direct", node.capabilities.bfq)
        ]
        result["warnings"] = [
            *plan.warnings,
            *(
                f"io.max device {path}: not looked up here (--inventory replays another node), "
                "shown as 0:0; that node resolves it at CreateContainer"
                for path in unresolved
            ),
        ]
        if plan.placement_record:
            result["placement"] = plan.placement_record
    return result


def render(result: dict[str, Any], out: Any) -> None:
    head = f"{result['pod']} / {result['container']}: {result['outcome']}"
    print(head, file=out)
    if "error" in result:
        print(f"  error: {result['error']}", file=out)
    if "placement" in result:
        chosen = ", ".join(
            f"{k} {','.join(v) if isinstance(v, list) else v}"
            for k, v in result["placement"].items()
        )
        print(f"  placement: {chosen}", file=out)
    for key, value in result.get("adjustment", {}).items():
        print(f"  adjustment {key} = {value}", file=out)
    for write in result.get("direct_writes", []):
        print(f"  at StartContainer write {write}", file=out)
    for warning in result.get("warnings", []):
        print(f"  warning: {warning}", file=out)


def main(args: argparse.Namespace) -> int:
    if (args.gpus is None) == (not args.manifests):
        print("nri-sla explain: give pod manifests or --gpus N (not both)", file=sys.stderr)
        return 2
    try:
        node = node_from_args(args)
        if args.inventory is not None:  # another node's: its /dev is not this machine's
            node.resolve_device = ReplayedDevices()
        if args.gpus is not None:
            return gpu_preference(node.allocator.inventory, args)
        manifests = [load_pods(path) for path in args.manifests]
    except (InvalidInput, ValueError, OSError) as exc:  # ManifestError, ConfigError, --gpus
        print(f"nri-sla explain: {exc}", file=sys.stderr)
        return 2
    from nri_plugin.simulated.deviceplugin import DevicePlugin
    from nri_plugin.simulated.kubelet import Kubelet

    kubelet = Kubelet(DevicePlugin(node.allocator.inventory))
    results = []
    for pods in manifests:
        parsed = ParsedSlas(node.config)
        results += [
            explain_container(node, pod, name, args.nri_version, kubelet, parsed)
            for pod in pods
            for name in pod.containers
        ]
    if args.json:
        json.dump(results, sys.stdout, indent=2)
        print()
    else:
        print(f"runtime: NRI {args.nri_version} (--nri-version)")
        for result in results:
            render(result, sys.stdout)
    return 1 if any(r["outcome"] in ("refused", "not admitted") for r in results) else 0


def gpu_preference(inventory: Any, args: argparse.Namespace) -> int:
    result = explain_gpus.prefer(inventory, args)
    if args.json:
        json.dump(result, sys.stdout, indent=2)
        print()
    else:
        print("\n".join(explain_gpus.render(result)))
    return 0 if "gpus" in result else 1
