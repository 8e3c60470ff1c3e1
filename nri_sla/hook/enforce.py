"""The hook's enforcement step: SLA -> plan -> cgroupfs writes -> read-back.

Imported only when the container has an SLA. Uses the same parser, planner and cgroup
writers as the plugin; what differs is the path: no NRI, so every setting is written
directly (scope "all"), and there is no long-lived allocation state (see docs/hook.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nri_sla.hook.deadline import Deadline
from nri_sla.hook.errors import EXIT_OK, BadInput, InternalError, SlaRefusedError
from nri_sla.hook.options import HookOptions
from nri_sla.hook.run import Outcome, RunState
from nri_sla.hook.state import BundleSpec, OciState
from nri_sla.hook.target import APPLIED_KEY, Target

PREFIX = "nri-sla hook: "


def enforce(opts: HookOptions, state: OciState, spec: BundleSpec,
            annotations: dict[str, str], target: Target, deadline: Deadline,
            rs: RunState) -> Outcome:
    config = load_node_config(opts.config)
    sla = parse_sla(annotations, target, config)
    rs.enforcement = sla.enforcement
    deadline.check("finding the container's cgroup")
    facts = cgroup_facts(opts, config, spec)
    paths = container_paths(facts, spec, state)
    record = annotations.get(APPLIED_KEY)
    if record is not None:
        from nri_sla.hook.verify import verify

        return verify(record, sla, paths, state.id, deadline)
    deadline.check("planning")
    plan = make_plan(sla, facts, paths, config, target, spec)
    deadline.check("writing cgroup files")
    return apply_plan(plan, paths, facts, state.id, deadline)


# ------------------------------------------------------------------ inputs


def load_node_config(path: str) -> Any:
    """The node config; a missing file means the built-in defaults (documented)."""
    from nri_sla import config as node_config

    try:
        if not Path(path).exists():
            return node_config.NodeConfig()
        return node_config.load_config(path)
    except node_config.ConfigError as exc:
        raise BadInput(f"node config {path}: {exc}") from None


def parse_sla(annotations: dict[str, str], target: Target, config: Any) -> Any:
    from nri_sla.sla import SlaError, sla_for_container

    try:
        sla = sla_for_container(annotations, target.name,
                                default_enforcement=config.default_enforcement)
    except SlaError as exc:
        # The plugin refuses such a container at CreateContainer; the hook does the same.
        raise SlaRefusedError(str(exc)) from None
    if sla is None:
        raise InternalError("SLA annotation present but no SLA parsed")
    return sla


def cgroup_facts(opts: HookOptions, config: Any, spec: BundleSpec) -> Any:
    from nri_sla.enforce.errors import EnforceError
    from nri_sla.enforce.nodefacts import detect_cgroup_facts

    root = opts.cgroup_root or getattr(config, "cgroup_root", None) or "/sys/fs/cgroup"
    driver = getattr(config, "cgroup_driver", None) or "auto"
    try:
        return detect_cgroup_facts(Path(root), driver=driver,
                                   cgroups_path_hint=spec.cgroups_path)
    except EnforceError as exc:
        raise InternalError(str(exc)) from None


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


def io_weight_supported(paths: Any, facts: Any) -> bool:
    if facts.version == 2:
        d = paths.dir()
        return (d / "io.weight").exists() or (d / "io.bfq.weight").exists()
    try:
        d = paths.dir("blkio")
    except Exception:
        return False
    return (d / "blkio.weight").exists() or (d / "blkio.bfq.weight").exists()


def make_plan(sla: Any, facts: Any, paths: Any, config: Any, target: Target,
              spec: BundleSpec) -> Any:
    from nri_sla.enforce.nodefacts import resolve_block_device
    from nri_sla.plan.model import PlanError
    from nri_sla.plan.planner import PlanContext, plan_container

    ctx = PlanContext(
        cgroup_version=facts.version, namespace=target.namespace, config=config,
        owner=target.id, allocator=hook_allocator(sla, config), rt_budget=None,
        nri_version=None, resolve_device=resolve_block_device,
        io_weight_supported=io_weight_supported(paths, facts), container_env=spec.env)
    try:
        return plan_container(sla, ctx)
    except PlanError as exc:
        raise SlaRefusedError(str(exc)) from None


def hook_allocator(sla: Any, config: Any) -> Any:
    """A one-shot allocator over this node's topology, only when placement is asked for.

    The hook has no memory of other containers: it can align with the GPUs a device
    plugin already assigned, and bind NUMA nodes, but it cannot keep exclusive CPUs or
    GPUs apart between containers (that needs the plugin).
    """
    if sla.gpu is None and sla.numa is None and (sla.cpu is None or not sla.cpu.exclusive):
        return None
    from nri_sla.plan.placement import allocator_from_node

    return allocator_from_node(config, gpus=sla.gpu is not None)


# ------------------------------------------------------------------ writes


def apply_plan(plan: Any, paths: Any, facts: Any, cid: str, deadline: Deadline) -> Outcome:
    from nri_sla.enforce.cgroupfs import writer_for
    from nri_sla.enforce.plan_writes import cgroup_writes

    hard = plan.enforcement == "hard"
    lines = [f"{PREFIX}warning: {w}" for w in plan.warnings]
    writes = cgroup_writes(plan, scope="all")
    if plan.rt_runtime is not None and facts.version == 1:
        problem = raise_rt(plan, paths)
        if problem:
            if hard:
                raise SlaRefusedError(problem)
            lines.append(f"{PREFIX}warning: {problem}")
            writes = [w for w in writes if not w.file.startswith("cpu.rt_")]
    deadline.check("writing cgroup files")
    failures = [r for r in writer_for(paths).apply(writes) if not r.ok]
    if failures and hard:
        more = f" (and {len(failures) - 1} more)" if len(failures) > 1 else ""
        raise SlaRefusedError(f"{failures[0].error}{more}")
    lines += [f"{PREFIX}warning: {r.error}" for r in failures]
    return Outcome(EXIT_OK, "applied", lines, cid)


def raise_rt(plan: Any, paths: Any) -> str | None:
    """Raise cpu.rt_runtime_us on the container's ancestors first (the kernel refuses a
    child budget its parent lacks). Returns a problem text, or None."""
    from nri_sla.enforce.errors import EnforceError
    from nri_sla.enforce.rt import raise_rt_ancestors

    try:
        raise_rt_ancestors(paths.dir("cpu"), plan.rt_runtime, plan.rt_period,
                           root=paths.roots["cpu"])
    except EnforceError as exc:
        return f"cpu.rt-runtime: {exc}"
    return None
