"""config.toml.example (containerd 2.x, top level) and packaging/containerd's 1.7 variant
parse and carry the keys nri-sla relies on, at the table paths of each config version."""

import tomllib

import pytest
import yaml

NRI = "io.containerd.nri.v1.nri"
# Exactly the keys nri-sla reads; never the records it writes (applied, warnings).
ANNOTATIONS = [
    "sla.nri.io/pod",
    "sla.nri.io/container.*",
    "sla.nri.io/enforcement",
    "io.kubernetes.sla/enforcement-mode",
]
BASE_SPEC = "/etc/nri-sla/base-runtime-spec.json"

# file -> (config version, CRI plugin id holding the runtime handlers)
FILES = {
    "config.toml.example": (3, "io.containerd.cri.v1.runtime"),
    "config-1.7.toml.example": (2, "io.containerd.grpc.v1.cri"),
}


def load(pk, name):
    where = pk.REPO if name == "config.toml.example" else pk.PACKAGING / "containerd"
    with open(where / name, "rb") as f:
        return tomllib.load(f)


@pytest.mark.parametrize("name", sorted(FILES))
def test_nri_enabled_with_paths_and_timeouts(pk, name):
    doc = load(pk, name)
    version, cri = FILES[name]
    assert doc["version"] == version
    nri = doc["plugins"][NRI]
    assert nri["disable"] is False and nri["disable_connections"] is False
    assert nri["socket_path"] == "/var/run/nri/nri.sock"
    assert nri["plugin_path"] == "/opt/nri/plugins"
    assert nri["plugin_config_path"] == "/etc/nri/conf.d"
    assert nri["plugin_registration_timeout"] == "5s"
    assert nri["plugin_request_timeout"] == "2s"
    # every other plugin table belongs to the CRI plugin of this config version
    assert set(doc["plugins"]) == {NRI, cri}


@pytest.mark.parametrize("name", sorted(FILES))
def test_runc_handler_passes_annotations_and_hook_spec(pk, name):
    doc = load(pk, name)
    _, cri = FILES[name]
    runc = doc["plugins"][cri]["containerd"]["runtimes"]["runc"]
    assert runc["runtime_type"] == "io.containerd.runc.v2"
    assert runc["pod_annotations"] == ANNOTATIONS
    assert runc["base_runtime_spec"] == BASE_SPEC


def test_fail_closed_validator_only_in_2x(pk):
    validator = load(pk, "config.toml.example")["plugins"][NRI]["default_validator"]
    assert validator == {
        "enable": True,
        "required_plugins": ["nri-sla"],
        "tolerate_missing_plugins_annotation": "tolerate-missing-nri-plugins.noderesource.dev",
    }
    assert "default_validator" not in load(pk, "config-1.7.toml.example")["plugins"][NRI]


def test_required_plugin_name_matches_the_plugin(pk):
    # the validator matches the registered plugin name, which the pre-launch wrapper's
    # file name (NN-name) and the systemd/DaemonSet default both give as nri-sla
    validator = load(pk, "config.toml.example")["plugins"][NRI]["default_validator"]
    (wrapper,) = [p for p in (pk.PACKAGING / "nri").iterdir() if p.suffix != ".conf"]
    assert validator["required_plugins"] == [wrapper.name.split("-", 1)[1]]


def test_daemonset_tolerates_the_configured_annotation(pk):
    # the nri-sla pod itself must start while nri-sla is not registered yet
    key = load(pk, "config.toml.example")["plugins"][NRI]["default_validator"][
        "tolerate_missing_plugins_annotation"
    ]
    docs = yaml.safe_load_all((pk.PACKAGING / "kubernetes" / "daemonset.yaml").read_text())
    (ds,) = [d for d in docs if d and d["kind"] == "DaemonSet"]
    annotations = ds["spec"]["template"]["metadata"]["annotations"]
    assert annotations[key] == "true"
    assert annotations["tolerate-missing-plugins.nri.io"] == "true"  # containerd 2.2


@pytest.mark.parametrize("name", sorted(FILES))
def test_pass_through_never_matches_what_nri_sla_writes(pk, name):
    # containerd matches pod_annotations with Go's filepath.Match: '*' stops at '/'.
    from fnmatch import fnmatchcase

    _, cri = FILES[name]
    patterns = load(pk, name)["plugins"][cri]["containerd"]["runtimes"]["runc"]["pod_annotations"]

    def passes(key):
        return any(fnmatchcase(key, p) and "/" not in key[p.rfind("/") + 1 :] for p in patterns)

    for read in (
        "sla.nri.io/pod",
        "sla.nri.io/container.web",
        "sla.nri.io/enforcement",
        "io.kubernetes.sla/enforcement-mode",
    ):
        assert passes(read), read
    for written in (
        "sla.nri.io/applied",
        "sla.nri.io/warnings",
        "sla.nri.io/other",
        "io.kubernetes.sla/other",
    ):
        assert not passes(written), written


def test_the_hook_example_passes_the_same_keys(pk):
    doc = tomllib.loads((pk.REPO / "hooks" / "containerd-config.toml.example").read_text())
    runc = doc["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]["runc"]
    assert runc["pod_annotations"] == ANNOTATIONS
