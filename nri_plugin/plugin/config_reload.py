"""SIGHUP: the node config read again and what of it can change under a running plugin.

Live (the next container decision uses them): the keys whose field declares `live`
(`nri_plugin.config.schema.LIVE_KEYS`: `enforcement`, `permissions`, `pod-caps`, `log`).
Everything else was wired in at start (the NRI socket and the plugin's name and index,
the state directory and its key, the metrics and status listeners, the GPU inventory and
its watches, cgroup facts, the RT budget, the drift watch's schedule, the annotation
prefix the records are written under): a change there is reported as needing a restart
and the running value stays. A config that does not validate changes nothing.
docs/config.md's table, generated from the same declarations, shows the split.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from nri_plugin.config.loader import ConfigError, load_config
from nri_plugin.config.schema import KEY_ATTRIBUTES, LIVE_KEYS, key_value
from nri_plugin.config.values import NodeConfig
from nri_plugin.value import replace

log = logging.getLogger("nri_sla.config")


@dataclass(frozen=True)
class Reload:
    """What a reload does: `config` is the one in force afterwards."""

    config: NodeConfig
    applied: tuple[str, ...]  # config keys (dotted, as written in the file) changed live
    need_restart: tuple[str, ...]  # changed in the file, kept until the plugin restarts


def changed_keys(old: NodeConfig, new: NodeConfig) -> list[str]:
    """The dotted config keys (`pod-caps.exclusive-cpus`) whose values differ."""
    return [key for key in KEY_ATTRIBUTES if key_value(old, key) != key_value(new, key)]


def _replaced(value: Any, attributes: tuple[str, ...], new: Any) -> Any:
    """`value` (a NodeConfig or a section) with the attribute at `attributes` set to `new`."""
    head, *rest = attributes
    inner = _replaced(getattr(value, head), tuple(rest), new) if rest else new
    return replace(value, **{head: inner})


def plan_reload(current: NodeConfig, new: NodeConfig) -> Reload:
    """`current` with the live keys of `new`; the other changes listed, not applied."""
    changed = changed_keys(current, new)
    applied = tuple(k for k in changed if k in LIVE_KEYS)
    config = replace(current, source=new.source)
    for key in applied:
        config = _replaced(config, KEY_ATTRIBUTES[key], key_value(new, key))
    return Reload(config, applied, tuple(k for k in changed if k not in LIVE_KEYS))


def reload_config(path: str | None, current: NodeConfig) -> Reload | None:
    """Read `path` again (None: the default path, as at start) and plan the reload; None
    when it does not validate (logged in one line: the old config stays)."""
    try:
        new = load_config(path)
    except ConfigError as exc:
        log.error("config reload refused, keeping the config in use: %s", exc)
        return None
    done = plan_reload(current, new)
    log.info(
        "config reloaded from %s: applied %s; needs a restart (not applied): %s",
        new.source,
        ", ".join(done.applied) or "nothing",
        ", ".join(done.need_restart) or "nothing",
    )
    return done
