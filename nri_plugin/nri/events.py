"""NRI events: numbers, subscription mask bits, handler names, version clipping."""

from __future__ import annotations

import re
from collections.abc import Iterable

RUN_POD_SANDBOX = 1
STOP_POD_SANDBOX = 2
REMOVE_POD_SANDBOX = 3
CREATE_CONTAINER = 4
POST_CREATE_CONTAINER = 5
START_CONTAINER = 6
POST_START_CONTAINER = 7
UPDATE_CONTAINER = 8
POST_UPDATE_CONTAINER = 9
STOP_CONTAINER = 10
REMOVE_CONTAINER = 11
UPDATE_POD_SANDBOX = 12
POST_UPDATE_POD_SANDBOX = 13
VALIDATE_CONTAINER_ADJUSTMENT = 14

# Event number -> plugin handler method name (the stub's plugin contract).
HANDLERS: dict[int, str] = {
    RUN_POD_SANDBOX: "run_pod_sandbox",
    STOP_POD_SANDBOX: "stop_pod_sandbox",
    REMOVE_POD_SANDBOX: "remove_pod_sandbox",
    CREATE_CONTAINER: "create_container",
    POST_CREATE_CONTAINER: "post_create_container",
    START_CONTAINER: "start_container",
    POST_START_CONTAINER: "post_start_container",
    UPDATE_CONTAINER: "update_container",
    POST_UPDATE_CONTAINER: "post_update_container",
    STOP_CONTAINER: "stop_container",
    REMOVE_CONTAINER: "remove_container",
    UPDATE_POD_SANDBOX: "update_pod_sandbox",
    POST_UPDATE_POD_SANDBOX: "post_update_pod_sandbox",
    VALIDATE_CONTAINER_ADJUSTMENT: "validate_container_adjustment",
}

# Event number -> the dedicated Plugin RPC (NRI v0.12).
RPCS: dict[int, str] = {
    RUN_POD_SANDBOX: "RunPodSandbox",
    STOP_POD_SANDBOX: "StopPodSandbox",
    REMOVE_POD_SANDBOX: "RemovePodSandbox",
    CREATE_CONTAINER: "CreateContainer",
    POST_CREATE_CONTAINER: "PostCreateContainer",
    START_CONTAINER: "StartContainer",
    POST_START_CONTAINER: "PostStartContainer",
    UPDATE_CONTAINER: "UpdateContainer",
    POST_UPDATE_CONTAINER: "PostUpdateContainer",
    STOP_CONTAINER: "StopContainer",
    REMOVE_CONTAINER: "RemoveContainer",
    UPDATE_POD_SANDBOX: "UpdatePodSandbox",
    POST_UPDATE_POD_SANDBOX: "PostUpdatePodSandbox",
    VALIDATE_CONTAINER_ADJUSTMENT: "ValidateContainerAdjustment",
}

# Events that older runtimes (NRI <= v0.11, e.g. containerd 1.7) deliver via StateChange.
STATE_CHANGE_EVENTS = frozenset(
    {
        RUN_POD_SANDBOX,
        STOP_POD_SANDBOX,
        REMOVE_POD_SANDBOX,
        POST_CREATE_CONTAINER,
        START_CONTAINER,
        POST_START_CONTAINER,
        POST_UPDATE_CONTAINER,
        REMOVE_CONTAINER,
    }
)
# Events whose answer carries nothing back: the only ones StateChange may run. The others
# (CreateContainer, UpdateContainer, StopContainer, ValidateContainerAdjustment) adjust
# containers and always have their own RPC, whose answer carries the adjustment.
NON_ADJUSTING_EVENTS = STATE_CHANGE_EVENTS | {UPDATE_POD_SANDBOX, POST_UPDATE_POD_SANDBOX}
POD_EVENTS = frozenset(
    {
        RUN_POD_SANDBOX,
        STOP_POD_SANDBOX,
        REMOVE_POD_SANDBOX,
        UPDATE_POD_SANDBOX,
        POST_UPDATE_POD_SANDBOX,
    }
)

LEGACY_MASK = 0x7FF  # events 1-11: NRI <= v0.9 (containerd 1.7 to 2.1, CRI-O to 1.33)
FULL_MASK = 0x3FFF  # events 1-14: NRI >= v0.10 (containerd 2.2, CRI-O 1.34)
_V010 = (0, 10, 0)
_VERSION = re.compile(r"^v?(\d+)\.(\d+)(?:\.(\d+))?")


def bit(event: int) -> int:
    return 1 << (event - 1)


def mask_of(events: Iterable[int]) -> int:
    out = 0
    for event in events:
        out |= bit(event)
    return out


def parse_version(text: str) -> tuple[int, int, int] | None:
    """ "v0.12.0" -> (0, 12, 0); None when empty or not a version."""
    m = _VERSION.match(text.strip()) if text else None
    if not m:
        return None
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


def known_mask(nri_version: str) -> int:
    """Events the runtime understands; a bit outside this makes it drop the plugin.
    Runtimes before v0.12 do not send their NRI version (nri_plugin.nri.levels knows it
    from their release); "" means unknown, the oldest set."""
    version = parse_version(nri_version)
    return FULL_MASK if version is not None and version >= _V010 else LEGACY_MASK


def plugin_mask(plugin: object) -> int:
    """Subscription derived from the handler methods the plugin object has."""
    return mask_of(e for e, name in HANDLERS.items() if callable(getattr(plugin, name, None)))
