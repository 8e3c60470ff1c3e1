"""A cache hit: the stored CgroupActions for these inputs, carried out (see cache.py).

Imports only the standard library's C modules, the hook's own light modules and the
shared enforce.cgpaths/cgfile/readback/systemd/errors (none of them needs pathlib,
dataclasses, re or yaml). Every doubt returns None, and the cold path decides and
reports as it always did.
"""

from __future__ import annotations

from nri_plugin.enforce.cgpaths import CgroupFacts, container_cgroup_of
from nri_plugin.hook.actions import CgroupActions, carry_out
from nri_plugin.hook.cache import config_key, decision_key, deps_hold, facts_key, open_store
from nri_plugin.hookspec import IN_CONTAINER_STAGES

TYPE_CHECKING = False  # typing costs start-up time; only checkers need it
if TYPE_CHECKING:
    from nri_plugin.enforce.cgpaths import CgroupPaths
    from nri_plugin.hook.deadline import Deadline
    from nri_plugin.hook.options import HookOptions
    from nri_plugin.hook.outcome import Outcome, RunState
    from nri_plugin.hook.state import BundleSpec, OciState
    from nri_plugin.hook.target import Target

LOG_FORMATS = ("text", "json")


def process_pid(opts: HookOptions, state: OciState) -> int | None:
    """The container's pid as the hook's /proc shows it: the state's, except at stages run
    inside the container's namespaces (hookspec.IN_CONTAINER_STAGES)."""
    return None if opts.stage in IN_CONTAINER_STAGES else state.pid


def locatable(opts: HookOptions, spec: BundleSpec, state: OciState) -> bool:
    """Whether container_paths can find the cgroup (and so a decision can be cached)."""
    return process_pid(opts, state) is not None or bool(spec.cgroups_path)


def container_paths(opts: HookOptions, facts: CgroupFacts, spec: BundleSpec,
                    state: OciState) -> CgroupPaths:
    """The container's cgroup dirs: where its process is (/proc/<pid>/cgroup) whenever
    the state has a pid, because that is where the runtime put it: runc takes a relative
    cgroupsPath from its own cgroup, and a spec's path is only what was asked for; held to
    that linux.cgroupsPath when there is one (a reused pid names another cgroup:
    cgpaths.container_cgroup_of). Else linux.cgroupsPath. Raises EnforceError
    (CgroupPathError, CgroupFactsError)."""
    pid = process_pid(opts, state)
    if pid is None:
        return facts.container_paths(spec.cgroups_path or "")
    found = facts.process_paths(pid, opts.proc_root)
    return container_cgroup_of(found, spec.cgroups_path, pid) if spec.cgroups_path else found


def cached_run(opts: HookOptions, state: OciState, spec: BundleSpec,
               annotations: dict[str, str], target: Target, deadline: Deadline,
               rs: RunState) -> Outcome | None:
    found = lookup(opts, state, spec, annotations, target)
    if found is None:
        return None
    actions, paths, log_format = found
    rs.log_format = log_format
    return carry_out(actions, paths, target, state.id, rs, deadline)


def lookup(opts: HookOptions, state: OciState, spec: BundleSpec,
           annotations: dict[str, str],
           target: Target) -> tuple[CgroupActions, CgroupPaths, str] | None:
    store = open_store(opts)
    if store is None or not locatable(opts, spec, state):
        return None
    ckey = config_key(opts)
    config = store.get("config", ckey) if ckey else None
    if not config:
        return None
    prefix, log_format, root = (config.get("prefix"), config.get("log_format"),
                                config.get("cgroup_root"))
    if (not isinstance(prefix, str) or log_format not in LOG_FORMATS
            or not isinstance(root, str)):
        return None
    root = opts.cgroup_root or root
    fkey = facts_key(ckey, root)
    facts = store.get("facts", fkey)
    if not facts:
        return None
    try:
        # A bad or missing cgroup is reported by the cold path, in its usual order.
        paths = container_paths(opts, CgroupFacts.from_json(facts), spec, state)
    except Exception:
        return None
    if paths.missing() or paths.others_below():
        return None
    key = decision_key(fkey, prefix, annotations, target, spec, opts.sysfs_root)
    entry = store.get("decision", key)
    if not entry or not deps_hold(entry.get("deps")):
        return None
    try:
        actions = CgroupActions.from_json(entry["decision"])
    except (KeyError, TypeError, ValueError):
        return None
    return actions, paths, log_format
