"""packaging/crio: the CRI-O drop-ins parse as TOML and carry exactly the keys nri-sla
relies on, under the table paths and key names of CRI-O's own config (pkg/config and
internal/config/nri of the 1.36 tag); the hooks.d file is where CRI-O looks by default,
and the package installs each file at the path docs/install.md names."""

import json
import re
import tomllib

from nri_plugin.hookspec import hooks_d_document

DROP_IN_DIR = "/etc/crio/crio.conf.d"
NRI_FILE = "50-nri-sla.conf"
FAIL_CLOSED_FILE = "51-nri-sla-fail-closed.conf"
# CRI-O's default hooks_dir (go.podman.io/common/pkg/hooks DefaultDir)
HOOKS_DIR = "/usr/share/containers/oci/hooks.d"


def load(pk, name):
    with open(pk.PACKAGING / "crio" / name, "rb") as f:
        return tomllib.load(f)


def test_the_drop_ins_are_all_there_is(pk):
    assert sorted(p.name for p in (pk.PACKAGING / "crio").iterdir()) == [NRI_FILE, FAIL_CLOSED_FILE]


def test_nri_on_with_the_plugins_socket_and_timeouts(pk):
    from nri_plugin.nri.stub import DEFAULT_SOCKET

    doc = load(pk, NRI_FILE)
    assert list(doc) == ["crio"] and list(doc["crio"]) == ["nri"]
    assert doc["crio"]["nri"] == {
        "enable_nri": True,
        "nri_listen": DEFAULT_SOCKET,
        "nri_disable_connections": False,
        "nri_plugin_registration_timeout": "5s",
        "nri_plugin_request_timeout": "2s",
    }


def test_fail_closed_validator_requires_the_plugin_by_name(pk):
    doc = load(pk, FAIL_CLOSED_FILE)
    assert doc == {
        "crio": {
            "nri": {
                "default_validator": {
                    "nri_enable_default_validator": True,
                    "nri_validator_required_plugins": ["nri-sla"],
                    "nri_validator_tolerate_missing_plugins_annotation": (
                        "tolerate-missing-nri-plugins.noderesource.dev"
                    ),
                }
            }
        }
    }
    # the same name the plugin registers with (the pre-launch wrapper's NN-name)
    (wrapper,) = [p for p in (pk.PACKAGING / "nri").iterdir() if p.suffix != ".conf"]
    required = doc["crio"]["nri"]["default_validator"]["nri_validator_required_plugins"]
    assert required == [wrapper.name.split("-", 1)[1]]


def test_each_file_names_where_it_is_installed(pk):
    for name in (NRI_FILE, FAIL_CLOSED_FILE):
        first = (pk.PACKAGING / "crio" / name).read_text().splitlines()[0]
        assert first.startswith(f"# {DROP_IN_DIR}/{name}:")


def test_hooks_d_file_runs_the_hook_for_sla_pods(pk):
    doc = json.loads((pk.REPO / "hooks" / "nri-sla-hook.json").read_text())
    assert doc == hooks_d_document("prestart")
    (pattern,) = doc["when"]["annotations"]
    assert re.search(pattern, "sla.nri.io/pod") and re.search(pattern, "sla.nri.io/container.a")
    assert not re.search(pattern, "sla.nri.io/applied")


def test_install_doc_and_package_name_the_installed_paths(pk):
    install = (pk.REPO / "docs" / "install.md").read_text()
    build = (pk.PACKAGING / "deb" / "build.sh").read_text()
    for name in (NRI_FILE, FAIL_CLOSED_FILE):
        assert f"{DROP_IN_DIR}/{name}" in install
        assert f"/usr/share/nri-sla/crio/{name}" in install
    assert "packaging/crio/$dropin" in build and "/usr/share/nri-sla/crio/$dropin" in build
    assert all(name in build for name in (NRI_FILE, FAIL_CLOSED_FILE))
    assert f"{HOOKS_DIR}/nri-sla-hook.json" in install
    assert f"{HOOKS_DIR}/nri-sla-hook.json" in build
