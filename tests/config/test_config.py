"""The node policy file: defaults, every field, every refusal, load_config paths."""

from __future__ import annotations

import pathlib

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from nri_plugin.config import loader
from nri_plugin.config.cap import Cap
from nri_plugin.config.loader import ConfigError, load_config, parse_config
from nri_plugin.config.values import (
    CgroupConfig,
    DevicePluginConfig,
    GpuConfig,
    HookConfig,
    LogConfig,
    MetricsConfig,
    NodeConfig,
    NriConfig,
    Permissions,
    PodCaps,
)
from nri_plugin.errors import ProgrammingError
from nri_plugin.ops.listenaddress import ListenAddress, parse_address

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "config.yaml"
SRC = "/etc/nri-sla/config.yaml"


def test_example_file_is_exactly_the_defaults():
    cfg = load_config(str(EXAMPLE))
    assert cfg == NodeConfig(source=str(EXAMPLE))
    assert parse_config("", "x") == NodeConfig(source="x")
    assert parse_config("# nothing\n", "x") == NodeConfig(source="x")


def test_defaults_are_safe():
    cfg = NodeConfig()
    assert cfg.enforcement == "hard" and cfg.annotation_prefix == "sla.nri.io"
    assert not cfg.allows("realtime", "default")
    assert cfg.allows("exclusive-cpus", "any") and cfg.allows("gpus", "x")
    assert cfg.allows("io-max", "x")
    # Nobody goes beyond what the runtime granted; GPUs are only ever the grant.
    assert not cfg.allows("exceed-runtime-limits", "kube-system")
    with pytest.raises(ProgrammingError, match="unknown permission 'ungranted-gpus'"):
        cfg.allows("ungranted-gpus", "default")
    assert cfg.pod_caps == PodCaps(exclusive_cpus=Cap(50, percent=True), rt_share=0.1)
    assert cfg.pod_caps.exclusive_cpus.of(64) == 32
    assert cfg.gpu.grant_cdi_kinds == (
        "nvidia.com/gpu",
        "nvidia.com/mig",
        "k8s.device-plugin.nvidia.com/gpu",
        "k8s.device-plugin.nvidia.com/mig",
        "k8s.gpu.nvidia.com/device",
        "k8s.gpu.nvidia.com/claim",
    )
    assert cfg.gpu.grant_resources == (
        "nvidia.com/gpu",
        "nvidia.com/gpu.shared",
        "nvidia.com/mig-*",
    )
    assert cfg.gpu.podresources_socket == "/var/lib/kubelet/pod-resources/kubelet.sock"
    assert cfg.rt_budget == 0.5 and cfg.reserved_cpus == ()
    # the endpoint's address is read by the one listen-address parser
    assert parse_address(cfg.metrics.address) == ListenAddress("127.0.0.1", 9810)


def test_every_field():
    cfg = parse_config(
        """
enforcement: soft
annotation-prefix: sla.example.com
permissions:
  realtime: [rt-jobs, "team-*"]
  exclusive-cpus: []
  gpus: ["ml-?", "[ab]-prod"]
  io-max: [storage]
  exceed-runtime-limits: ["batch-*"]
pod-caps: {exclusive-cpus: 16, rt-share: 0.05}
rt-budget: 0.25
reserved-cpus: 0-1,8
gpu: {injection: env, inventory: /var/lib/nri-sla/inventory.yaml, rescan-interval: 0,
      grant-cdi-kinds: [example.com/accel], podresources-socket: "",
      grant-resources: [example.com/accel, "example.com/part-*"]}
device-plugin: {resource-name: example.com/accel, socket-dir: /run/kubelet/plugins/}
cgroup: {root: /sys/fs/cgroup/, driver: systemd, version: 2}
nri: {socket: /run/nri/nri.sock, plugin-name: sla, plugin-index: "07", reconnect-max-seconds: 2.5}
hook: {inject: true}
metrics: {address: "[::1]:9000"}
log: {format: json, level: debug}
""",
        SRC,
    )
    assert cfg == NodeConfig(
        enforcement="soft",
        annotation_prefix="sla.example.com",
        permissions=Permissions(
            realtime=("rt-jobs", "team-*"),
            exclusive_cpus=(),
            gpus=("ml-?", "[ab]-prod"),
            io_max=("storage",),
            exceed_runtime_limits=("batch-*",),
        ),
        pod_caps=PodCaps(exclusive_cpus=Cap(16), rt_share=0.05),
        rt_budget=0.25,
        reserved_cpus=(0, 1, 8),
        gpu=GpuConfig(
            injection="env",
            inventory="/var/lib/nri-sla/inventory.yaml",
            rescan_interval=0.0,
            grant_cdi_kinds=("example.com/accel",),
            podresources_socket="",
            grant_resources=("example.com/accel", "example.com/part-*"),
        ),
        device_plugin=DevicePluginConfig(
            resource_name="example.com/accel", socket_dir="/run/kubelet/plugins"
        ),
        cgroup=CgroupConfig(root="/sys/fs/cgroup", driver="systemd", version=2),
        nri=NriConfig(
            socket="/run/nri/nri.sock",
            plugin_name="sla",
            plugin_index="07",
            reconnect_max_seconds=2.5,
        ),
        hook=HookConfig(inject=True),
        metrics=MetricsConfig(address="[::1]:9000"),
        log=LogConfig(format="json", level="debug"),
        source=SRC,
    )
    assert parse_address(cfg.metrics.address) == ListenAddress("::1", 9000)
    assert cfg.allows("realtime", "team-a") and cfg.allows("realtime", "rt-jobs")
    assert not cfg.allows("realtime", "rt-jobs2") and not cfg.allows("exclusive-cpus", "x")
    assert cfg.allows("gpus", "ml-1") and not cfg.allows("gpus", "ml-12")
    assert cfg.allows("gpus", "b-prod") and not cfg.allows("gpus", "c-prod")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("reserved-cpus: 3", (3,)),
        ("reserved-cpus: [4, 2]", (2, 4)),
        ("reserved-cpus: []", ()),
        ("cgroup: {version: '1'}", 1),
        ("cgroup: {version: auto}", None),
        ("nri: {plugin-index: '05'}", "05"),
        ("metrics: {address: ''}", ""),
        ("metrics: {address: ':9810'}", ":9810"),
        ("rt-budget: 0", 0.0),
        ("rt-budget: 1", 1.0),
        ("gpu: {inventory: sysfs}", "sysfs"),
        ("log:\n", None),
        ("watch: {interval-seconds: 0}", 0.0),
        ("watch: {interval-seconds: 2.5}", 2.5),
        ("status: {socket: ''}", ""),
        ("status: {socket: /run/x//s.sock}", "/run/x/s.sock"),
    ],
)
def test_field_forms(text, expected):
    cfg = parse_config(text, SRC)
    got = {
        "reserved-cpus": cfg.reserved_cpus,
        "cgroup": cfg.cgroup.version,
        "nri": cfg.nri.plugin_index,
        "metrics": cfg.metrics.address,
        "rt-budget": cfg.rt_budget,
        "gpu": cfg.gpu.inventory,
        "log": None,
        "watch": cfg.watch.interval,
        "status": cfg.status.socket,
    }[text.split(":")[0]]
    assert got == expected


CONFIG_ERRORS = [
    ("enforcement: strict", "enforcement", "must be one of hard, soft, got strict"),
    ("enforcment: soft", "enforcment", "did you mean enforcement?"),
    ("annotation-prefix: Sla/x", "annotation-prefix", "DNS subdomain like sla.nri.io"),
    (
        "permissions: [realtime]",
        "permissions",
        "must be a mapping with keys realtime, exclusive-cpus, gpus, io-max, exceed-runtime-limits",
    ),
    (
        "pod-caps: {exclusive-cpus: -1}",
        "pod-caps.exclusive-cpus",
        "a count like 4 or a percentage of the node",
    ),
    ("pod-caps: {exclusive-cpus: 2.5}", "pod-caps.exclusive-cpus", "a count like 4"),
    # removed keys: one clear line, never silently ignored
    ("pod-caps: {gpus: 8}", "pod-caps.gpus", "was removed: the kubelet counts GPUs"),
    (
        "permissions: {ungranted-gpus: [lab]}",
        "permissions.ungranted-gpus",
        "was removed: nri-sla no longer gives GPUs to containers",
    ),
    (
        "gpu: {grant-cdi-kinds: [nvidia.com]}",
        "gpu.grant-cdi-kinds[0]",
        "must be a CDI kind (vendor/class) like nvidia.com/gpu, got nvidia.com",
    ),
    (
        "gpu: {grant-cdi-kinds: nvidia.com/gpu}",
        "gpu.grant-cdi-kinds",
        "must be a list of at most 32 CDI kind",
    ),
    (
        "gpu: {grant-resources: [nvidia.com/gpu, 'a b/c']}",
        "gpu.grant-resources[1]",
        "must be a resource name",
    ),
    ("gpu: {podresources-socket: kubelet.sock}", "gpu.podresources-socket", "absolute"),
    ("pod-caps: {exclusive-cpus: '150%'}", "pod-caps.exclusive-cpus", 'like "50%"'),
    ("pod-caps: {exclusive-cpus: 'half'}", "pod-caps.exclusive-cpus", "got half"),
    ("pod-caps: {rt-share: 1.5}", "pod-caps.rt-share", "fraction from 0 to 1"),
    ("pod-caps: {rt: 0.1}", "pod-caps.rt", "not a known field"),
    (
        "permissions: {realtime: default}",
        "permissions.realtime",
        "list of namespace names or globs",
    ),
    ("permissions: {realtime: [Default]}", "permissions.realtime[0]", "namespace name or glob"),
    ("permissions: {gpu: ['*']}", "permissions.gpu", "did you mean gpus?"),
    ("rt-budget: 1.5", "rt-budget", "fraction from 0 to 1", "1.5"),
    ("rt-budget: 50%", "rt-budget", "fraction from 0 to 1"),
    ("rt-budget: .nan", "rt-budget", "fraction from 0 to 1"),
    ("rt-budget: true", "rt-budget", "fraction from 0 to 1"),
    ("reserved-cpus: 1-0", "reserved-cpus", "reversed range"),
    ("reserved-cpus: all", "reserved-cpus", "CPU list like 0, 0-1 or 0,2"),
    ("reserved-cpus: {a: 1}", "reserved-cpus", 'CPU list like "0-1"'),
    ("gpu: {injection: nvidia}", "gpu.injection", "one of cdi, env, devices"),
    ("gpu: {inventory: inv.yaml}", "gpu.inventory", "one of auto, nvml, sysfs or an absolute path"),
    (
        "device-plugin: {resource-name: gpu}",
        "device-plugin.resource-name",
        "extended resource name like nvidia.com/gpu",
        "got gpu",
    ),
    (
        "device-plugin: {resource-name: kubernetes.io/gpu}",
        "device-plugin.resource-name",
        "outside kubernetes.io",
    ),
    (
        "device-plugin: {resource-name: NVIDIA.com/gpu}",
        "device-plugin.resource-name",
        "extended resource name",
    ),
    (
        "device-plugin: {resource-name: nvidia.com/-gpu}",
        "device-plugin.resource-name",
        "extended resource name",
    ),
    ("device-plugin: {socket-dir: device-plugins}", "device-plugin.socket-dir", "absolute path"),
    ("device-plugin: {socket: /x}", "device-plugin.socket", "not a known field"),
    ("cgroup: {root: sys/fs/cgroup}", "cgroup.root", "absolute path"),
    ("cgroup: {driver: cgroupv2}", "cgroup.driver", "one of auto, cgroupfs, systemd"),
    ("cgroup: {version: 3}", "cgroup.version", "one of auto, 1, 2, got 3"),
    ("cgroup: {version: true}", "cgroup.version", "one of auto, 1, 2"),
    ("nri: {socket: nri.sock}", "nri.socket", "absolute path"),
    ("nri: {plugin-name: 'a b'}", "nri.plugin-name", "letters, digits"),
    ("nri: {plugin-index: 100}", "nri.plugin-index", 'two digits from "00" to "99"'),
    ("nri: {plugin-index: '5'}", "nri.plugin-index", "two digits"),
    # containerd pads nothing: 7 (and 07, which YAML reads as 7) is not two digits.
    (
        "nri: {plugin-index: 7}",
        "nri.plugin-index",
        'got 7; an index below 10 must be quoted, e.g. "07"',
    ),
    ("nri: {plugin-index: 07}", "nri.plugin-index", "must be quoted"),
    ("gpu: {rescan-interval: 0.5}", "gpu.rescan-interval", "0 (never) or a number of seconds"),
    ("gpu: {rescan-interval: 1m}", "gpu.rescan-interval", "from 1 to 86400, got 1m"),
    ("gpu: {health-interval: -1}", "gpu.health-interval", "0 (never) or a number of seconds"),
    ("nri: {reconnect-max-seconds: 0}", "nri.reconnect-max-seconds", "above 0 and at most 3600"),
    ("nri: {reconnect-max-seconds: 30s}", "nri.reconnect-max-seconds", "number of seconds"),
    ("hook: {inject: yes}", "hook.inject", "true or false, got yes"),
    ("metrics: {address: 9810}", "metrics.address", "host:port like 127.0.0.1:9810"),
    ("metrics: {address: 'localhost:99999'}", "metrics.address", "port 1..65535"),
    (
        "watch: {interval-seconds: 0.5}",
        "watch.interval-seconds",
        "0 (off) or a number of seconds from 1 to 3600",
    ),
    ("watch: {interval-seconds: -1}", "watch.interval-seconds", "got -1"),
    ("watch: {interval-seconds: 30s}", "watch.interval-seconds", "number of seconds"),
    (
        "watch: {repair-backoff-max-seconds: 0}",
        "watch.repair-backoff-max-seconds",
        "from 1 to 86400",
    ),
    ("watch: {metrics-containers: 1.5}", "watch.metrics-containers", "count of containers"),
    ("watch: {interval: 30}", "watch.interval", "did you mean interval-seconds?"),
    ("status: {socket: status.sock}", "status.socket", "absolute path"),
    ("log: {format: xml}", "log.format", "one of text, json"),
    ("log: {level: INFO}", "log.level", "one of debug, info, warning, error"),
    ("log: {colour: true}", "log.colour", "not a known field", "format, level"),
    ("[1, 2]", "", "must be a YAML mapping of settings"),
    ("a: &x 1\nb: *x", "a", "anchor or alias"),
    ("nri: !!python/name:os.system {}", "nri", "explicit YAML tag"),
    ("log: {level: info, level: debug}", "log.level", "is given twice"),
]


@pytest.mark.parametrize(
    ("text", "field", "fragments"),
    [(t, f, fr) for t, f, *fr in CONFIG_ERRORS],
    ids=[row[0][:40] for row in CONFIG_ERRORS],
)
def test_config_errors(text, field, fragments):
    with pytest.raises(ConfigError) as info:
        parse_config(text, SRC)
    err = info.value
    assert err.source == SRC and err.field == field, str(err)
    assert str(err).startswith(f"{SRC}: {field} " if field else f"{SRC}: ")
    for fragment in fragments:
        assert fragment in str(err)


def test_all_config_errors_reported_at_once():
    with pytest.raises(ConfigError) as info:
        parse_config("log: {level: x}\nnri: {socket: y}\nfoo: 1\n", SRC)
    text = str(info.value)
    assert text.startswith(f"{SRC}: foo is not a known field")
    assert "; log.level must be one of" in text and "; nri.socket must be an absolute" in text


def test_allows_rejects_unknown_permission():
    with pytest.raises(ProgrammingError, match="unknown permission 'root'"):
        NodeConfig().allows("root", "default")


def test_load_config_paths(tmp_path, monkeypatch):
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError) as info:
        load_config(str(missing))
    assert str(info.value).startswith(f"{missing}: does not exist")
    # the default path missing means all defaults
    monkeypatch.setattr(loader, "DEFAULT_PATH", str(missing))
    assert load_config(None) == NodeConfig()
    good = tmp_path / "config.yaml"
    good.write_text("enforcement: soft\n")
    monkeypatch.setattr(loader, "DEFAULT_PATH", str(good))
    assert load_config().enforcement == "soft" and load_config().source == str(good)
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b"enforcement: \xff\n")
    with pytest.raises(ConfigError, match="cannot be read"):
        load_config(str(bad))
    with pytest.raises(ConfigError, match="cannot be read"):
        load_config(str(tmp_path))  # a directory
    big = tmp_path / "big.yaml"
    big.write_text("#" * (2 << 20))
    with pytest.raises(ConfigError, match="at most 1048576 bytes"):
        load_config(str(big))


def test_docs_example_parses():
    text = (ROOT / "docs" / "config.md").read_text()
    block = text.split("## Example", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]
    cfg = parse_config(block, "docs/config.md")
    assert cfg.allows("gpus", "ml-team") and not cfg.allows("gpus", "web")
    assert cfg.allows("realtime", "latency-critical") and cfg.reserved_cpus == (0, 1)
    assert cfg.cgroup.driver == "systemd" and cfg.log.format == "json"
    assert cfg.pod_caps.exclusive_cpus.of(64) == 48


@settings(max_examples=100, deadline=None)
@given(
    st.one_of(
        st.text(max_size=200),
        st.dictionaries(
            st.sampled_from(
                [
                    "enforcement",
                    "rt-budget",
                    "reserved-cpus",
                    "nri",
                    "log",
                    "permissions",
                    "pod-caps",
                    "metrics",
                    "cgroup",
                    "gpu",
                    "x",
                ]
            ),
            st.one_of(
                st.none(),
                st.booleans(),
                st.integers(),
                st.floats(),
                st.text(max_size=20),
                st.dictionaries(st.text(max_size=12), st.text(max_size=12), max_size=3),
            ),
            max_size=5,
        ).map(yaml.safe_dump),
    )
)
def test_config_fuzz_only_config_error(text):
    try:
        cfg = parse_config(text, SRC)
    except ConfigError as exc:
        assert str(exc).startswith(SRC + ": ")
    else:
        assert isinstance(cfg, NodeConfig) and cfg.enforcement in ("hard", "soft")


def test_reload_applies_the_live_keys_and_names_the_others():
    from nri_plugin.plugin.config_reload import plan_reload

    old = parse_config("permissions: {gpus: [a]}\nwatch: {interval-seconds: 30}\n", "old.yaml")
    new = parse_config(
        "enforcement: soft\npermissions: {gpus: [b]}\nlog: {level: debug}\n"
        "watch: {interval-seconds: 5}\nnri: {socket: /x.sock}\n",
        "new.yaml",
    )
    done = plan_reload(old, new)
    assert done.applied == ("enforcement", "permissions.gpus", "log.level")
    assert done.need_restart == ("nri.socket", "watch.interval-seconds")
    assert (done.config.enforcement, done.config.permissions.gpus) == ("soft", ("b",))
    assert done.config.log.level == "debug" and done.config.source == "new.yaml"
    assert (done.config.nri.socket, done.config.watch.interval) == (old.nri.socket, 30)
    assert plan_reload(old, old).applied == plan_reload(old, old).need_restart == ()


def test_reload_follows_each_keys_declaration():
    # The live set is what the fields declare, not a list kept beside them: a key that
    # declares `live` is applied, one that does not waits for a restart, whatever its section.
    from nri_plugin.config.schema import LIVE_KEYS
    from nri_plugin.plugin import config_reload
    from nri_plugin.value import replace

    assert {"enforcement", "permissions.realtime", "pod-caps.rt-share", "log.level"} <= LIVE_KEYS
    assert "watch.interval-seconds" not in LIVE_KEYS and "rt-budget" not in LIVE_KEYS
    old = parse_config("", "old.yaml")
    new = parse_config("pod-caps: {rt-share: 0.2}\nwatch: {metrics-containers: 5}\n", "new.yaml")
    half_live = (LIVE_KEYS | {"watch.metrics-containers"}) - {"pod-caps.rt-share"}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(config_reload, "LIVE_KEYS", half_live)
        done = config_reload.plan_reload(old, new)
    assert done.applied == ("watch.metrics-containers",)
    assert done.need_restart == ("pod-caps.rt-share",)
    assert done.config.watch == replace(old.watch, metrics_containers=5)
    assert done.config.pod_caps == old.pod_caps


def test_a_keys_declaration_is_frozen():
    from nri_plugin.config.schema import KEYS

    spec = KEYS["log.level"]
    with pytest.raises(AttributeError, match="frozen"):
        spec.live = False
    assert spec.live and repr(spec) == "Key('', convert, live=True)"


def test_every_field_of_a_section_is_a_key():
    # A field without its key's declaration could never be set from the file.
    from nri_plugin.config.schema import KEY_ATTRIBUTES, SECTIONS
    from nri_plugin.value import fields

    declared = set(KEY_ATTRIBUTES.values())
    for section, (cls, _) in SECTIONS.items():
        for f in fields(cls):
            assert (section.replace("-", "_"), f.name) in declared, f"{section}.{f.name}"
    for f in fields(NodeConfig):
        assert (
            (f.name,) in declared or f.name.replace("_", "-") in SECTIONS or f.name == "source"
        ), f.name
