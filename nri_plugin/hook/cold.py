"""The hook's cold path: the core decides, the decision becomes CgroupActions, carried out.

Imported only when the container may have an SLA and no cached decision fits (cache.py).
The decision is the plugin's (nri_plugin.core.decide) on a one-shot NodeState: no RT
budget memory, an allocator only when the SLA asks for placement, no device injection
(docs/hook.md says what that means for exclusive CPUs and GPUs). What differs is the path:
no NRI, so every setting is written directly (scope "all"). The actions are stored for
the next replica when everything they depend on is in the cache key or its recorded deps.
"""

from __future__ import annotations

import logging
from typing import Any

from nri_plugin.config import ConfigError, NodeConfig, load_config
from nri_plugin.core import ContainerRequest, NodeState, decide, node_allocator
from nri_plugin.core.decision import Decision, parse_sla
from nri_plugin.core.recordkey import NoRecordKey, RecordKeyError, load_key
from nri_plugin.enforce.blockdev import resolve_block_device
from nri_plugin.enforce.capabilities import detect_capabilities
from nri_plugin.enforce.cgpaths import CgroupFacts, CgroupPaths
from nri_plugin.enforce.cgroupdetect import detect_cgroup_facts
from nri_plugin.enforce.errors import EnforceError
from nri_plugin.enforce.plan_writes import cgroup_writes
from nri_plugin.errors import EXIT_OK, InternalFailure, InvalidInput, Refused, SlaFailure
from nri_plugin.hook import cache, warm
from nri_plugin.hook.actions import CgroupActions, carry_out
from nri_plugin.hook.deadline import Deadline
from nri_plugin.hook.options import HookOptions
from nri_plugin.hook.outcome import WARN, Outcome, RunState
from nri_plugin.hook.state import BundleSpec, OciState
from nri_plugin.hook.target import Target
from nri_plugin.ops.event import applied_fields
from nri_plugin.plan.model import PlanError
from nri_plugin.plan.record import RecordError, decode_record, record_body
from nri_plugin.sla.model import Sla

Deps = list[list[str]]


def enforce(opts: HookOptions, state: OciState, spec: BundleSpec,
            annotations: dict[str, str], target: Target, deadline: Deadline,
            rs: RunState) -> Outcome:
    # The core logs (GPU inventory fallbacks, ...); with no handler Python would print
    # them to stderr, where runc expects the hook's one line.
    logging.getLogger("nri_sla").addHandler(logging.NullHandler())
    store = cache.open_store(opts) if warm.locatable(opts, spec, state) else None
    ckey = cache.config_key(opts) if store else None  # before reading: a change = no store
    config = load_node_config(opts.config)
    rs.log_format = config.log.format
    sla = parse_sla(config, annotations, target.name)
    if sla is None:
        return Outcome(EXIT_OK, "skipped", [], state.id)
    rs.enforcement = sla.enforcement
    deadline.check("finding the container's cgroup")
    root = opts.cgroup_root or str(config.cgroup.root)
    fkey = cache.facts_key(ckey, root) if ckey else None
    facts = cgroup_facts(opts, config, spec)
    paths = container_paths(opts, facts, spec, state)
    deps: Deps = []
    record = annotations.get(f"{config.annotation_prefix}/applied")
    verified = None if record is None else verify_actions(record, sla, target.id,
                                                          config.state_dir)
    if isinstance(verified, CgroupActions):
        actions = verified
    else:
        deadline.check("planning")
        actions = plan_actions(config, facts, annotations, target, spec, opts.sysfs_root, deps)
        if verified is not None:  # a record that is not the plugin's: ignored, said so
            actions.lines.insert(0, f"{WARN}{config.annotation_prefix}/applied ignored: "
                                    f"{verified}")
    if store and ckey and fkey and sla.gpu is None and record is None:
        # GPU inventories (NVML) are not fingerprinted: GPU SLAs are always decided cold.
        # A record is authenticated for one container id, which no cache key holds, and
        # recurs on no other container: verification is always decided cold too.
        dkey = cache.decision_key(fkey, config.annotation_prefix, annotations, target, spec,
                                  opts.sysfs_root)
        if cache.config_key(opts) == ckey and cache.facts_key(ckey, root) == fkey:
            store.put("config", ckey, {"prefix": config.annotation_prefix,
                                       "log_format": config.log.format,
                                       "cgroup_root": str(config.cgroup.root)})
            store.put("facts", fkey, facts.to_json())
            store.put("decision", dkey, {"decision": actions.to_json(),
                                         "deps": [*deps, *cache.library_deps()]})
    return carry_out(actions, paths, target, state.id, rs, deadline)


def verify_actions(record: str, sla: Sla, owner: str, state_dir: str
                   ) -> CgroupActions | str:
    """Verify-only: the plugin already enforced this container (`sla.nri.io/applied`).

    The hook then writes nothing; it reads back what the record says NRI put into the
    spec. Settings the plugin writes directly at StartContainer (scope "direct": io
    limits, v1 memory soft limit, io weight) are not checked: at the hook's stages they
    are not written yet. Only a record authenticated with the node's record key for this
    container counts. Any other `applied` comes from the pod (CRI-O copies every pod
    annotation into the spec, and the plugin, had it answered, would have overwritten it):
    returned as the reason it is not a record, and the SLA is enforced as if it were
    absent. Only a key file that exists but cannot be trusted leaves the record
    undecidable: the plugin may have enforced, and a second writer would race it, so hard
    mode refuses and soft mode warns.
    """
    try:
        source, plan = decode_record(record, owner, load_key(state_dir))
    except NoRecordKey:
        return "not a valid record (no record key on this node: no plugin wrote it)"
    except RecordError as exc:
        return f"not a valid record ({exc})"
    except RecordKeyError as exc:
        msg = f"sla.nri.io/applied cannot be verified ({exc})"
        if sla.enforcement == "hard":
            raise Refused(msg) from None
        return CgroupActions("verify", "soft", lines=[WARN + msg])
    direct = set(cgroup_writes(plan, scope="direct"))
    expected = [w for w in cgroup_writes(plan, scope="all") if w not in direct]
    return CgroupActions("verify", sla.enforcement, expected, source=source)


def plan_actions(config: NodeConfig, facts: CgroupFacts, annotations: dict[str, str],
                 target: Target, spec: BundleSpec, sysfs_root: str,
                 deps: Deps) -> CgroupActions:
    """The core's decision on a one-shot node; `deps` collects what the decision cache
    must re-check before reusing it (io.max devices, the CPU/NUMA topology, schedulers)."""
    node = hook_node(config, facts, sysfs_root, deps)
    decision = decide(node, ContainerRequest(annotations, target.name,
                                             namespace=target.namespace, owner=target.id,
                                             granted=spec.granted))
    if decision.error is not None:
        raise explain_namespace(decision.error, target)
    plan = decision.plan
    if plan is None:  # pragma: no cover - parse_sla found an SLA, so decide did too
        raise InternalFailure("the SLA vanished between parsing and planning")
    if _asks_io_weight(decision):
        deps.append(["schedulers", sysfs_root, cache.scheduler_signature(sysfs_root)])
    rt = (plan.rt_runtime, plan.rt_period_in_force) if plan.rt_runtime else None
    lines = [WARN + w for w in plan.warnings]
    if target.distrust and "policy" in plan.reasons:
        lines.append(f"{WARN}{plan.key}: {namespace_note(target)}")
    return CgroupActions("apply", plan.enforcement,
                         cgroup_writes(plan, scope="all", bfq=node.capabilities.bfq), rt,
                         lines, applied_fields(record_body(plan, "hook")),
                         key=plan.key or config.annotation_prefix)


def namespace_note(target: Target) -> str:
    return (f"the pod's namespace is unknown ({target.distrust}): only what the node config "
            "allows every namespace ('*') is granted")


def explain_namespace(error: SlaFailure, target: Target) -> SlaFailure:
    """A planner refusal for a container whose namespace keys were not believed says so:
    a `namespace ''` refusal alone would not tell the pod's author why. Any planner
    refusal, as only the first shortfall's reason survives into it (the rest are text)."""
    if not target.distrust or not isinstance(error, PlanError):
        return error
    return PlanError(error.key, error.field, f"{error.message}; {namespace_note(target)}",
                      error.reason)


def hook_node(config: NodeConfig, facts: CgroupFacts, sysfs_root: str,
              deps: Deps) -> NodeState:
    """A NodeState for one container: capabilities from this node, an allocator built only
    when the SLA asks for placement, devices resolved through the core's resolver."""

    def resolve_device(device: str) -> tuple[int, int]:
        deps.append(["device", device, cache.device_signature(device)])
        return resolve_block_device(device)

    def allocator(gpus: bool) -> Any:
        deps.append(["topology", sysfs_root, cache.topology_signature(sysfs_root)])
        return node_allocator(config, sysfs_root, gpus=gpus)

    return NodeState(config, facts.version, facts=facts, allocator_factory=allocator,
                     capabilities=detect_capabilities(facts.version, sysfs_root),
                     resolve_device=resolve_device)


def _asks_io_weight(decision: Decision) -> bool:
    return (decision.sla is not None and decision.sla.io is not None
            and decision.sla.io.weight is not None)


# ------------------------------------------------------------------ inputs


def load_node_config(path: str | None) -> NodeConfig:
    """The node config: `path`, else /etc/nri-sla/config.yaml when it exists, else defaults."""
    try:
        return load_config(path)
    except ConfigError as exc:
        raise InvalidInput(f"node config: {exc}") from None


def cgroup_facts(opts: HookOptions, config: NodeConfig, spec: BundleSpec) -> CgroupFacts:
    cg = config.cgroup
    try:
        return detect_cgroup_facts(opts.cgroup_root or cg.root, driver=cg.driver,
                                   version=cg.version or "auto",
                                   cgroups_path_hint=spec.cgroups_path)
    except EnforceError as exc:
        raise InternalFailure(f"cgroup facts: {exc}") from None


def container_paths(opts: HookOptions, facts: CgroupFacts, spec: BundleSpec,
                    state: OciState) -> CgroupPaths:
    """/proc/<pid>/cgroup when the state has a pid, else linux.cgroupsPath (warm.py says
    why); the container's own cgroup, never one that holds other processes' cgroups."""
    if not warm.locatable(opts, spec, state):
        raise InvalidInput("config.json has no linux.cgroupsPath and the state has no "
                           f"pid usable at the {opts.stage} stage: cannot find the "
                           "container's cgroup")
    try:
        paths = warm.container_paths(opts, facts, spec, state)
    except EnforceError as exc:
        raise InvalidInput(f"container cgroup: {exc}") from None
    missing = paths.missing()
    if missing:
        raise InvalidInput(f"container cgroup {missing[0]} does not exist (hook stage too "
                           "early? use createRuntime, prestart or poststart)")
    others = paths.others_below()
    if others:
        # A pod, QoS or kubepods cgroup (or the root) named as the container's: the SLA's
        # limits would bind every container below it. The runtime's input is wrong.
        raise InvalidInput(f"container cgroup {paths.cgroups_path}: {others} below it holds "
                           "other processes: not a container's own cgroup (a pod or slice "
                           "cgroup?); refusing to write limits over them")
    return paths
