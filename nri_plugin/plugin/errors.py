"""The NRI front-end's own failures (the core's and enforcement's reach it typed)."""

from __future__ import annotations

from nri_plugin.errors import InvalidInput, Refused


class StartRefused(Refused):
    """Hard mode: a direct cgroup write failed at StartContainer; containerd fails the
    start ("NRI container start failed: ...") before user code runs. It reaches the stub
    as it is (not through rpc_error), so the runtime sees ttrpc status Unknown."""

    reason = "cgroup"  # the metric label of CgroupWriteError, the refusal behind it


class EventsUnavailable(InvalidInput, ValueError):
    """`events.enabled: true` on a node where no service account is found (exit status 2:
    the node config against this host)."""
