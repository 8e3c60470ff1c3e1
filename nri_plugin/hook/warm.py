"""A cache hit: the stored CgroupActions for these inputs, carried out (see cache.py).

Imports only the standard library's C modules, the hook's own light modules and the
shared enforce.cgpaths/cgfile/readback/systemd/errors (none of them needs pathlib,
dataclasses, re or yaml). Every doubt returns None, and the cold path decides and
reports as it always did.
"""

from __future__ import annotations

from nri_plugin.enforce.cgpaths import CgroupFacts
from nri_plugin.hook.actions import CgroupActions, carry_out
from nri_plugin.hook.cache import config_key, decision_key, deps_hold, facts_key, open_store

TYPE_CHECKING = False  # typing costs start-up time; only checkers need it
if TYPE_CHECKING:
    from nri_plugin.enforce.cgpaths import CgroupPaths
    from nri_plugin.hook.deadline import Deadline
    from nri_plugin.hook.options import HookOptions
    from nri_plugin.hook.outcome import Outcome, RunState
    from nri_plugin.hook.state import BundleSpec, OciState
    from nri_plugin.hook.target import Target

LOG_FORMATS = ("text", "json")


def cached_run(opts: HookOptions, state: OciState, spec: BundleSpec,
               annotations: dict[str, str], target: Target, deadline: Deadline,
               rs: RunState) -> Outcome | None:
    found = lookup(opts, spec, annotations, target)
    if found is None:
        return None
    actions, paths, log_format = found
    rs.log_format = log_format
    return carry_out(actions, paths, target, state.id, rs, deadline)


def lookup(opts: HookOptions, spec: BundleSpec, annotations: dict[str, str],
           target: Target) -> tuple[CgroupActions, CgroupPaths, str] | None:
    store = open_store(opts)
    if store is None or not spec.cgroups_path:
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
        paths = CgroupFacts.from_json(facts).container_paths(spec.cgroups_path)
    except Exception:
        return None
    if paths.missing():
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
