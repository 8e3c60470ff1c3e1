"""SIGHUP: the node config read again and what of it can change under a running plugin.

Live (the next container decision uses them): `enforcement`, `permissions`, `pod-caps`,
`log`. Everything else was wired in at start (the NRI socket and the plugin's name and
index, the state directory and its key, the metrics and status listeners, the GPU
inventory and its watches, cgroup facts, the RT budget, the drift watch's schedule, the
annotation prefix the records are written under): a change there is reported as needing
a restart and the running value stays. A config that does not validate changes nothing.
docs/config.md lists the same split.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from dataclasses import dataclass
from typing import Any

from nri_plugin.config import KEY_ATTRIBUTES, ConfigError, NodeConfig, load_config

log = logging.getLogger("nri_sla.config")

# NodeConfig attributes (the key `enforcement`, the sections `permissions`, `pod-caps`,
# `log`) a SIGHUP applies to the running plugin.
LIVE_ATTRIBUTES = ("enforcement", "permissions", "pod_caps", "log")


@dataclass(frozen=True)
class Reload:
    """What a reload does: `config` is the one in force afterwards."""

    config: NodeConfig
    applied: tuple[str, ...]  # config keys (dotted, as written in the file) changed live
    need_restart: tuple[str, ...]  # changed in the file, kept until the plugin restarts


def changed_keys(old: NodeConfig, new: NodeConfig) -> list[str]:
    """The dotted config keys (`pod-caps.exclusive-cpus`) whose values differ."""
    def value(config: NodeConfig, attributes: tuple[str, ...]) -> Any:
        return functools.reduce(getattr, attributes, config)

    return [key for key, attributes in KEY_ATTRIBUTES.items()
            if value(old, attributes) != value(new, attributes)]


def plan_reload(current: NodeConfig, new: NodeConfig) -> Reload:
    """`current` with the live keys of `new`; the other changes listed, not applied."""
    changed = changed_keys(current, new)
    applied = tuple(k for k in changed if KEY_ATTRIBUTES[k][0] in LIVE_ATTRIBUTES)
    config = dataclasses.replace(current, source=new.source,
                                 **{a: getattr(new, a) for a in LIVE_ATTRIBUTES})
    return Reload(config, applied, tuple(k for k in changed if k not in applied))


def reload_config(path: str | None, current: NodeConfig) -> Reload | None:
    """Read `path` again (None: the default path, as at start) and plan the reload; None
    when it does not validate (logged in one line: the old config stays)."""
    try:
        new = load_config(path)
    except ConfigError as exc:
        log.error("config reload refused, keeping the config in use: %s", exc)
        return None
    done = plan_reload(current, new)
    log.info("config reloaded from %s: applied %s; needs a restart (not applied): %s",
             new.source, ", ".join(done.applied) or "nothing",
             ", ".join(done.need_restart) or "nothing")
    return done
