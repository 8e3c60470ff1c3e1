"""`nri-sla validate POD.yaml...`: check SLA annotations against the contract, for CI.

Node-independent: it checks what a workload owner controls (syntax, types, ranges,
contradictions) and what every node refuses whatever its hardware: an SLA above the
pod's own resources (cpu.limit over the CPU limit, memory.max over the memory limit,
cpu.exclusive over the whole CPUs of the request), unless the node config (`--config`;
default: the built-in defaults) lets the namespace exceed them. What a particular node can
honour (CPUs, GPUs, devices) is `explain`'s. Init containers are checked too: the runtime
creates them like the others and the pod's SLA applies to them. A
`<prefix>/container.<name>` naming no container of the pod is an error here (the plugin,
shown one container at a time, cannot tell a misspelt name from another container's).
Exit status: 0 nothing refused (soft-mode warnings allowed), 1 any SLA error or refusal,
2 a manifest that cannot be read or is refused by the hardened YAML reader (one line on
stderr naming the file).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from dataclasses import asdict, dataclass, field, replace

from nri_plugin.commands.manifests import ManifestError, PodSpec, load_pods
from nri_plugin.config import NodeConfig, load_config
from nri_plugin.errors import EXIT_INVALID, EXIT_OK, EXIT_REFUSED
from nri_plugin.sla import DEFAULT_PREFIX

OK, NO_SLA, WARNED, REFUSED = "ok", "no SLA", "warned", "refused"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("manifests", nargs="+", metavar="POD.yaml")
    parser.add_argument("--prefix", default=None,
                        help="annotation prefix (default annotation-prefix of --config: "
                             f"{DEFAULT_PREFIX})")
    parser.add_argument("--config", default=None, metavar="FILE",
                        help="node config whose enforcement default and permissions apply "
                             "(default: the built-in defaults; nobody may exceed the pod's "
                             "resources)")
    parser.add_argument("--quiet", "-q", action="store_true",
                        help="print problems and the summary only")
    parser.add_argument("--json", action="store_true",
                        help="one JSON document: per container outcome and problems, and "
                             "the summary counts")


@dataclass
class Checked:
    """One container's verdict."""

    source: str
    container: str  # "" for a problem of the pod's annotations that is no container's
    init: bool
    outcome: str  # ok | no SLA | warned | refused
    problems: list[str] = field(default_factory=list)  # errors (refused) or warnings


def check_container(config: NodeConfig, pod: PodSpec, name: str) -> Checked:
    from nri_plugin.plan.context import PlanContext
    from nri_plugin.plan.grants import grant_shortfalls
    from nri_plugin.plan.planner import sla_key
    from nri_plugin.sla.errors import SlaError, SlaErrors
    from nri_plugin.sla.parse import sla_for_container

    checked = Checked(pod.source, name, name in pod.init_containers, OK)
    try:
        sla = sla_for_container(pod.annotations, name, default_enforcement=config.enforcement,
                                prefix=config.annotation_prefix)
    except SlaError as exc:
        checked.outcome = REFUSED
        checked.problems = [str(error) for error in exc.errors]
        if isinstance(exc, SlaErrors) and exc.omitted:
            checked.problems.append(f"... and {exc.omitted} more problems")
        return checked
    if sla is None:
        checked.outcome = NO_SLA
        return checked
    # The pod's own resources as the kubelet hands them to the runtime (as explain does).
    ctx = PlanContext(cgroup_version=2, namespace=pod.namespace, config=config,
                      granted=pod.resources[name].kubelet_grant())
    shortfalls = grant_shortfalls(sla, ctx)
    if shortfalls:
        checked.outcome = WARNED if sla.enforcement == "soft" else REFUSED
        key = sla_key(sla, config.annotation_prefix)
        checked.problems = [s.render(key) for s in shortfalls]
    return checked


def check_pod(config: NodeConfig, pod: PodSpec) -> list[Checked]:
    """Each container's verdict, and one for container keys that name none of them."""
    from nri_plugin.sla.parse import keys_naming_no_container

    results = [check_container(config, pod, name) for name in pod.containers]
    strays = keys_naming_no_container(pod.annotations, pod.containers,
                                      prefix=config.annotation_prefix)
    if strays:
        results.append(Checked(pod.source, "", False, REFUSED, [str(e) for e in strays]))
    return results


def summary(manifests: int, results: list[Checked]) -> dict[str, int]:
    containers = [r for r in results if r.container]
    counts = Counter(OK if r.outcome == NO_SLA else r.outcome for r in containers)
    return {"manifests": manifests, "containers": len(containers), "ok": counts[OK],
            "refused": counts[REFUSED], "warned": counts[WARNED],
            "pod_problems": sum(1 for r in results if not r.container)}


def main(args: argparse.Namespace) -> int:
    config = load_config(args.config) if args.config else NodeConfig()
    if args.prefix is not None:
        config = replace(config, annotation_prefix=args.prefix)
    status = EXIT_OK
    results: list[Checked] = []
    for path in args.manifests:
        try:
            pods = load_pods(path)
        except ManifestError as exc:
            print(f"error: {exc}", file=sys.stderr)
            status = EXIT_INVALID
            continue
        results += [checked for pod in pods for checked in check_pod(config, pod)]
    if any(r.outcome == REFUSED for r in results):
        status = max(status, EXIT_REFUSED)
    counts = summary(len(args.manifests), results)
    if args.json:
        json.dump({**counts, "results": [asdict(r) for r in results]}, sys.stdout, indent=2)
        print()
        return status
    for r in results:
        print_result(r, args.quiet)
    print(f"{counts['manifests']} manifests, {counts['containers']} containers: "
          f"{counts['ok']} ok, {counts['refused']} refused, {counts['warned']} warned"
          + (f"; {counts['pod_problems']} pods with annotations naming no container"
             if counts["pod_problems"] else ""))
    return status


def print_result(r: Checked, quiet: bool) -> None:
    where = (f"{r.source} {'init container' if r.init else 'container'} {r.container}"
             if r.container else r.source)
    if r.problems:
        label = "warning: " if r.outcome == WARNED else ""
        for problem in r.problems:
            print(f"{where}: {label}{problem}")
    elif not quiet:
        print(f"{where}: {r.outcome}")

