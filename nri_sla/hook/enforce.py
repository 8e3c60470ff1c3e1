"""The hook's enforcement step: SLA -> plan -> cgroupfs writes -> read-back.

Imported only when the container may have an SLA. Uses the same parser, planner and
cgroup writers as the plugin; what differs is the path: no NRI, so every setting is
written directly (scope "all"), and no allocation state outlives one container (see
docs/hook.md for what that means for exclusive CPUs and GPUs).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from nri_sla.hook.deadline import Deadline
from nri_sla.hook.errors import EXIT_OK, BadInput, InternalError, SlaRefusedError
from nri_sla.hook.options import HookOptions
from nri_sla.hook.run import Decision, Outcome, RunState
from nri_sla.hook.state import BundleSpec, OciState
from nri_sla.hook.target import Target

PREFIX = "nri-sla hook: "
WARN = PREFIX + "warning: "


def enforce(opts: HookOptions, state: OciState, spec: BundleSpec,
            annotations: dict[str, str], target: Target, deadline: Deadline,
            rs: RunState) -> Outcome:
    config = load_node_config(opts.config)
    rs.log_format = config.log.format
    sla = parse_sla(annotations, target, config)
    if sla is None:
        return Outcome(EXIT_OK, "skipped", [], state.id)
    rs.enforcement = sla.enforcement
    deadline.check("finding the container's cgroup")
    facts = cgroup_facts(opts, config, spec)
    paths = container_paths(facts, spec, state)
    record = annotations.get(f"{config.annotation_prefix}/applied")
    if record is not None:
        from nri_sla.hook.verify import verify

        out = verify(record, sla, paths, state.id, deadline)
        if out.lines:  # drift (soft): worth a decision line; none when all holds
            out.decision = Decision("warned", target, rs.log_format, warnings=out.lines)
        return out
    deadline.check("planning")
    sla, lines = hook_gpu_scope(sla, config.annotation_prefix)
    plan = make_plan(sla, facts, paths, config, target, spec, opts.sysfs_root)
    deadline.check("writing cgroup files")
    out = apply_plan(plan, paths, facts, state.id, lines)
    out.decision = Decision("warned" if out.lines else "enforced", target, rs.log_format,
                            plan=plan, warnings=out.lines)
    return out


def applied_fields(plan: Any) -> dict[str, Any]:
    """What was set, as in the plugin's `applied` record (minus version and path)."""
    import json

    from nri_sla.plan.record import encode_record

    fields = json.loads(encode_record(plan, "hook"))
    for key in ("v", "path", "enforcement", "cgroup_version"):
        fields.pop(key, None)
    return fields


# ------------------------------------------------------------------ inputs


def load_node_config(path: str | None) -> Any:
    """The node config: `path`, else /etc/nri-sla/config.yaml when it exists, else defaults."""
    from nri_sla.config import ConfigError, load_config

    try:
        return load_config(path)
    except ConfigError as exc:
        raise BadInput(f"node config: {exc}") from None


def parse_sla(annotations: dict[str, str], target: Target, config: Any) -> Any:
    from nri_sla.sla import SlaError, sla_for_container

    try:
        return sla_for_container(annotations, target.name,
                                 default_enforcement=config.enforcement,
                                 prefix=config.annotation_prefix)
    except SlaError as exc:
        # The plugin refuses such a container at CreateContainer; the hook does the same.
        raise SlaRefusedError(str(exc)) from None


def cgroup_facts(opts: HookOptions, config: Any, spec: BundleSpec) -> Any:
    from nri_sla.enforce.errors import EnforceError
    from nri_sla.enforce.nodefacts import detect_cgroup_facts

    cg = config.cgroup
    root = Path(opts.cgroup_root or cg.root)
    try:
        return detect_cgroup_facts(root, driver=cg.driver, version=cg.version or "auto",
                                   cgroups_path_hint=spec.cgroups_path)
    except EnforceError as exc:
        raise InternalError(f"cgroup facts: {exc}") from None


def container_paths(facts: Any, spec: BundleSpec, state: OciState) -> Any:
    """linux.cgroupsPath when given (what runc used), else /proc/<pid>/cgroup."""
    from nri_sla.enforce.errors import EnforceError
    from nri_sla.enforce.nodefacts import cgroup_paths_from_proc, container_cgroup_paths

    try:
        if spec.cgroups_path:
            paths = container_cgroup_paths(spec.cgroups_path, facts)
        elif state.pid is not None:
            paths = cgroup_paths_from_proc(state.pid, facts)
        else:
            raise BadInput("config.json has no linux.cgroupsPath and the state has no pid: "
                           "cannot find the container's cgroup")
    except EnforceError as exc:
        raise BadInput(f"container cgroup: {exc}") from None
    missing = [str(d) for d in paths.dirs.values() if not d.is_dir()]
    if missing:
        raise BadInput(f"container cgroup {missing[0]} does not exist (hook stage too early? "
                       "use createRuntime, prestart or poststart)")
    return paths


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
    return dataclasses.replace(sla, gpu=None), [WARN + message]


def weight_files(paths: Any, facts: Any) -> tuple[bool, bool]:
    """(io weight supported, through the bfq files) for this container's cgroup."""
    try:
        d = paths.dir() if facts.version == 2 else paths.dir("blkio")
    except Exception:
        return False, False
    plain = "io.weight" if facts.version == 2 else "blkio.weight"
    bfq = "io.bfq.weight" if facts.version == 2 else "blkio.bfq.weight"
    has_plain, has_bfq = (d / plain).exists(), (d / bfq).exists()
    return has_plain or has_bfq, has_bfq and not has_plain


def hook_allocator(sla: Any, config: Any, sysfs_root: str) -> Any:
    """A one-shot allocator over this node's topology, only when placement is asked for.

    The hook has no memory of other containers: it binds NUMA nodes and aligns with GPUs a
    device plugin already assigned, but cannot keep exclusive CPUs apart between
    containers (that needs the plugin). GPU inventory (maybe NVML) only when GPUs matter.
    """
    if sla.gpu is None and sla.numa is None and (sla.cpu is None or not sla.cpu.exclusive):
        return None
    from nri_sla.plan.placement import Allocator
    from nri_sla.topology.cpus import read_topology
    from nri_sla.topology.gpus import GpuInventory

    reserved = frozenset(config.reserved_cpus)
    topology = read_topology(Path(sysfs_root))
    inventory = GpuInventory()
    if sla.gpu is not None:
        import logging

        from nri_sla.topology.inventory import load_inventory

        # The inventory logs its fallbacks (NVML missing -> sysfs); with no handler Python
        # would print them to stderr, where runc expects the hook's one line.
        logging.getLogger("nri_sla").addHandler(logging.NullHandler())

        source = config.gpu.inventory
        inventory = (load_inventory("snapshot", snapshot=Path(source))
                     if source not in ("auto", "nvml", "sysfs")
                     else load_inventory(source, sysfs_root=Path(sysfs_root)))
    return Allocator(topology, inventory, reserved)


def make_plan(sla: Any, facts: Any, paths: Any, config: Any, target: Target,
              spec: BundleSpec, sysfs_root: str) -> Any:
    from nri_sla.enforce.nodefacts import resolve_block_device
    from nri_sla.plan.model import PlanError
    from nri_sla.plan.planner import PlanContext, plan_container

    ctx = PlanContext(
        cgroup_version=facts.version, namespace=target.namespace, config=config,
        owner=target.id, allocator=hook_allocator(sla, config, sysfs_root), rt_budget=None,
        nri_version=None, resolve_device=resolve_block_device,
        io_weight_supported=weight_files(paths, facts)[0], container_env=spec.env)
    try:
        return plan_container(sla, ctx)
    except PlanError as exc:
        raise SlaRefusedError(str(exc)) from None


# ------------------------------------------------------------------ writes


def apply_plan(plan: Any, paths: Any, facts: Any, cid: str, lines: list[str]) -> Outcome:
    from nri_sla.enforce.cgroupfs import writer_for
    from nri_sla.enforce.plan_writes import cgroup_writes

    hard = plan.enforcement == "hard"
    lines = [*lines, *(WARN + w for w in plan.warnings)]
    writes = cgroup_writes(plan, scope="all", bfq=weight_files(paths, facts)[1])
    raised: list[Any] = []
    if plan.rt_runtime is not None and facts.version == 1:
        raised, problem = raise_rt(plan, paths, facts)
        if problem:
            if hard:
                raise SlaRefusedError(problem)
            lines.append(WARN + problem)
            writes = [w for w in writes if not w.file.startswith("cpu.rt_")]
    failures = [r for r in writer_for(paths).apply(writes) if not r.ok]
    if failures and hard:
        from nri_sla.enforce.rt import release_rt_ancestors

        release_rt_ancestors(raised)  # runc removes the container's cgroup; undo ours
        more = f" (and {len(failures) - 1} more)" if len(failures) > 1 else ""
        raise SlaRefusedError(f"{failures[0].error}{more}")
    lines += [WARN + str(r.error) for r in failures]
    return Outcome(EXIT_OK, "applied", lines, cid)


def raise_rt(plan: Any, paths: Any, facts: Any) -> tuple[list[Any], str | None]:
    """Raise cpu.rt_runtime_us on the container's ancestors first (the kernel refuses a
    child budget its parent lacks). Returns (changes made, problem text or None)."""
    from nri_sla.enforce.errors import EnforceError
    from nri_sla.enforce.rt import raise_rt_ancestors

    try:
        done = raise_rt_ancestors(paths.dir("cpu"), plan.rt_runtime,
                                  plan.rt_period or 1_000_000, facts.hierarchy("cpu").path)
    except EnforceError as exc:
        return [], f"cpu.rt-runtime: {exc}"
    return done, None
