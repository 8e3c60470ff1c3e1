"""The node config's values: `NodeConfig` and its sections, frozen, with their defaults,
each field that is a config key declared once with its converter, whether a SIGHUP
applies it and its row in docs/config.md (`convert.key`).

What the rest of nri-sla reads (`NodeConfig` is in every `PlanContext` and `NodeState`);
the tables derived from these fields are `schema`'s, reading a file is `loader`'s. A new
key is one field here; `python -m nri_plugin.config.doctable docs/config.md` then
rewrites the docs' table (tests/docs holds the two equal).
"""

from __future__ import annotations

import fnmatch

from nri_plugin.config import convert as conv
from nri_plugin.config.cap import Cap
from nri_plugin.config.convert import (
    CGROUP_DRIVERS,
    GPU_INJECTIONS,
    LOG_FORMATS,
    LOG_LEVELS,
    MAX_LISTED,
    MIG_STRATEGIES,
    key,
    one_of,
)
from nri_plugin.errors import ProgrammingError
from nri_plugin.sla import DEFAULT_PREFIX, ENFORCEMENT_MODES
from nri_plugin.text.fields import choice
from nri_plugin.value import Frozen, field

TYPE_CHECKING = False  # `typing` costs the OCI hook's cold run; only checkers need it
if TYPE_CHECKING:
    from nri_plugin.config.convert import (
        CgroupDriverSetting,
        GpuInjectionMode,
        LogLevel,
        MigStrategy,
    )
    from nri_plugin.ops.event import LogFormat
    from nri_plugin.sla.model import Enforcement

DEFAULT_STATE_DIR = "/var/lib/nri-sla"
PERMISSIONS = ("realtime", "exclusive-cpus", "gpus", "io-max", "exceed-runtime-limits")
# The CDI kinds a GPU grant is read from: the NVIDIA container toolkit's and the NVIDIA
# device plugin's (cdi-cri strategy), whole GPUs and MIG devices.
DEFAULT_GRANT_CDI_KINDS = (
    "nvidia.com/gpu",
    "nvidia.com/mig",
    "k8s.device-plugin.nvidia.com/gpu",
    "k8s.device-plugin.nvidia.com/mig",
    "k8s.gpu.nvidia.com/device",
    "k8s.gpu.nvidia.com/claim",
)
# nvidia.com/gpu.shared: what NVIDIA's device plugin renames a time-sliced or MPS GPU to
# (renameByDefault); its MIG counterparts match nvidia.com/mig-*.
DEFAULT_GRANT_RESOURCES = ("nvidia.com/gpu", "nvidia.com/gpu.shared", "nvidia.com/mig-*")
DEFAULT_PODRESOURCES_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
DEFAULT_SERVICE_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
_NAMESPACES = "list of namespace names/globs"


class Permissions(Frozen):
    """Namespaces (names or shell globs) allowed to request each privileged feature.

    Safe defaults: real-time CPU time can starve a node, so nobody gets it unless listed;
    exclusive CPUs, a `gpu` section (a requirement on the device plugin's grant) and io.max
    are open to all namespaces, within what Kubernetes granted the container
    (nri_plugin.plan.grants). Going beyond that grant only for the namespaces listed here.
    """

    realtime: tuple[str, ...] = field(
        default=(),
        metadata=key(
            conv.namespaces,
            live=True,
            note="(nobody)",
            accepts=_NAMESPACES,
            doc="who may set `cpu.rt-runtime` (RT time can starve a node)",
        ),
    )
    exclusive_cpus: tuple[str, ...] = field(
        default=("*",),
        metadata=key(
            conv.namespaces, live=True, accepts=_NAMESPACES, doc="who may set `cpu.exclusive`"
        ),
    )
    gpus: tuple[str, ...] = field(
        default=("*",),
        metadata=key(
            conv.namespaces,
            live=True,
            accepts=_NAMESPACES,
            doc=(
                "who may have a `gpu` section (a requirement on the device plugin's grant, "
                "verified "
                "and aligned to; nri-sla never adds a GPU)"
            ),
        ),
    )
    io_max: tuple[str, ...] = field(
        default=("*",),
        metadata=key(conv.namespaces, live=True, accepts=_NAMESPACES, doc="who may set `io.max`"),
    )
    exceed_runtime_limits: tuple[str, ...] = field(
        default=(),
        metadata=key(
            conv.namespaces,
            live=True,
            note="(nobody)",
            accepts=_NAMESPACES,
            doc=(
                "whose SLAs may go above what the runtime set for the container: CPU quota, memory "
                "limit, exclusive CPUs beyond the CPU request (see below); never GPUs: a container "
                "opens exactly its grant"
            ),
        ),
    )


class PodCaps(Frozen):
    """The node config's `pod-caps` section: the most one pod's containers together may
    hold, whatever the runtime granted (a second line behind Kubernetes' accounting: soft
    mode, namespaces allowed to exceed their grant). GPUs have no cap here: the kubelet
    counts them, and a container opens exactly its grant."""

    exclusive_cpus: Cap = field(
        default=Cap(50, percent=True),
        metadata=key(
            conv.cap,
            live=True,
            accepts='count or `"N%"` of the CPUs not in `reserved-cpus`',
            doc="exclusive CPUs of one pod's containers together",
        ),
    )
    rt_share: float = field(
        default=0.1,
        metadata=key(
            conv.share,
            live=True,
            accepts="number 0..1",
            doc="real-time share (`rt-runtime / rt-period`) of one pod's containers together",
        ),
    )


class CpuConfig(Frozen):
    """The node config's `cpu` section: how exclusive CPUs are handed out."""

    exclusive_full_cores: bool = field(
        default=False,
        metadata=key(
            conv.flag,
            accepts="bool",
            doc=(
                "exclusive CPUs as whole SMT cores only (the kubelet's `full-pcpus-only`): a "
                "`cpu.exclusive` count that does not fill whole cores (`exclusive: 3` on 2-thread "
                "cores) is refused (hard) or runs on the shared pool (soft, with a warning), never "
                "rounded up; `false`: exactly the count asked, as logical CPUs "
                '(see "CPUs: one pool for the node")'
            ),
        ),
    )


class GpuConfig(Frozen):
    """The node config's `gpu` section."""

    injection: GpuInjectionMode = field(
        default="cdi",
        metadata=key(
            choice(GPU_INJECTIONS),
            accepts=one_of(GPU_INJECTIONS),
            doc=(
                "how the GPUs `nri-sla device-plugin` chose reach a container: its answer to the "
                "kubelet's Allocate (CDI names `nvidia.com/gpu=<uuid>`, "
                "`NVIDIA_VISIBLE_DEVICES`, or "
                "device nodes; docs/device-plugin.md); the NRI plugin and the OCI hook never add a "
                "GPU"
            ),
        ),
    )
    inventory: str = field(
        default="auto",
        metadata=key(
            conv.inventory,
            accepts="`auto` | `nvml` | `sysfs` | absolute path",
            doc="where GPU facts come from (a path replays an `nri-sla inventory --save` snapshot)",
        ),
    )
    rescan_interval: float = field(
        default=60.0,
        metadata=key(
            conv.rescan,
            accepts="number, 0 or 1 <= s <= 86400",
            doc=(
                "seconds between re-reads of the GPU inventory by `nri-sla run` (also at every "
                "Synchronize); 0 turns the periodic rescan off. A GPU that vanishes stays held by "
                "its holders (docs/reliability.md)"
            ),
        ),
    )
    health_interval: float = field(
        default=10.0,
        metadata=key(
            conv.rescan,
            accepts="number, 0 or 1 <= s <= 86400",
            doc=(
                "seconds between GPU health polls by `nri-sla run` (NVML XID events and lost GPUs, "
                'docs/placement.md "GPU health"); 0 turns them off (the inventory reads still mark '
                "GPUs NVML cannot read)"
            ),
        ),
    )
    grant_cdi_kinds: tuple[str, ...] = field(
        default=DEFAULT_GRANT_CDI_KINDS,
        metadata=key(
            conv.cdi_kinds,
            accepts=f"list of CDI kinds `vendor/class` (at most {MAX_LISTED})",
            doc=(
                "CDI devices of these kinds in a container are its GPU grant "
                '(docs/sla.md, "The GPU grant"; the last two are '
                "NVIDIA's DRA driver's, docs/gpus.md); other kinds are not GPUs"
            ),
        ),
    )
    podresources_socket: str = field(
        default=DEFAULT_PODRESOURCES_SOCKET,
        metadata=key(
            conv.socket_path,
            accepts='absolute path or `""`',
            doc=(
                "the kubelet's PodResources API, more grant evidence (device ids per container); "
                '`""` turns it off'
            ),
        ),
    )
    grant_resources: tuple[str, ...] = field(
        default=DEFAULT_GRANT_RESOURCES,
        metadata=key(
            conv.resource_names,
            accepts=(
                "list of resource names `domain/name`, a trailing `*` matches any suffix (at "
                f"most {MAX_LISTED})"
            ),
            doc=(
                "the PodResources resources whose devices are GPUs. Shared resources belong here "
                "too: `nvidia.com/gpu.shared` is what NVIDIA's device plugin names time-sliced or "
                "MPS GPUs with `renameByDefault` (its MIG counterparts "
                "`nvidia.com/mig-<profile>.shared` match `nvidia.com/mig-*`); add the name a "
                "`sharing.timeSlicing.resources[].rename` gives. Their device ids `<id>::<n>` are "
                "replicas of one GPU or MIG device: granted, and shared by design (docs/gpus.md)"
            ),
        ),
    )


class DevicePluginConfig(Frozen):
    """The node config's `device-plugin` section: `nri-sla device-plugin`, the node's GPU
    device plugin for the kubelet (docs/device-plugin.md)."""

    resource_name: str = field(
        default="nvidia.com/gpu",
        metadata=key(
            conv.resource_name,
            accepts="extended resource name `<domain>/<name>` (not `kubernetes.io`)",
            doc=(
                "the resource `nri-sla device-plugin` advertises to the kubelet; pods ask for "
                "it in "
                "`limits` (docs/device-plugin.md)"
            ),
        ),
    )
    socket_dir: str = field(
        default="/var/lib/kubelet/device-plugins",
        metadata=key(
            conv.abs_path,
            accepts="absolute path",
            doc=(
                "the kubelet's device-plugin directory: `kubelet.sock` is there and `nri-sla "
                "device-plugin` serves `nri-sla-gpu.sock` in it (and `nri-sla-mig-<profile>.sock` "
                "under the `mixed` MIG strategy)"
            ),
        ),
    )
    mig_strategy: MigStrategy = field(
        default="none",
        metadata=key(
            choice(MIG_STRATEGIES),
            accepts=one_of(MIG_STRATEGIES),
            doc=(
                "how `nri-sla device-plugin` advertises MIG devices, as NVIDIA's device plugin "
                "names "
                "them: `none` leaves MIG-enabled GPUs out, `single` offers MIG devices of one "
                "profile as the resource, `mixed` as `nvidia.com/mig-<profile>` "
                '(docs/device-plugin.md, "MIG strategies")'
            ),
        ),
    )
    metrics_address: str = field(
        default="",
        metadata=key(
            conv.address,
            note="(off)",
            accepts='`host:port`, `[v6]:port`, `:port`, or `""`',
            doc=(
                "where `nri-sla device-plugin` serves its Prometheus metrics "
                "(docs/device-plugin.md, "
                '"Metrics"); not the port of `metrics.address`, which `nri-sla run` holds'
            ),
        ),
    )


class CgroupConfig(Frozen):
    """The node config's `cgroup` section."""

    root: str = field(
        default="/sys/fs/cgroup",
        metadata=key(
            conv.abs_path,
            accepts="absolute path",
            doc="cgroup filesystem mount (`nri-sla hook --cgroup-root` overrides it for the hook)",
        ),
    )
    driver: CgroupDriverSetting = field(
        default="auto",
        metadata=key(
            choice(CGROUP_DRIVERS),
            accepts=one_of(CGROUP_DRIVERS),
            doc="how container cgroup paths are spelled",
        ),
    )
    # None: detected at start
    version: int | None = field(
        default=None,
        metadata=key(
            conv.cgroup_version,
            note="(`None` in Python)",
            accepts="`auto` | `1` | `2`",
            doc="force a hierarchy instead of detecting it",
        ),
    )


class NriConfig(Frozen):
    """The node config's `nri` section."""

    socket: str = field(
        default="/var/run/nri/nri.sock",
        metadata=key(
            conv.abs_path,
            accepts="absolute path",
            doc="the runtime's NRI socket (external plugin mode)",
        ),
    )
    plugin_name: str = field(
        default="nri-sla",
        metadata=key(
            conv.plugin_name,
            accepts="letters, digits, `.`, `_`, `-`",
            doc="name registered with NRI",
        ),
    )
    plugin_index: str = field(
        default="50",
        metadata=key(
            conv.plugin_index,
            accepts='two digits `"00"`..`"99"` (or an int 10..99)',
            doc=(
                "NRI's plugin order; exactly two digits, as containerd requires: an index below 10 "
                'is quoted (`"07"`; YAML reads `07` as the number 7, which is refused)'
            ),
        ),
    )
    # nri.service.ServiceOptions.backoff_max says why
    reconnect_max_seconds: float = field(
        default=5.0,
        metadata=key(
            conv.reconnect,
            accepts="number, 0 < s <= 3600",
            doc=(
                "longest back-off between reconnects (each second without a plugin is a second of "
                "pods created unenforced: docs/reliability.md)"
            ),
        ),
    )


class HookConfig(Frozen):
    """The node config's `hook` section."""

    inject: bool = field(
        default=False,
        metadata=key(
            conv.flag, accepts="bool", doc="ask NRI to add the verification OCI hook to containers"
        ),
    )


class MetricsConfig(Frozen):
    """The node config's `metrics` section (nri_plugin.ops.listenaddress reads the
    addresses)."""

    address: str = field(
        default="127.0.0.1:9810",
        metadata=key(
            conv.address,
            accepts='`host:port`, `[v6]:port`, `:port`, or `""`',
            doc='Prometheus endpoint; `""` disables it',
        ),
    )
    # the probe listener, /healthz and /readyz only (nri_plugin.ops.health)
    health_address: str = field(
        default="",
        metadata=key(
            conv.address,
            note="(off)",
            accepts='`host:port`, `[v6]:port`, `:port`, or `""`',
            doc=(
                "the probe listener: `/healthz` and `/readyz` alone, answered without a thread per "
                "connection so that no connection flood on either port starves the kubelet's "
                "probes "
                '(docs/operations.md, "Probes"); `nri-sla run --health-address` overrides it; the '
                "DaemonSet uses `:9811`. Off by default: only Kubernetes probes it, and a fixed "
                "default port would collide between plugins started side by side"
            ),
        ),
    )


class WatchConfig(Frozen):
    """The node config's `watch` section: the drift watch and the compliance signals."""

    interval: float = field(
        default=30.0,
        metadata=key(
            conv.interval,
            name="interval-seconds",
            accepts="`0`, or a number 1..3600",
            doc=(
                "how often the drift watch reads back every enforced value and the compliance "
                "signals of every started SLA container; drift is repaired (hard) or reported "
                "(soft). `0` turns the watch, its repairs (also on Synchronize) and the "
                'per-container series off (docs/operations.md, "Drift watch")'
            ),
        ),
    )
    repair_backoff_max: float = field(
        default=600.0,
        metadata=key(
            conv.backoff,
            name="repair-backoff-max-seconds",
            accepts="number 1..86400",
            doc="a failed repair is retried after 2, 4, 8, ... intervals, never later than this",
        ),
    )
    metrics_containers: int = field(
        default=1000,
        metadata=key(
            conv.series_containers,
            accepts="count 0..100000",
            doc=(
                "SLA containers with per-container Prometheus series (about 20 each), shared "
                "round-robin between namespaces so that one namespace cannot crowd out another's; "
                "the rest are counted in `nri_sla_containers_unexported` (and per namespace in "
                "`nri_sla_namespace_containers_unexported`) and shown by `nri-sla status`"
            ),
        ),
    )


class StatusConfig(Frozen):
    """The node config's `status` section: the root-only socket `nri-sla status` reads."""

    socket: str = field(
        default="/run/nri-sla/status.sock",
        metadata=key(
            conv.socket_path,
            accepts='absolute path or `""`',
            doc='the root-only unix socket `nri-sla status` reads (mode 0600); `""` turns it off',
        ),
    )


class EventsConfig(Frozen):
    """The node config's `events` section: Kubernetes Events on the pods nri-sla refuses,
    warns about, repairs or finds unenforced (docs/operations.md, "Kubernetes Events")."""

    enabled: bool | None = field(
        default=None,
        metadata=key(
            conv.auto_flag,
            accepts="`auto` | `true` | `false`",
            doc=(
                "Kubernetes Events on the pods nri-sla refuses, clamps, repairs or finds created "
                'unenforced (docs/operations.md, "Kubernetes Events"); `auto`: on when '
                "`KUBERNETES_SERVICE_HOST` is set and the service account's token is found (as in "
                "the DaemonSet), off on a node without them; `true` without them refuses to start "
                "(exit 2); `false`: off, and the HTTPS client is never loaded"
            ),
        ),
    )
    service_account: str = field(
        default=DEFAULT_SERVICE_ACCOUNT,
        metadata=key(
            conv.abs_path,
            accepts="absolute path",
            doc=(
                "the directory of the service account's `token` (read again for every request: the "
                "kubelet rotates it) and `ca.crt` (the API server's CA)"
            ),
        ),
    )
    queue_size: int = field(
        default=1000,
        metadata=key(
            conv.queue_size,
            accepts="count 1..100000",
            doc=(
                "events waiting for the API server, at most; one more is dropped and counted "
                '(`nri_sla_events_dropped_total{reason="queue_full"}`): a slow or unreachable API '
                "server never delays a container"
            ),
        ),
    )
    qps: float = field(
        default=5.0,
        metadata=key(
            conv.qps,
            accepts="number 0.01..1000",
            doc=(
                "requests per second to the API server, on average (each new event a POST, each "
                "repeat a PATCH of its count)"
            ),
        ),
    )
    burst: int = field(
        default=25,
        metadata=key(
            conv.burst, accepts="count 1..10000", doc="requests at once after a quiet time"
        ),
    )


class LogConfig(Frozen):
    """The node config's `log` section."""

    format: LogFormat = field(
        default="text",
        metadata=key(
            choice(LOG_FORMATS),
            live=True,
            accepts=one_of(LOG_FORMATS),
            doc="log line format (`--log-format` on the command line wins)",
        ),
    )
    level: LogLevel = field(
        default="info",
        metadata=key(
            choice(LOG_LEVELS),
            live=True,
            accepts=one_of(LOG_LEVELS),
            doc="log threshold (`--log-level` on the command line wins)",
        ),
    )


class NodeConfig(Frozen):
    """The validated node config (/etc/nri-sla/config.yaml): its top-level keys, then one
    field per section (the section's name is the attribute's with '-' for '_')."""

    enforcement: Enforcement = field(
        default="hard",
        metadata=key(
            choice(ENFORCEMENT_MODES),
            live=True,
            accepts=one_of(ENFORCEMENT_MODES),
            doc="default when a pod does not say; hard = apply exactly or refuse the container",
        ),
    )
    annotation_prefix: str = field(
        default=DEFAULT_PREFIX,
        metadata=key(
            conv.prefix,
            accepts="DNS subdomain",
            doc=(
                "annotations read are `<prefix>/pod`, `<prefix>/container.<name>`, "
                "`<prefix>/enforcement`"
            ),
        ),
    )
    permissions: Permissions = field(default_factory=Permissions)
    pod_caps: PodCaps = field(default_factory=PodCaps)
    rt_budget: float = field(
        default=0.5,
        metadata=key(
            conv.share,
            accepts="number 0..1",
            doc=(
                "share of the kernel's RT budget (root `cpu.rt_runtime_us / cpu.rt_period_us`) all "
                "SLA containers together may reserve"
            ),
        ),
    )
    reserved_cpus: tuple[int, ...] = field(
        default=(),
        metadata=key(
            conv.cpu_list,
            note="(none)",
            accepts='CPU list `"0-1,4"`, `[0, 1]` or `3`',
            doc="CPUs never handed out as exclusive CPUs",
        ),
    )
    state_dir: str = field(
        default=DEFAULT_STATE_DIR,
        metadata=key(
            conv.abs_path,
            accepts="absolute path",
            doc=(
                "nri-sla's own state: `record.key`, the node-local key that authenticates the "
                '`sla.nri.io/applied` records (docs/operations.md, "Records and the record key"); '
                "created at the first `nri-sla run`, read by the OCI hook; and `rt-raises.json` "
                "(cgroup v1), the RT budget the plugin raised in containers' ancestors, given back "
                'once no container below needs it (docs/cgroups.md, "Giving it back"). Keep it on '
                "the host (the DaemonSet mounts it) and the same for the plugin and the hook"
            ),
        ),
    )
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
            raise ProgrammingError(
                f"unknown permission {permission!r}; one of {', '.join(PERMISSIONS)}"
            )
        patterns = getattr(self.permissions, permission.replace("-", "_"))
        return any(fnmatch.fnmatchcase(namespace, p) for p in patterns)
