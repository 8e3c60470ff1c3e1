"""GrantedResources: what the runtime gave a container before nri-sla looked at it.

The kubelet turns a container's resources into the values the runtime applies: CPU quota
and period from limits.cpu, CPU shares from requests.cpu (shares = millicores * 1024 /
1000, at least 2) and the memory limit from limits.memory. A device plugin's GPU grant
reaches the container as CDI device names (CRI), GPU device nodes and MIG access nodes
(/dev/nvidia-caps/nvidia-capN) in linux.devices, or mounts of /dev/null under
/var/run/nvidia-container-devices/ (its volume-mounts strategy): that is the GPU evidence
kept here, resolved against the inventory by nri_plugin.plan.runtime_gpus. A container
whose device cgroup allows every device (a privileged one: the runtime also lists every
host device node in it) sees the GPUs without a grant: `all_devices` says so, and its
device nodes are then no grant.
NVIDIA_VISIBLE_DEVICES is kept only to say that an env is not a grant: a pod author (or
the image) writes it. Kubernetes (scheduler, LimitRange, ResourceQuota) accounted exactly
these, so an SLA may only tighten them (nri_plugin.plan.grants). The plugin reads them
from the CreateContainer / UpdateContainer request, the OCI hook from config.json.

Not a dataclass: the hook's warm path builds one from config.json for its cache key, and
`import dataclasses` costs it more than the rest of its work (see value.py). Frozen and
hashable all the same: it is part of the core's reuse key.
"""

from itertools import islice

from nri_plugin.value import Value

TYPE_CHECKING = False  # `typing` costs the OCI hook start-up time; only checkers need it
if TYPE_CHECKING:
    from collections.abc import Iterable

DEFAULT_CPU_PERIOD_US = 100_000  # the kernel's (and kubelet's) CFS period
SHARES_PER_CPU = 1024  # kubelet: shares = millicores * 1024 / 1000
NVIDIA_MAJOR = 195  # /dev/nvidiaN, nvidiactl (255) and nvidia-modeset (254)
# MIG access nodes; their major is the kernel's choice at load time (/proc/devices
# "nvidia-caps"), so they are known by path: a runtime names a node where it creates it.
CAPS_DIR = "/dev/nvidia-caps/"
DEVICE_MOUNT_DIR = "/var/run/nvidia-container-devices/"  # volume-mounts strategy
# What the NVIDIA device plugin's volume-mounts strategy mounts at each device path; a
# mount of anything else there (a pod's own emptyDir, a file) is not its grant.
DEVICE_MOUNT_SOURCE = "/dev/null"
ENV_VISIBLE = "NVIDIA_VISIBLE_DEVICES"
# Bounds on the GPU evidence, applied by the readers before anything is expanded: a
# container has at most a node's worth of GPUs (and MIG devices), so more names than this
# are not a grant anyone wrote; what is over is dropped, a name cut to the bound matches
# no GPU and shows as unknown.
MAX_GRANT_ITEMS = 256
MAX_GRANT_NAME = 128
MAX_ENV_GPUS = 4096


def bounded_names(names: "Iterable[str]") -> tuple[str, ...]:
    """At most MAX_GRANT_ITEMS names, each cut to MAX_GRANT_NAME characters."""
    if isinstance(names, tuple) and not names:  # most containers' evidence: none
        return ()
    return tuple(n[:MAX_GRANT_NAME] for n in islice(names, MAX_GRANT_ITEMS))


def gpu_device_numbers(
    devices: "Iterable[tuple[str, object, int, int]]",
) -> "tuple[tuple[tuple[int, int], ...], tuple[int, ...]]":
    """Among (path, type, major, minor) entries, at most MAX_GRANT_ITEMS looked at: the
    (major, minor) of the character devices of NVIDIA's major, and the minors of the
    character devices under CAPS_DIR (MIG access). The type is as the runtime wrote it:
    only "c" counts."""
    gpus: list[tuple[int, int]] = []
    caps: list[int] = []
    for path, kind, major, minor in islice(devices, MAX_GRANT_ITEMS):
        if kind != "c":
            continue
        if major == NVIDIA_MAJOR:
            gpus.append((major, minor))
        elif path.startswith(CAPS_DIR):
            caps.append(minor)
    return tuple(gpus), tuple(caps)


def all_devices_allowed(rules: "Iterable[tuple[bool, str, bool, str]]") -> bool:
    """The device cgroup, as (allow, type, names a major or minor, access) rules in order
    (later rules win), lets the container read and write every device: what a runtime
    sets for a privileged container (an access left out is every access). At most
    MAX_GRANT_ITEMS rules looked at."""
    allowed = False
    for allow, kind, numbered, access in islice(rules, MAX_GRANT_ITEMS):
        if kind in ("", "a") and not numbered:
            allowed = allow and (not access or ("r" in access and "w" in access))
    return allowed


def device_mount_ids(mounts: "Iterable[tuple[str, object]]") -> tuple[str, ...]:
    """The device ids of the (destination, source) mounts under DEVICE_MOUNT_DIR whose
    source is DEVICE_MOUNT_SOURCE (the path's last element), at most MAX_GRANT_ITEMS
    mounts looked at."""
    ids = [
        d[len(DEVICE_MOUNT_DIR) :].strip("/").rpartition("/")[2]
        for d, source in islice(mounts, MAX_GRANT_ITEMS)
        if d.startswith(DEVICE_MOUNT_DIR) and source == DEVICE_MOUNT_SOURCE
    ]
    return bounded_names([i for i in ids if i]) if ids else ()


class GrantedResources(Value):
    """The runtime's limits for one container; None = not set (unlimited)."""

    # set once in __init__ (object.__setattr__): declared here for checkers
    # (quoted: evaluating them would cost the hook's start-up)
    cpu_quota: "int | None"
    cpu_period: "int | None"
    cpu_shares: "int | None"
    memory_limit: "int | None"
    cdi_devices: "tuple[str, ...]"
    gpu_devices: "tuple[tuple[int, int], ...]"
    device_mounts: "tuple[str, ...]"
    caps_minors: "tuple[int, ...]"
    all_devices: bool
    env_gpus: "str | None"

    __slots__ = (
        "all_devices",
        "caps_minors",
        "cdi_devices",
        "cpu_period",
        "cpu_quota",
        "cpu_shares",
        "device_mounts",
        "env_gpus",
        "gpu_devices",
        "memory_limit",
    )

    def __init__(
        self,
        cpu_quota: int | None = None,
        cpu_period: int | None = None,
        cpu_shares: int | None = None,
        memory_limit: int | None = None,
        *,
        cdi_devices: "Iterable[str]" = (),
        gpu_devices: "Iterable[tuple[int, int]]" = (),
        device_mounts: "Iterable[str]" = (),
        env_gpus: str | None = None,
        caps_minors: "Iterable[int]" = (),
        all_devices: bool = False,
    ) -> None:
        init = object.__setattr__
        # The runtime writes "unlimited" as -1 (quota, memory) or leaves the field out:
        # both are None here. (Spelled out, not a helper: one is built for every
        # CreateContainer and every synchronized container.)
        init(self, "cpu_quota", cpu_quota if cpu_quota is not None and cpu_quota > 0 else None)
        init(self, "cpu_period", cpu_period if cpu_period is not None and cpu_period > 0 else None)
        init(self, "cpu_shares", cpu_shares if cpu_shares is not None and cpu_shares > 0 else None)
        init(
            self,
            "memory_limit",
            memory_limit if memory_limit is not None and memory_limit > 0 else None,
        )
        # GPU evidence, bounded by the readers (bounded_names, gpu_device_numbers,
        # device_mount_ids) and again here for callers that build one directly:
        # (Most containers carry none: the empty default is kept as it is.)
        init(
            self,
            "cdi_devices",  # every CDI name, any kind
            bounded_names(cdi_devices) if cdi_devices != () else (),
        )
        init(
            self,
            "gpu_devices",  # (major, minor)
            tuple(islice(gpu_devices, MAX_GRANT_ITEMS)) if gpu_devices != () else (),
        )
        init(
            self,
            "device_mounts",  # device ids
            bounded_names(device_mounts) if device_mounts != () else (),
        )
        init(
            self,
            "caps_minors",  # minors of /dev/nvidia-caps/ nodes (MIG access)
            tuple(islice(caps_minors, MAX_GRANT_ITEMS)) if caps_minors != () else (),
        )
        init(self, "all_devices", bool(all_devices))  # privileged: sees every device
        # NVIDIA_VISIBLE_DEVICES: never a grant, only reported ("env only")
        init(self, "env_gpus", None if env_gpus is None else env_gpus[:MAX_ENV_GPUS])

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"GrantedResources is frozen (cannot set {name})")

    # Value leaves values unhashable (mutable by convention); this one is frozen
    def __hash__(self) -> int:
        return hash(self._fields())

    def key(self) -> tuple:
        """Every field, for the decision caches (the core's reuse key, the hook's cache).
        Spelled out: built for every CreateContainer, and Value._fields' loop is slower."""
        return (
            self.all_devices,
            self.caps_minors,
            self.cdi_devices,
            self.cpu_period,
            self.cpu_quota,
            self.cpu_shares,
            self.device_mounts,
            self.env_gpus,
            self.gpu_devices,
            self.memory_limit,
        )

    @property
    def gpu_evidence(self) -> bool:
        """It carries something that may name GPUs (nri_plugin.plan.runtime_gpus reads
        it): CDI devices, GPU device nodes, MIG access nodes, device mounts or the env's
        GPU list."""
        return (
            self.env_gpus is not None
            or bool(self.cdi_devices)
            or bool(self.gpu_devices)
            or bool(self.device_mounts)
            or bool(self.caps_minors)
        )

    @property
    def quota_period(self) -> tuple[int, int] | None:
        """(quota, period) in microseconds; None when the CPU time is not limited."""
        if self.cpu_quota is None:
            return None
        return self.cpu_quota, self.cpu_period or DEFAULT_CPU_PERIOD_US

    @property
    def cpu_request_millis(self) -> int | None:
        """The container's CPU request in millicores: from the shares the kubelet derived
        from requests.cpu (rounded up: the kubelet rounded down), else the quota (a
        runtime without requests), else None (nothing says)."""
        if self.cpu_shares is not None:
            return -(-self.cpu_shares * 1000 // SHARES_PER_CPU)
        qp = self.quota_period
        return -(-qp[0] * 1000 // qp[1]) if qp is not None else None


LIMITS_KEPT = 512  # distinct sets of limits limits_only keeps (a node runs a few hundred)
_limits_only: "dict[tuple[int, int, int, int], GrantedResources]" = {}


def limits_only(
    cpu_quota: int, cpu_period: int, cpu_shares: int, memory_limit: int
) -> GrantedResources:
    """A GrantedResources with these limits (as the runtime wrote them: 0 or -1 is not
    set) and no GPU evidence: what nearly every container is granted. One shared value per
    distinct set of limits: replicas carry the same few, it is frozen, and building one
    writes eight slots (about 15,000 instructions, 3% of a CreateContainer's)."""
    limits = (cpu_quota, cpu_period, cpu_shares, memory_limit)
    known = _limits_only.get(limits)
    if known is None:
        if len(_limits_only) >= LIMITS_KEPT:
            _limits_only.clear()  # bounded: many distinct limits only cost a rebuild
        known = _limits_only[limits] = GrantedResources(*limits)
    return known
