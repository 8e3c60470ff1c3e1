"""Do no harm: installing nri-sla gives back the same node, plus nri-sla.

A private containerd starts from a kubeadm-style main config (a registry config_path, its
own sandbox image, runc's BinaryName, pod_annotations the node passes on already, a
second runtime handler; on 1.7 NRI off as `containerd config default` has it). Then, for
each install route (the Debian package's steps; the DaemonSet's host-hook followed by
`containerd-config --write` run from what it installed on the node):

* `containerd config dump` before and after differs only in the keys docs/install.md
  lists as nri-sla's;
* a pod without an SLA gets the same OCI spec as before (root, capabilities, rlimits,
  mounts, env, devices, everything) apart from nri-sla's hook, with the plugin connected
  and with it stopped;
* after removal the dump is the one from before.

The steps are run through whatever this checkout ships: where the repository carries a
spec template (hooks/base-runtime-spec.json, as older versions did), it is installed as
those versions' package and image did.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import tomlkit

from nri_plugin.hookspec import is_sla_hook
from tests.e2e.test_sla_containerd import PLUGIN, write_node_config
from tests.support.toml_keys import flat

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
TEMPLATE = REPO / "hooks" / "base-runtime-spec.json"  # shipped by older versions only
NRI_SLA = Path(sys.executable).with_name("nri-sla")
DOCS_SECTION = "### The containerd keys nri-sla sets"


def documented_keys() -> set[tuple[str, ...]]:
    """The key paths docs/install.md lists as nri-sla's, e.g.
    `plugins."io.containerd.nri.v1.nri".disable` -> ("plugins", "io...nri", "disable")."""
    text = (REPO / "docs" / "install.md").read_text()
    assert DOCS_SECTION in text, f"docs/install.md has no {DOCS_SECTION!r}"
    section = text.split(DOCS_SECTION, 1)[1].split("\n#", 1)[0]
    keys = set()
    for match in re.finditer(r'`(plugins\."([^"]+)"((?:\.\w+)+)|imports)`', section):
        if match.group(1) == "imports":
            keys.add(("imports",))
        else:
            keys.add(("plugins", match.group(2), *match.group(3).lstrip(".").split(".")))
    return keys


def cri_plugins(major: int) -> tuple[str, str]:
    """(runtime plugin, image plugin) of the config version the harness writes."""
    if major >= 2:
        return "io.containerd.cri.v1.runtime", "io.containerd.cri.v1.images"
    return "io.containerd.grpc.v1.cri", "io.containerd.grpc.v1.cri"


def kubeadm_config(cluster) -> None:
    """The harness's config made a kubeadm node's, before any nri-sla."""
    path = cluster.base / "config.toml"
    doc = tomlkit.parse(path.read_text())
    runtime, images = cri_plugins(cluster.major)
    doc["imports"] = [str(cluster.base / "conf.d" / "*.toml")]
    plugins = doc["plugins"]
    handlers = plugins[runtime]["containerd"]["runtimes"]
    runc = handlers["runc"]
    runc["pod_annotations"] = ["monitoring.example.com/*"]  # the node's, no SLA keys
    runc["privileged_without_host_devices"] = True
    second = tomlkit.table()
    second["runtime_type"] = "io.containerd.runc.v2"
    second["pod_annotations"] = ["sandboxed.example.com/*"]
    second["options"] = dict(runc["options"])
    handlers["sandboxed"] = second
    plugins[runtime]["enable_unprivileged_ports"] = True
    plugins[runtime]["max_container_log_line_size"] = 32768
    registry = tomlkit.table()
    registry["config_path"] = str(cluster.base / "certs.d")
    plugins[images]["registry"] = registry
    if cluster.major < 2:
        plugins["io.containerd.nri.v1.nri"]["disable"] = True  # 1.7's default
    path.write_text(tomlkit.dumps(doc))
    (cluster.base / "conf.d").mkdir(exist_ok=True)
    cluster.kill(signal.SIGTERM)
    cluster.start()


def dump(cluster) -> dict[str, Any]:
    out = subprocess.run(
        [
            str(cluster.bins.containerd),
            "--config",
            str(cluster.base / "config.toml"),
            "config",
            "dump",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    return tomllib.loads(out)


def plain_spec(cluster, name: str) -> dict[str, Any]:
    """The OCI spec runc got for a pod without an SLA, its ids made placeholders."""
    files = cluster.pod_files(name, {})
    uid = json.loads(files.pod.read_text())["metadata"]["uid"]
    pod_id = cluster.run_sandbox(files)
    cid = cluster.create_container(pod_id, files)
    cluster.crictl("start", cid)
    spec = cluster.inspect(pod_id, cid).inspect["info"]["runtimeSpec"]
    cluster.remove_pod(name)
    text = json.dumps(spec)
    for value, placeholder in ((pod_id, "POD"), (cid, "CTR"), (uid, "UID")):
        text = text.replace(value, placeholder)
    # the namespaces joined are the sandbox process's
    return json.loads(re.sub(r"/proc/\d+/ns/", "/proc/SANDBOX/ns/", text))


def run(argv: list[str], **kwargs) -> str:
    res = subprocess.run(argv, capture_output=True, text=True, timeout=300, **kwargs)
    assert res.returncode == 0, f"{argv}: {res.returncode}\n{res.stdout}\n{res.stderr}"
    print("evidence:", " ".join(argv[:2]), res.stdout.strip(), res.stderr.strip())
    return res.stdout


def install(cluster, route: str) -> list[str]:
    """The route's install steps; returns the nri-sla command line the node has."""
    version = f"{cluster.major}.{cluster.minor}"
    spec = cluster.base / "etc-nri-sla" / "base-runtime-spec.json"
    env = {"PATH": f"{cluster.bins.containerd.parent}:/usr/bin:/bin"}
    common = [
        "--containerd-version",
        version,
        "--main-config",
        str(cluster.base / "config.toml"),
        "--write",
        str(cluster.base / "conf.d" / "nri-sla.toml"),
        "--base-runtime-spec",
        str(spec),
    ]
    if route == "deb":
        if TEMPLATE.exists():  # what the package installed as a conffile
            spec.parent.mkdir(parents=True, exist_ok=True)
            spec.write_text(TEMPLATE.read_text())
        node_binary = [str(NRI_SLA)]
    else:
        host = cluster.base / "host"
        (host / "opt/nri-sla").mkdir(parents=True)
        (host / "etc/nri-sla").mkdir(parents=True)
        image_args = ["--base-spec-template", str(TEMPLATE)] if TEMPLATE.exists() else []
        run(
            [
                str(NRI_SLA),
                "host-hook",
                "--host-root",
                str(host),
                "--config",
                str(write_node_config(cluster)),
                *image_args,
            ]
        )
        if TEMPLATE.exists():  # where that version's host-hook put the spec
            spec.parent.mkdir(parents=True, exist_ok=True)
            spec.write_text((host / "etc/nri-sla/base-runtime-spec.json").read_text())
        node_binary = [str(host / "opt/nri-sla/bin/nri-sla")]
    run([*node_binary, "containerd-config", *common], env=env)
    return [*node_binary, "containerd-config", *common]


def without_hooks(spec: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    spec = dict(spec)
    hooks = spec.pop("hooks", {}) or {}
    return spec, [h for stage in hooks.values() for h in stage]


@pytest.mark.parametrize("route", ["deb", "daemonset"])
def test_install_and_removal_leave_the_node_as_it_was(cluster, plugins, sla_plugin_argv, route):
    kubeadm_config(cluster)
    before = dump(cluster)
    spec_before = plain_spec(cluster, "plain")

    command = install(cluster, route)
    cluster.kill(signal.SIGTERM)
    cluster.start()
    after = dump(cluster)
    changed = {
        k for k in set(flat(before)) | set(flat(after)) if flat(before).get(k) != flat(after).get(k)
    }
    print("evidence: keys the install changed:", sorted(changed))
    assert changed <= documented_keys(), changed - documented_keys()
    runtime, _ = cri_plugins(cluster.major)
    runc = ("plugins", runtime, "containerd", "runtimes", "runc")
    # what the node passed on still passes, and nothing else of the node moved
    assert flat(after)[(*runc, "pod_annotations")][:1] == ["monitoring.example.com/*"]

    config = write_node_config(cluster)
    plugin = plugins.start(
        [
            *sla_plugin_argv,
            "--config",
            str(config),
            "--socket",
            str(cluster.nri_sock),
            "--name",
            "nri-sla",
            "--index",
            "50",
            "--metrics-address",
            "",
        ],
        "nri-sla",
    )
    cluster.wait_plugin_synchronized(PLUGIN)
    spec_connected = plain_spec(cluster, "plain")
    plugin.stop()
    spec_stopped = plain_spec(cluster, "plain")
    for spec in (spec_connected, spec_stopped):
        rest, hooks = without_hooks(spec)
        expected, _ = without_hooks(spec_before)
        differing = sorted(k for k in set(rest) | set(expected) if rest.get(k) != expected.get(k))
        assert rest == expected, f"the OCI spec differs in {differing}"
        assert all(is_sla_hook(h["path"], h.get("args", [])) for h in hooks), hooks

    remove = [
        command[0],
        "containerd-config",
        "--remove",
        *[
            a
            for a in command[2:]
            if a != "--containerd-version" and not re.fullmatch(r"\d+\.\d+", a)
        ],
    ]
    run(remove)
    cluster.kill(signal.SIGTERM)
    cluster.start()
    assert dump(cluster) == before
    assert not (cluster.base / "etc-nri-sla" / "base-runtime-spec.json").exists()
