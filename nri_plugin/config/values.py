"""The node config's values: `NodeConfig` and its sections, frozen, with their defaults.

What the rest of nri-sla reads (`NodeConfig` is in every `PlanContext` and `NodeState`);
how the file becomes one is `loader` (each key's converter and the table of keys:
`schema`). Every field is optional; docs/config.md and examples/config.yaml describe each.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field

from nri_plugin.errors import ProgrammingError
from nri_plugin.sla import DEFAULT_PREFIX

DEFAULT_STATE_DIR = "/var/lib/nri-sla"
PERMISSIONS = ("realtime", "exclusive-cpus", "gpus", "io-max", "exceed-runtime-limits")
# The CDI kinds a GPU grant is read from: the NVIDIA container toolkit's and the NVIDIA
# device plugin's (cdi-cri strategy), whole GPUs and MIG devices.
DEFAULT_GRANT_CDI_KINDS = ("nvidia.com/gpu", "nvidia.com/mig",
                           "k8s.device-plugin.nvidia.com/gpu",
                           "k8s.device-plugin.nvidia.com/mig",
                           "k8s.gpu.nvidia.com/device", "k8s.gpu.nvidia.com/claim")
# nvidia.com/gpu.shared: what NVIDIA's device plugin renames a time-sliced or MPS GPU to
# (renameByDefault); its MIG counterparts match nvidia.com/mig-*.
DEFAULT_GRANT_RESOURCES = ("nvidia.com/gpu", "nvidia.com/gpu.shared", "nvidia.com/mig-*")
DEFAULT_PODRESOURCES_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"


@dataclass(frozen=True, slots=True)
class Permissions:
    """Namespaces (names or shell globs) allowed to request each privileged feature.

    Safe defaults: real-time CPU time can starve a node, so nobody gets it unless listed;
    exclusive CPUs, a `gpu` section (a requirement on the device plugin's grant) and io.max
    are open to all namespaces, within what Kubernetes granted the container
    (nri_plugin.plan.grants). Going beyond that grant only for the namespaces listed here.
    """

    realtime: tuple[str, ...] = ()
    exclusive_cpus: tuple[str, ...] = ("*",)
    gpus: tuple[str, ...] = ("*",)
    io_max: tuple[str, ...] = ("*",)
    # CPU quota, memory.max and exclusive CPUs above the runtime's values.
    exceed_runtime_limits: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Cap:
    """A per-pod cap: a count, or a percentage of what the node has."""

    value: float
    percent: bool = False

    def of(self, node_total: int) -> int:
        """The cap as a count on a node with `node_total` of the resource."""
        if self.percent:
            return int(node_total * self.value // 100)
        return int(self.value)

    def __str__(self) -> str:
        number = f"{self.value:g}"
        return f"{number}%" if self.percent else number


@dataclass(frozen=True, slots=True)
class PodCaps:
    """The node config's `pod-caps` section: the most one pod's containers together may
    hold, whatever the runtime granted (a second line behind Kubernetes' accounting: soft
    mode, namespaces allowed to exceed their grant). GPUs have no cap here: the kubelet
    counts them, and a container opens exactly its grant."""

    exclusive_cpus: Cap = Cap(50, percent=True)  # of the CPUs not in reserved-cpus
    rt_share: float = 0.1  # rt-runtime / rt-period summed over the pod's containers


@dataclass(frozen=True, slots=True)
class CpuConfig:
    """The node config's `cpu` section: how exclusive CPUs are handed out."""

    # Exclusive CPUs as whole SMT cores only (the kubelet's full-pcpus-only): a count
    # that does not fill whole cores is refused (hard) or runs shared (soft).
    exclusive_full_cores: bool = False


@dataclass(frozen=True, slots=True)
class GpuConfig:
    """The node config's `gpu` section."""

    injection: str = "cdi"  # cdi | env | devices
    inventory: str = "auto"  # auto | nvml | sysfs | /absolute/path/to/snapshot.yaml
    rescan_interval: float = 60.0  # s between inventory rescans by the plugin; 0: never
    health_interval: float = 10.0  # s between GPU health polls (NVML XIDs); 0: never
    # CDI kinds ("vendor/class") whose devices are a GPU grant (runtime_gpus.resolve_grant)
    grant_cdi_kinds: tuple[str, ...] = DEFAULT_GRANT_CDI_KINDS
    # the kubelet's PodResources socket; "" turns it off
    podresources_socket: str = DEFAULT_PODRESOURCES_SOCKET
    # resource names (a trailing * matches any suffix) whose PodResources devices are GPUs
    grant_resources: tuple[str, ...] = DEFAULT_GRANT_RESOURCES


@dataclass(frozen=True, slots=True)
class DevicePluginConfig:
    """The node config's `device-plugin` section: `nri-sla device-plugin`, the node's GPU
    device plugin for the kubelet (docs/device-plugin.md)."""

    resource_name: str = "nvidia.com/gpu"  # the extended resource pods ask for
    socket_dir: str = "/var/lib/kubelet/device-plugins"  # the kubelet's kubelet.sock is here
    mig_strategy: str = "none"  # none | single | mixed: how MIG devices are advertised
    metrics_address: str = ""  # host:port of its Prometheus endpoint; "" serves none


@dataclass(frozen=True, slots=True)
class CgroupConfig:
    """The node config's `cgroup` section."""

    root: str = "/sys/fs/cgroup"
    driver: str = "auto"  # auto | cgroupfs | systemd
    version: int | None = None  # None: detect; 1 or 2 to force


@dataclass(frozen=True, slots=True)
class NriConfig:
    """The node config's `nri` section."""

    socket: str = "/var/run/nri/nri.sock"
    plugin_name: str = "nri-sla"
    plugin_index: str = "50"  # two digits; NRI orders plugins by it
    reconnect_max_seconds: float = 5.0  # nri.service.ServiceOptions.backoff_max says why


@dataclass(frozen=True, slots=True)
class HookConfig:
    """The node config's `hook` section."""

    inject: bool = False  # ask NRI to add the verification OCI hook to containers


@dataclass(frozen=True, slots=True)
class MetricsConfig:
    """The node config's `metrics` section."""

    address: str = "127.0.0.1:9810"  # host:port; "" disables the metrics endpoint
    # host:port of the probe listener (/healthz, /readyz only; nri_plugin.ops.health); "" off
    health_address: str = ""

    @property
    def enabled(self) -> bool:
        return bool(self.address)

    @property
    def host(self) -> str:
        return self.address.rpartition(":")[0].strip("[]")

    @property
    def port(self) -> int:
        return int(self.address.rpartition(":")[2]) if self.address else 0


@dataclass(frozen=True, slots=True)
class WatchConfig:
    """The node config's `watch` section: the drift watch and the compliance signals."""

    interval: float = 30.0  # seconds between passes; 0 turns the watch off
    repair_backoff_max: float = 600.0  # longest wait before retrying a failed repair
    metrics_containers: int = 1000  # containers with per-container series, at most


@dataclass(frozen=True, slots=True)
class StatusConfig:
    """The node config's `status` section: the root-only socket `nri-sla status` reads."""

    socket: str = "/run/nri-sla/status.sock"  # "" turns it off


DEFAULT_SERVICE_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"


@dataclass(frozen=True, slots=True)
class EventsConfig:
    """The node config's `events` section: Kubernetes Events on the pods nri-sla refuses,
    warns about, repairs or finds unenforced (docs/operations.md, "Kubernetes Events")."""

    enabled: bool | None = None  # None (auto): on when the service account is found
    service_account: str = DEFAULT_SERVICE_ACCOUNT  # token and ca.crt of the pod's account
    queue_size: int = 1000  # events waiting for the API server, at most; more are dropped
    qps: float = 5.0  # requests per second to the API server, on average
    burst: int = 25  # requests at once after a quiet time


@dataclass(frozen=True, slots=True)
class LogConfig:
    """The node config's `log` section."""

    format: str = "text"  # text | json
    level: str = "info"  # debug | info | warning | error


@dataclass(frozen=True, slots=True)
class NodeConfig:
    """The validated node config (/etc/nri-sla/config.yaml)."""

    enforcement: str = "hard"
    annotation_prefix: str = DEFAULT_PREFIX
    permissions: Permissions = field(default_factory=Permissions)
    pod_caps: PodCaps = field(default_factory=PodCaps)
    rt_budget: float = 0.5  # share of the kernel's RT budget SLA containers may take
    reserved_cpus: tuple[int, ...] = ()  # never handed out as exclusive CPUs
    # Where nri-sla keeps what must outlive it: the key that authenticates its records.
    state_dir: str = DEFAULT_STATE_DIR
    cpu: CpuConfig = field(default_factory=CpuConfig)
    gpu: GpuConfig = field(default_factory=GpuConfig)
    device_plugin: DevicePluginConfig = field(default_factory=DevicePluginConfig)
    cgroup: CgroupConfig = field(default_factory=CgroupConfig)
    nri: NriConfig = field(default_factory=NriConfig)
    hook: HookConfig = field(default_factory=HookConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    watch: WatchConfig = field(default_factory=WatchConfig)
    status: StatusConfig = field(default_factory=StatusConfig)
    events: EventsConfig = field(default_factory=EventsConfig)
    log: LogConfig = field(default_factory=LogConfig)
    source: str = "<defaults>"  # the file it was read from

    def allows(self, permission: str, namespace: str) -> bool:
        """Whether pods in ``namespace`` may use ``permission`` (one of PERMISSIONS)."""
        if permission not in PERMISSIONS:
            raise ProgrammingError(f"unknown permission {permission!r}; one of "
                                   f"{', '.join(PERMISSIONS)}")
        patterns = getattr(self.permissions, permission.replace("-", "_"))
        return any(fnmatch.fnmatchcase(namespace, p) for p in patterns)
