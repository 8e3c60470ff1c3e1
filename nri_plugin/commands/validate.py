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
Workloads (Deployment, StatefulSet, DaemonSet, ReplicaSet, Job, CronJob) are checked
through their pod templates; nri-sla's keys on a workload's own metadata are a warning
(no pod gets them). `-` reads standard input; every document of every file is checked
and reported, a document that cannot be used on its own line.
Exit status: 0 nothing refused (warnings allowed), 1 any SLA error or refusal, 2 a file
or document that cannot be read or is refused by the hardened YAML reader (one line on
stderr naming it; the rest are still checked), which wins over 1.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from dataclasses import asdict, dataclass, field

from nri_plugin.commands.manifests import (
    ContainerResources,
    ManifestError,
    PodSpec,
    load_documents,
    short,
    source_name,
)
from nri_plugin.commands.parsed import ParsedSlas, SlaKey
from nri_plugin.config.loader import load_config
from nri_plugin.config.values import NodeConfig
from nri_plugin.errors import EXIT_INVALID, EXIT_OK, EXIT_REFUSED, one_line
from nri_plugin.sla import DEFAULT_PREFIX, ENFORCEMENT_ALIAS
from nri_plugin.value import replace

OK, NO_SLA, WARNED, REFUSED = "ok", "no SLA", "warned", "refused"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "manifests",
        nargs="+",
        metavar="POD.yaml",
        help="Pod, List or workload manifests (Deployment, Job, ...); - reads standard input",
    )
    parser.add_argument(
        "--prefix",
        default=None,
        help=f"annotation prefix (default annotation-prefix of --config: {DEFAULT_PREFIX})",
    )
    parser.add_argument(
        "--config",
        default=None,
        metavar="FILE",
        help="node config whose enforcement default and permissions apply "
        "(default: the built-in defaults; nobody may exceed the pod's "
        "resources)",
    )
    parser.add_argument(
        "--quiet", "-q", action="store_true", help="print problems and the summary only"
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="one JSON document: each container's outcome, problems and "
        "hint, the files and documents not read, the summary counts "
        "and the exit status",
    )


@dataclass
class Checked:
    """One container's verdict."""

    source: str
    container: str  # "" for a problem of the pod's annotations that is no container's
    init: bool
    outcome: str  # ok | no SLA | warned | refused
    problems: list[str] = field(default_factory=list)  # errors (refused) or warnings
    hint: str = ""  # how the pod's author fixes them, when nri-sla can tell


@dataclass
class Verdicts:
    """One manifest's verdicts by what they depend on: each SLA (parsed once per manifest,
    ParsedSlas) measured once against each distinct namespace and resources, however many
    containers or replicas share them."""

    parsed: ParsedSlas
    known: dict[tuple[SlaKey, str, ContainerResources], tuple[str, list[str], bool]] = field(
        default_factory=dict
    )

    def check(self, pod: PodSpec, name: str) -> Checked:
        sla_key = self.parsed.key(pod, name)
        key = (sla_key, pod.namespace, pod.resources[name])
        if key not in self.known:
            self.known[key] = _verdict(self.parsed, pod, name)
        outcome, problems, over_grant = self.known[key]
        checked = Checked(pod.source, name, name in pod.init_containers, outcome, list(problems))
        prefix = self.parsed.config.annotation_prefix
        if (
            over_grant
            and not sla_key[1]
            and f"{prefix}/pod" in pod.annotations
            and len(pod.containers) > 1
        ):
            checked.hint = (
                f"{prefix}/pod applies to each of the pod's containers; give "
                f"this one its own SLA with {prefix}/container.{name}"
            )
        return checked


def _verdict(parsed: ParsedSlas, pod: PodSpec, name: str) -> tuple[str, list[str], bool]:
    """(outcome, problems, whether the problems are the SLA above the pod's resources)."""
    from nri_plugin.plan.context import PlanContext
    from nri_plugin.plan.grants import grant_shortfalls
    from nri_plugin.plan.planner import sla_key
    from nri_plugin.sla.errors import SlaErrors

    config = parsed.config
    sla, error = parsed.sla(pod, name)
    if error is not None:
        problems = [str(e) for e in error.errors]
        if isinstance(error, SlaErrors) and error.omitted:
            problems.append(f"... and {error.omitted} more problems")
        return REFUSED, problems, False
    if sla is None:
        return NO_SLA, [], False
    # The pod's own resources as the kubelet hands them to the runtime (as explain does).
    ctx = PlanContext(
        cgroup_version=2,
        namespace=pod.namespace,
        config=config,
        granted=pod.resources[name].kubelet_grant(),
    )
    shortfalls = grant_shortfalls(sla, ctx)
    if not shortfalls:
        return OK, [], False
    key = sla_key(sla, config.annotation_prefix)
    return (
        WARNED if sla.enforcement == "soft" else REFUSED,
        [s.render(key) for s in shortfalls],
        True,
    )


def check_pod(verdicts: Verdicts, pod: PodSpec) -> list[Checked]:
    """Each container's verdict, one for container keys that name none of them, and one
    for nri-sla's keys on the workload's own metadata."""
    from nri_plugin.sla.parse import keys_naming_no_container

    config = verdicts.parsed.config
    results = [verdicts.check(pod, name) for name in pod.containers]
    strays = keys_naming_no_container(
        pod.annotations, pod.containers, prefix=config.annotation_prefix
    )
    if strays:
        results.append(Checked(pod.source, "", False, REFUSED, [str(e) for e in strays]))
    head = config.annotation_prefix + "/"
    misplaced = [
        k for k in pod.workload_annotations if k.startswith(head) or k == ENFORCEMENT_ALIAS
    ]
    if misplaced:
        results.append(
            Checked(
                pod.source,
                "",
                False,
                WARNED,
                [
                    f"{short(key)}: on the workload's own metadata.annotations, which no pod gets; "
                    f"put it under {pod.template}.metadata.annotations"
                    for key in misplaced
                ],
            )
        )
    return results


@dataclass
class Run:
    """Everything one `validate` found."""

    manifests: int = 0
    results: list[Checked] = field(default_factory=list)
    errors: list[dict[str, str]] = field(default_factory=list)  # {source, error}

    def read(self, config: NodeConfig, path: str) -> None:
        self.manifests += 1
        try:
            documents = load_documents(path)
        except ManifestError as exc:
            self.errors.append({"source": source_name(path), "error": str(exc)})
            return
        verdicts = Verdicts(ParsedSlas(config))
        for document in documents:
            if document.error:
                self.errors.append({"source": document.source, "error": document.error})
            for pod in document.pods:
                self.results += check_pod(verdicts, pod)

    @property
    def status(self) -> int:
        if self.errors:
            return EXIT_INVALID
        return EXIT_REFUSED if any(r.outcome == REFUSED for r in self.results) else EXIT_OK

    def summary(self) -> dict[str, int]:
        containers = [r for r in self.results if r.container]
        counts = Counter(OK if r.outcome == NO_SLA else r.outcome for r in containers)
        pods = Counter(r.outcome for r in self.results if not r.container)
        return {
            "manifests": self.manifests,
            "containers": len(containers),
            "ok": counts[OK],
            "refused": counts[REFUSED],
            "warned": counts[WARNED],
            "pod_problems": pods[REFUSED],
            "workload_warnings": pods[WARNED],
            "unreadable": len(self.errors),
            "status": self.status,
        }


def summary_line(counts: dict[str, int]) -> str:
    extra = [
        f"{counts[key]} {what}"
        for key, what in (
            ("pod_problems", "pods with annotations naming no container"),
            ("workload_warnings", "workloads with SLA annotations on their own metadata"),
            ("unreadable", "manifests or documents not read"),
        )
        if counts[key]
    ]
    return (
        f"{counts['manifests']} manifests, {counts['containers']} containers: "
        f"{counts['ok']} ok, {counts['refused']} refused, {counts['warned']} warned"
        + "".join(f"; {e}" for e in extra)
        + f" (exit status {counts['status']})"
    )


def main(args: argparse.Namespace) -> int:
    config = load_config(args.config) if args.config else NodeConfig()
    if args.prefix is not None:
        config = replace(config, annotation_prefix=args.prefix)
    run = Run()
    for path in args.manifests:
        run.read(config, path)
    for error in run.errors:
        print(f"error: {one_line(error['error'])}", file=sys.stderr)
    counts = run.summary()
    if args.json:
        json.dump(
            {**counts, "results": [asdict(r) for r in run.results], "errors": run.errors},
            sys.stdout,
            indent=2,
        )
        print()
        return run.status
    for r in run.results:
        print_result(r, args.quiet)
    print(summary_line(counts))
    return run.status


def print_result(r: Checked, quiet: bool) -> None:
    where = (
        f"{r.source} {'init container' if r.init else 'container'} {r.container}"
        if r.container
        else r.source
    )
    if r.problems:
        label = "warning: " if r.outcome == WARNED else ""
        for problem in r.problems:
            print(f"{where}: {label}{problem}")
        if r.hint:
            print(f"{where}: hint: {r.hint}")
    elif not quiet:
        print(f"{where}: {r.outcome}")
