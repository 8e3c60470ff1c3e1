"""The kubelet's CPU manager policy, read from its checkpoint file.

nri-sla sets cpusets itself, so the kubelet's CPU manager must use the `none` policy
(docs/install.md): under `static` the kubelet pins each Guaranteed container with whole
CPUs to CPUs of its own choosing, and the two would overwrite each other's cpusets. The
kubelet writes its policy to its checkpoint (`policyName` in
/var/lib/kubelet/cpu_manager_state); `nri-sla run` reads it once at start and warns.
"""

from __future__ import annotations

import json

DEFAULT_STATE_FILE = "/var/lib/kubelet/cpu_manager_state"
# The checkpoint lists every container's CPUs: far below this on any node.
MAX_STATE_BYTES = 4 * 1024 * 1024


def policy_warning(path: str) -> str | None:
    """A warning line when the checkpoint at `path` says a policy other than `none`;
    None when it says `none`, or cannot be read (no kubelet here, not mounted into the
    DaemonSet's pod, or unreadable: nothing to say about the policy either way)."""
    try:
        with open(path, "rb") as file:
            data = json.loads(file.read(MAX_STATE_BYTES))
    except (OSError, ValueError):
        return None
    policy = data.get("policyName") if isinstance(data, dict) else None
    if not isinstance(policy, str) or policy == "none":
        return None
    return (
        f"the kubelet's CPU manager policy is {policy!r} ({path}); nri-sla needs "
        "'none': the kubelet pins Guaranteed containers to CPUs of its own choosing "
        "and overwrites the cpusets nri-sla sets (set cpuManagerPolicy: none in the "
        "kubelet's configuration)"
    )
