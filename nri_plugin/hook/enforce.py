"""The hook's cold path: node config -> SLA -> plan -> a HookDecision, carried out.

Imported only when the container may have an SLA and no cached decision fits (cache.py).
Uses the same parser, planner and cgroup mapping as the plugin; what differs is the path:
no NRI, so every setting is written directly (scope "all"), and no allocation state
outlives one container (see docs/hook.md for what that means for exclusive CPUs and GPUs).
The decision is stored for the next replica when everything it depends on is in its key.
"""

from __future__ import annotations

import os

from nri_plugin.hook.cgdirs import ContainerDirs, NodeCgroups, container_dirs, weight_files
from nri_plugin.hook.deadline import Deadline
from nri_plugin.hook.decision import WARN, HookDecision, carry_out
from nri_plugin.hook.errors import EXIT_OK, BadInput, InternalError, SlaRefusedError
from nri_plugin.hook.options import HookOptions
from nri_plugin.hook.run import Outcome, RunState
from nri_plugin.hook.state import BundleSpec, OciState
from nri_plugin.hook.target import Target

TYPE_CHECKING = False  # typing costs start-up time; only checkers need it
if TYPE_CHECKING:
    from typing import Any


def enforce(opts: HookOptions, state: OciState, spec: BundleSpec,
            annotations: dict[str, str], target: Target, deadline: Deadline,
            rs: RunState) -> Outcome:
    from nri_plugin.hook import cache

    store = cache.open_store(opts) if spec.cgroups_path else None
    ckey = cache.config_key(opts) if store else None  # before reading: a change = no store
    config = load_node_config(opts.config)
    rs.log_format = config.log.format
    sla = parse_sla(annotations, target, config)
    if sla is None:
        return Outcome(EXIT_OK, "skipped", [], state.id)
    rs.enforcement = sla.enforcement
    deadline.check("finding the container's cgroup")
    root = opts.cgroup_root or str(config.cgroup.root)
    fkey = cache.facts_key(ckey, root) if ckey else None
    facts = cgroup_facts(opts, config, spec)
    node = NodeCgroups.from_facts(facts)
    dirs = container_paths(node, facts, spec, state)
    weights = weight_files(dirs)
    deps: list[list[str]] = []
    record = annotations.get(f"{config.annotation_prefix}/applied")
    if record is not None:
        decision = verify_decision(record, sla)
    else:
        deadline.check("planning")
        decision = plan_decision(sla, node, dirs, weights, config, target, spec,
                                 opts.sysfs_root, deps)
    if store and ckey and fkey and sla.gpu is None:
        # GPU inventories (NVML) are not fingerprinted: GPU SLAs are always decided cold.
        dkey = cache.decision_key(fkey, config.annotation_prefix, annotations, target, spec,
                                  weights, opts.sysfs_root)
        if cache.config_key(opts) == ckey and cache.facts_key(ckey, root) == fkey:
            store.put("config", ckey, {"prefix": config.annotation_prefix,
                                       "log_format": config.log.format,
                                       "cgroup_root": str(config.cgroup.root)})
            store.put("facts", fkey, node.to_json())
            store.put("decision", dkey, {"decision": decision.to_json(),
                                         "deps": [*deps, *cache.library_deps()]})
    return carry_out(decision, dirs, target, state.id, rs, deadline)


def verify_decision(record: str, sla: Any) -> HookDecision:
    """Verify-only: the plugin already enforced this container (`sla.nri.io/applied`).

    The hook then writes nothing; it reads back what the record says NRI put into the
    spec. Settings the plugin writes directly at StartContainer (scope "direct": io
    limits, v1 memory soft limit, io weight) are not checked: at the hook's stages they
    are not written yet. A record is no privilege: a forged one can only make the hook
    write less for the pod that forged it, never grant anything.
    """
    from nri_plugin.enforce.plan_writes import cgroup_writes
    from nri_plugin.plan.record import RecordError, decode_record

    try:
        source, plan = decode_record(record)
    except RecordError as exc:
        # Not the plugin's record: enforcing as if it were absent would be a second writer
        # racing the plugin; refusing is clearer in hard mode, a warning in soft.
        msg = f"sla.nri.io/applied is not a valid record ({exc})"
        if sla.enforcement == "hard":
            raise SlaRefusedError(msg) from None
        return HookDecision("verify", "soft", lines=[WARN + msg])
    direct = set(cgroup_writes(plan, scope="direct"))
    expected = [w for w in cgroup_writes(plan, scope="all") if w not in direct]
    return HookDecision("verify", sla.enforcement,
                        [(w.controller, w.file, w.value) for w in expected], source=source)


def plan_decision(sla: Any, node: NodeCgroups, dirs: ContainerDirs,
                  weights: tuple[bool, bool], config: Any, target: Target, spec: BundleSpec,
                  sysfs_root: str, deps: list[list[str]]) -> HookDecision:
    from nri_plugin.enforce.plan_writes import cgroup_writes

    sla, lines = hook_gpu_scope(sla, config.annotation_prefix)
    plan = make_plan(sla, node.version, weights[0], config, target, spec, sysfs_root, deps)
    writes = cgroup_writes(plan, scope="all", bfq=weights[1])
    rt = None
    if plan.rt_runtime is not None:
        rt = (plan.rt_runtime, plan.rt_period or 1_000_000)
    return HookDecision("apply", plan.enforcement,
                        [(w.controller, w.file, w.value) for w in writes], rt,
                        [*lines, *(WARN + w for w in plan.warnings)], applied_fields(plan))


def applied_fields(plan: Any) -> dict[str, Any]:
    """What was set, as in the plugin's `applied` record (minus version and path)."""
    import json

    from nri_plugin.plan.record import encode_record

    fields = json.loads(encode_record(plan, "hook"))
    for key in ("v", "path", "enforcement", "cgroup_version"):
        fields.pop(key, None)
    return fields


# ------------------------------------------------------------------ inputs


def load_node_config(path: str | None) -> Any:
    """The node config: `path`, else /etc/nri-sla/config.yaml when it exists, else defaults."""
    from nri_plugin.config import ConfigError, load_config

    try:
        return load_config(path)
    except ConfigError as exc:
        raise BadInput(f"node config: {exc}") from None


def parse_sla(annotations: dict[str, str], target: Target, config: Any) -> Any:
    from nri_plugin.sla import SlaError, sla_for_container

    try:
        return sla_for_container(annotations, target.name,
                                 default_enforcement=config.enforcement,
                                 prefix=config.annotation_prefix)
    except SlaError as exc:
        # The plugin refuses such a container at CreateContainer; the hook does the same.
        raise SlaRefusedError(str(exc)) from None


def cgroup_facts(opts: HookOptions, config: Any, spec: BundleSpec) -> Any:
    from pathlib import Path

    from nri_plugin.enforce.errors import EnforceError
    from nri_plugin.enforce.nodefacts import detect_cgroup_facts

    cg = config.cgroup
    root = Path(opts.cgroup_root or cg.root)
    try:
        return detect_cgroup_facts(root, driver=cg.driver, version=cg.version or "auto",
                                   cgroups_path_hint=spec.cgroups_path)
    except EnforceError as exc:
        raise InternalError(f"cgroup facts: {exc}") from None


def container_paths(node: NodeCgroups, facts: Any, spec: BundleSpec,
                    state: OciState) -> ContainerDirs:
    """linux.cgroupsPath when given (what runc used), else /proc/<pid>/cgroup."""
    from nri_plugin.enforce.errors import EnforceError
    from nri_plugin.enforce.nodefacts import cgroup_paths_from_proc

    try:
        if spec.cgroups_path:
            dirs = container_dirs(spec.cgroups_path, node)
        elif state.pid is not None:
            dirs = ContainerDirs.from_paths(cgroup_paths_from_proc(state.pid, facts))
        else:
            raise BadInput("config.json has no linux.cgroupsPath and the state has no pid: "
                           "cannot find the container's cgroup")
    except EnforceError as exc:
        raise BadInput(f"container cgroup: {exc}") from None
    missing = [d for d in dirs.dirs.values() if not os.path.isdir(d)]
    if missing:
        raise BadInput(f"container cgroup {missing[0]} does not exist (hook stage too early? "
                       "use createRuntime, prestart or poststart)")
    return dirs


def hook_gpu_scope(sla: Any, prefix: str) -> tuple[Any, list[str]]:
    """The hook cannot add devices: only `gpu.from: runtime` (align with the GPUs the
    device plugin gave, named in NVIDIA_VISIBLE_DEVICES) is possible here."""
    if sla.gpu is None or sla.gpu.source == "runtime":
        return sla, []
    key = sla.keys[-1] if sla.keys else f"{prefix}/pod"
    message = (f"{key}: gpu: the OCI hook cannot add GPU devices (gpu.from: plugin needs the "
               "NRI plugin); use gpu.from: runtime to align with GPUs the runtime assigned")
    if sla.enforcement == "hard":
        raise SlaRefusedError(message)
    import dataclasses

    return dataclasses.replace(sla, gpu=None), [WARN + message]


def hook_allocator(sla: Any, config: Any, sysfs_root: str) -> Any:
    """A one-shot allocator over this node's topology, only when placement is asked for.

    The hook has no memory of other containers: it binds NUMA nodes and aligns with GPUs a
    device plugin already assigned, but cannot keep exclusive CPUs apart between
    containers (that needs the plugin). GPU inventory (maybe NVML) only when GPUs matter.
    """
    if sla.gpu is None and sla.numa is None and (sla.cpu is None or not sla.cpu.exclusive):
        return None
    from pathlib import Path

    from nri_plugin.plan.allocator import Allocator
    from nri_plugin.topology.cpus import read_topology
    from nri_plugin.topology.gpus import GpuInventory

    reserved = frozenset(config.reserved_cpus)
    topology = read_topology(Path(sysfs_root))
    inventory = GpuInventory()
    if sla.gpu is not None:
        import logging

        from nri_plugin.topology.inventory import configured_inventory

        # The inventory logs its fallbacks (NVML missing -> sysfs); with no handler Python
        # would print them to stderr, where runc expects the hook's one line.
        logging.getLogger("nri_sla").addHandler(logging.NullHandler())

        inventory = configured_inventory(config.gpu.inventory, Path(sysfs_root))
    return Allocator(topology, inventory, reserved)


def make_plan(sla: Any, cgroup_version: int, io_weight_supported: bool, config: Any,
              target: Target, spec: BundleSpec, sysfs_root: str,
              deps: list[list[str]]) -> Any:
    """plan_container with no NRI; `deps` collects what the decision cache must re-check
    (io.max devices, the CPU/NUMA topology) before reusing the result."""
    from nri_plugin.enforce.errors import DeviceError
    from nri_plugin.enforce.nodefacts import resolve_block_device
    from nri_plugin.hook.cache import device_signature, topology_signature
    from nri_plugin.plan.model import PlanError
    from nri_plugin.plan.planner import PlanContext, plan_container

    def resolve_device(device: str) -> tuple[int, int]:
        deps.append(["device", device, device_signature(device)])
        try:
            return resolve_block_device(device)
        except DeviceError as exc:  # the planner names it (io.max[i].device), as the plugin
            raise ValueError(str(exc)) from exc

    topology = topology_signature(sysfs_root)  # before reading it: a change = no reuse
    allocator = hook_allocator(sla, config, sysfs_root)
    if allocator is not None:
        deps.append(["topology", sysfs_root, topology])
    ctx = PlanContext(
        cgroup_version=cgroup_version, namespace=target.namespace, config=config,
        owner=target.id, allocator=allocator, rt_budget=None,
        nri_version=None, resolve_device=resolve_device,
        io_weight_supported=io_weight_supported, container_env=spec.env)
    try:
        return plan_container(sla, ctx)
    except PlanError as exc:
        raise SlaRefusedError(str(exc)) from None
