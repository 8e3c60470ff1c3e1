"""The cold path: the core decides, and its decision becomes CgroupActions.

One of the run's two paths (warm.py is the other): run.py imports this one only when the
container may have an SLA and no cached decision fits (cache.py), and carries out what
either path hands back the same way (actions.carry_out).
The decision is the plugin's (nri_plugin.core.decision.decide) on a one-shot node (core.node): no RT
budget memory, an allocator only when the SLA asks for placement, no device injection
(docs/hook.md says what that means for exclusive CPUs and GPUs). What differs is the path:
no NRI, so every setting is written directly (scope "all"). The actions are stored for
the next replica when everything they depend on is in the cache key or its recorded deps.
"""

from __future__ import annotations

from nri_plugin.config.loader import ConfigError, load_config
from nri_plugin.config.values import NodeConfig
from nri_plugin.core.decision import Decision, decide, parse_sla
from nri_plugin.core.errors import NoRecordKey, RecordKeyError
from nri_plugin.core.inputs import loaded_code
from nri_plugin.core.node import OneShotNode
from nri_plugin.core.recordkey import load_key
from nri_plugin.core.request import ContainerRequest
from nri_plugin.enforce.blockdev import resolve_block_device
from nri_plugin.enforce.capabilities import detect_capabilities
from nri_plugin.enforce.cgpaths import CgroupFacts, CgroupPaths
from nri_plugin.enforce.cgroupdetect import detect_cgroup_facts
from nri_plugin.enforce.errors import EnforceError
from nri_plugin.enforce.plan_writes import cgroup_writes
from nri_plugin.errors import InternalFailure, InvalidInput, Refused, SlaFailure
from nri_plugin.hook import cache
from nri_plugin.hook.actions import CgroupActions
from nri_plugin.hook.inputs import BundleSpec, Target
from nri_plugin.hook.locate import container_cgroup, locatable
from nri_plugin.hook.options import HookOptions
from nri_plugin.hook.values import STARTED_NS, WARN, Run
from nri_plugin.ops.corelog import silenced as core_logs_silenced
from nri_plugin.ops.event import applied_fields
from nri_plugin.plan.errors import PlanError, RecordError
from nri_plugin.plan.record import decode_record, record_body
from nri_plugin.sla.model import Sla

TYPE_CHECKING = False  # `typing` costs every cold run; only checkers need it
if TYPE_CHECKING:
    from nri_plugin.plan.allocator import Allocator

Deps = list[list[str]]


def core_actions(run: Run) -> tuple[CgroupActions, CgroupPaths] | None:
    """The core's decision for the container as CgroupActions, and the container's cgroup;
    None when the node config's prefix finds no SLA for it after all. Stores the actions
    for the next replica when the cache can hold them."""
    opts, target, progress = run.opts, run.target, run.progress
    store = cache.open_store(opts) if locatable(run) else None
    ckey = cache.config_key(opts) if store else None  # before reading: a change = no store
    config = load_node_config(opts.config)
    progress.log_format = config.log.format
    sla = parse_sla(config, run.annotations, target.name)
    if sla is None:
        return None
    progress.enforcement = sla.enforcement
    run.deadline.check("finding the container's cgroup")
    root = opts.cgroup_root or str(config.cgroup.root)
    signature = cache.cgroup_signature(root) if ckey else None
    facts = cgroup_facts(opts, config, run.spec)
    cgroup = container_cgroup(run, facts)
    deps: Deps = []
    record = run.annotations.get(f"{config.annotation_prefix}/applied")
    verified = None if record is None else verify_actions(record, sla, target.id, config.state_dir)
    if isinstance(verified, CgroupActions):
        actions = verified
    else:
        run.deadline.check("planning")
        actions = plan_actions(run, config, facts, sla, deps)
        if verified is not None:  # a record that is not the plugin's: ignored, said so
            actions.lines.insert(0, f"{WARN}{config.annotation_prefix}/applied ignored: {verified}")
    if store and ckey and signature and sla.gpu is None and record is None:
        # GPU inventories (NVML) are not fingerprinted: GPU SLAs are always decided cold.
        # A record is authenticated for one container id, which no cache key holds, and
        # recurs on no other container: verification is always decided cold too.
        store_actions(run, store, config, (ckey, signature, root), facts, actions, deps)
    return actions, cgroup


def store_actions(
    run: Run,
    store: cache.Store,
    config: NodeConfig,
    keys: tuple[str, str, str],
    facts: CgroupFacts,
    actions: CgroupActions,
    deps: Deps,
) -> None:
    """Store the three entries for the next replica, when what was read before deciding
    (`keys`: the config key and the cgroup signature of that root) still holds and the
    code that decided is the code on disk (loaded_code: every module this run loaded)."""
    ckey, signature, root = keys
    code = loaded_code(STARTED_NS)
    if (
        code is None
        or cache.config_key(run.opts) != ckey
        or cache.cgroup_signature(root) != signature
    ):
        return
    fkey = cache.facts_key(ckey, code["digest"], signature)
    prefix = config.annotation_prefix
    inputs = cache.decision_inputs(run, prefix, ckey, fkey, code["digest"])
    if inputs is None:  # (a decision that was refused: not reached)
        return
    store.put(
        "config",
        ckey,
        {
            "prefix": prefix,
            "log_format": config.log.format,
            "cgroup_root": str(config.cgroup.root),
            "code": code,
        },
    )
    store.put("facts", fkey, facts.to_json())
    store.put("decision", inputs.digest(), {"decision": actions.to_json(), "deps": deps})


def verify_actions(record: str, sla: Sla, owner: str, state_dir: str) -> CgroupActions | str:
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


def plan_actions(
    run: Run, config: NodeConfig, facts: CgroupFacts, sla: Sla, deps: Deps
) -> CgroupActions:
    """The core's decision on a one-shot node for `sla` (the container's, parsed once by
    core_actions); `deps` collects what the decision cache must re-check before reusing
    it (io.max devices, the CPU/NUMA topology, schedulers)."""
    annotations, target, spec, sysfs_root = (
        run.annotations,
        run.target,
        run.spec,
        run.opts.sysfs_root,
    )
    node = hook_node(config, facts, sysfs_root, deps)
    # The core logs (GPU inventory fallbacks, a bug's traceback, ...) through CoreLoggers;
    # Python would print them to stderr, where runc expects the hook's one line.
    with core_logs_silenced():
        decision = decide(
            node,
            ContainerRequest(
                annotations,
                target.name,
                namespace=target.namespace,
                owner=target.id,
                granted=spec.granted,
            ),
            sla,
        )
    if decision.error is not None:
        raise explain_namespace(decision.error, target)
    plan = decision.plan
    if plan is None:  # pragma: no cover - decide plans the SLA it is given, or refuses it
        raise InternalFailure("the SLA vanished between parsing and planning")
    if _asks_io_weight(decision):
        deps.append(["schedulers", sysfs_root, cache.scheduler_signature(sysfs_root)])
    rt = (plan.rt_runtime, plan.rt_period_in_force) if plan.rt_runtime else None
    lines = [WARN + w for w in plan.warnings]
    if target.distrust and "policy" in plan.reasons:
        lines.append(f"{WARN}{plan.key}: {namespace_note(target)}")
    return CgroupActions(
        "apply",
        plan.enforcement,
        cgroup_writes(plan, scope="all", bfq=node.capabilities.bfq),
        rt,
        lines,
        applied_fields(record_body(plan, "hook")),
        key=plan.key or config.annotation_prefix,
    )


def namespace_note(target: Target) -> str:
    return (
        f"the pod's namespace is unknown ({target.distrust}): only what the node config "
        "allows every namespace ('*') is granted"
    )


def explain_namespace(error: SlaFailure, target: Target) -> SlaFailure:
    """A planner refusal for a container whose namespace keys were not believed says so:
    a `namespace ''` refusal alone would not tell the pod's author why. Any planner
    refusal, as only the first shortfall's reason survives into it (the rest are text)."""
    if not target.distrust or not isinstance(error, PlanError):
        return error
    return PlanError(
        error.key, error.field, f"{error.message}; {namespace_note(target)}", error.reason
    )


def hook_node(config: NodeConfig, facts: CgroupFacts, sysfs_root: str, deps: Deps) -> OneShotNode:
    """A one-shot node for one container: capabilities from this node, an allocator built
    only when the SLA asks for placement, devices resolved through the core's resolver."""

    def resolve_device(device: str) -> tuple[int, int]:
        deps.append(["device", device, cache.device_signature(device)])
        return resolve_block_device(device)

    def allocator(gpus: bool) -> Allocator:
        from nri_plugin.core.hosttopology import node_allocator  # placement SLAs only

        deps.append(["topology", sysfs_root, cache.topology_signature(sysfs_root)])
        return node_allocator(config, sysfs_root, gpus=gpus)

    return OneShotNode(
        config,
        facts.version,
        allocator_factory=allocator,
        capabilities=detect_capabilities(facts.version, sysfs_root),
        resolve_device=resolve_device,
    )


def _asks_io_weight(decision: Decision) -> bool:
    return (
        decision.sla is not None
        and decision.sla.io is not None
        and decision.sla.io.weight is not None
    )


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
        return detect_cgroup_facts(
            opts.cgroup_root or cg.root,
            driver=cg.driver,
            version=cg.version or "auto",
            cgroups_path_hint=spec.cgroups_path,
        )
    except EnforceError as exc:
        raise InternalFailure(f"cgroup facts: {exc}") from None
