"""The cached path: the CgroupActions a cold run stored for these inputs (see cache.py).

One of the run's two paths (cold.py is the other; run.py tries this one first). Imports
only the standard library's C modules, the hook's own light modules and the shared
enforce.cgpaths/cgfile/readback/errors and posixfs (none of them needs os, pathlib,
dataclasses, re or yaml). Every doubt is a miss (None), and the cold path decides and reports as it
always did.
"""

from nri_plugin.core.inputs import code_unchanged
from nri_plugin.enforce.cgpaths import CgroupFacts
from nri_plugin.errors import DamagedState
from nri_plugin.hook.actions import CgroupActions
from nri_plugin.hook.cache import (
    cgroup_signature,
    config_key,
    decision_inputs,
    deps_hold,
    facts_key,
    open_store,
)
from nri_plugin.hook.locate import container_cgroup, locatable

TYPE_CHECKING = False  # typing costs start-up time; only checkers need it
if TYPE_CHECKING:
    from nri_plugin.enforce.cgpaths import CgroupPaths
    from nri_plugin.hook.values import Run
    from nri_plugin.ops.event import LogFormat

LOG_FORMATS: "tuple[LogFormat, ...]" = ("text", "json")


def cached_actions(run: "Run") -> "tuple[CgroupActions, CgroupPaths] | None":
    """The stored decision for this container and its cgroup, or None (a miss)."""
    store = open_store(run.opts)
    if store is None or not locatable(run):
        return None
    ckey = config_key(run.opts)
    config = store.get("config", ckey) if ckey else None
    if not ckey or not config:  # no entry: decided afresh
        return None
    code = code_unchanged(config.get("code"))
    if not code:  # the code changed since it was stored: decided afresh
        return None
    prefix, log_format, root = (
        config.get("prefix"),
        config.get("log_format"),
        config.get("cgroup_root"),
    )
    if not isinstance(prefix, str) or log_format not in LOG_FORMATS or not isinstance(root, str):
        return None
    fkey = facts_key(ckey, code, cgroup_signature(run.opts.cgroup_root or root))
    facts = store.get("facts", fkey)
    if not facts:
        return None
    try:
        # A bad or missing cgroup is reported by the cold path, in its usual order.
        cgroup = container_cgroup(run, CgroupFacts.from_json(facts))
    except Exception:
        return None
    inputs = decision_inputs(run, prefix, ckey, fkey, code)
    entry = store.get("decision", inputs.digest()) if inputs is not None else None
    if not entry or not deps_hold(entry.get("deps")):
        return None
    try:
        actions = CgroupActions.from_json(entry["decision"])
    except (KeyError, TypeError, DamagedState):
        return None
    run.progress.log_format = log_format
    return actions, cgroup
