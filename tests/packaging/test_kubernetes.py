"""packaging/kubernetes: the plain DaemonSet manifest (what `helm template` renders with
the chart's default values: tests/packaging/test_chart.py checks that) is well-formed,
its containers' arguments are ones nri-sla accepts, and the host-hook initContainer's
command installs the hook on a scratch host root.
"""

import argparse
import json
import re
import subprocess
from pathlib import Path

import pytest

from tests.support.helm import NAMESPACE, by_kind, config_value, node_config, pod_spec, render
from tests.support.helm import manifest as read_manifest
from tests.support.installed import cache_tag, cold_hook_run, files_of, uncompiled

# the namespaced kinds the chart renders (the others are cluster-wide)
NAMESPACED = {"ConfigMap", "DaemonSet", "ServiceAccount", "NetworkPolicy"}


@pytest.fixture(scope="module")
def manifest() -> list[dict]:
    return read_manifest()


# -- plain manifest ----------------------------------------------------------------------
def test_objects_and_metadata(manifest):
    kinds = sorted(d["kind"] for d in manifest)
    # the ClusterRole and its binding: Events (events.enabled, on by default)
    assert kinds == [
        "ClusterRole",
        "ClusterRoleBinding",
        "ConfigMap",
        "DaemonSet",
        "ServiceAccount",
    ]
    for doc in manifest:
        assert (doc["metadata"].get("namespace") == NAMESPACE) == (doc["kind"] in NAMESPACED)
        assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", doc["metadata"]["name"])
        assert doc["metadata"]["labels"]["app.kubernetes.io/name"] == "nri-sla"


def test_daemonset_pod_spec(manifest):
    ds = by_kind(manifest, "DaemonSet")
    spec = ds["spec"]
    pod = spec["template"]["spec"]
    labels = spec["template"]["metadata"]["labels"]
    assert spec["selector"]["matchLabels"].items() <= labels.items()
    annotations = spec["template"]["metadata"]["annotations"]
    assert annotations["tolerate-missing-plugins.nri.io"] == "true"
    assert annotations["tolerate-missing-nri-plugins.noderesource.dev"] == "true"
    assert pod["priorityClassName"] == "system-node-critical"
    assert {"operator": "Exists"} in pod["tolerations"]
    assert pod["serviceAccountName"] == by_kind(manifest, "ServiceAccount")["metadata"]["name"]
    assert not pod.get("hostNetwork") and not pod.get("hostPID")
    (ctr,) = pod["containers"]
    assert set(ctr) <= {
        "name",
        "image",
        "imagePullPolicy",
        "args",
        "env",
        "ports",
        "readinessProbe",
        "livenessProbe",
        "resources",
        "securityContext",
        "volumeMounts",
    }
    assert ctr["securityContext"] == {"privileged": True}
    res = ctr["resources"]
    assert res["requests"]["cpu"] and res["requests"]["memory"] and res["limits"]["memory"]


def test_volumes_mounts_and_host_paths(manifest):
    ds = by_kind(manifest, "DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    (ctr,) = pod["containers"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m for m in ctr["volumeMounts"]}
    assert all(m["name"] in volumes for m in ctr["volumeMounts"])
    assert len(volumes) == len(pod["volumes"])  # unique names
    host = {
        v["hostPath"]["path"]: (v["name"], v["hostPath"]["type"])
        for v in volumes.values()
        if "hostPath" in v
    }
    # nothing of the host's /etc or /opt: the host hook is opt-in (hostHook.enabled)
    assert set(host) == {
        "/var/run/nri",
        "/sys",
        "/sys/fs/cgroup",
        "/dev",
        "/var/lib/nri-sla",
        "/var/lib/kubelet/pod-resources",
    }
    assert "initContainers" not in pod
    # The kubelet's PodResources socket (gpu.podresources-socket): connect() to a unix
    # socket works through a read-only bind mount (only the superblock's flag counts).
    assert mounts["/var/lib/kubelet/pod-resources"]["readOnly"] is True
    assert mounts["/sys"].get("readOnly") is True
    assert not mounts["/sys/fs/cgroup"].get("readOnly")  # cgroup writes
    assert not mounts["/var/run/nri"].get("readOnly")  # connect() needs write access
    assert host["/var/run/nri"][1] == "DirectoryOrCreate"
    # The record key lives on the host: it outlives the pod, and the hook reads it there.
    assert host["/var/lib/nri-sla"][1] == "DirectoryOrCreate"
    assert not mounts["/var/lib/nri-sla"].get("readOnly")  # created at the first start
    cm_name = by_kind(manifest, "ConfigMap")["metadata"]["name"]
    assert volumes["config"]["configMap"]["name"] == cm_name
    assert mounts["/etc/nri-sla"]["readOnly"] is True


def test_host_hook_init_container_installs_the_configmaps_policy(tmp_path, pk):
    """The initContainer (hostHook.enabled) runs `nri-sla host-hook` from the plugin's
    image, with the same ConfigMap mounted where the plugin reads it; run here against a
    scratch host root, the hook it installs runs on its own (its own interpreter copy)
    with that config."""
    from nri_plugin.commands import host_hook
    from nri_plugin.commands.hostinstall import install

    docs = render({"hostHook": {"enabled": True}})
    pod = pod_spec(docs)
    (init,) = pod["initContainers"]
    (ctr,) = pod["containers"]
    assert init["image"] == ctr["image"]
    assert init["command"] == ["nri-sla", "host-hook"]
    parser = argparse.ArgumentParser(exit_on_error=False)
    host_hook.add_arguments(parser)
    args = parser.parse_args(init["args"])
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in init["volumeMounts"]}
    plugin_mounts = {m["mountPath"]: m["name"] for m in ctr["volumeMounts"]}
    # one policy: the file the initContainer installs is the one the plugin reads
    assert args.config == "/etc/nri-sla/config.yaml"
    assert mounts["/etc/nri-sla"] == plugin_mounts["/etc/nri-sla"] == "config"
    for host_dir in ("/opt/nri-sla", "/etc/nri-sla"):
        volume = volumes[mounts[args.host_root + host_dir]]
        assert volume["hostPath"] == {"path": host_dir, "type": "DirectoryOrCreate"}
    # no spec template in the image: the base spec is made on the node, from its own
    assert "base-runtime-spec" not in (pk.REPO / "Dockerfile").read_text()

    configmap = tmp_path / "configmap" / "config.yaml"
    configmap.parent.mkdir()
    configmap.write_text(by_kind(docs, "ConfigMap")["data"]["config.yaml"])
    node_config(configmap.read_text())
    host = tmp_path / "host"
    (host / "opt/nri-sla").mkdir(parents=True)  # the DaemonSet's hostPath mount
    done = install(host, str(configmap))
    assert done.config.read_text() == configmap.read_text()
    assert not (host / "etc/nri-sla/base-runtime-spec.json").exists()
    version = subprocess.run(
        [str(done.binary), "version"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert version.returncode == 0 and version.stdout.startswith("nri-sla "), version.stderr
    # what runs on the host: the hook and containerd-config, not the plugin's protocols
    dropin = subprocess.run(
        [
            str(done.binary),
            "containerd-config",
            "--containerd-version",
            "2.3",
            "--main-config",
            str(tmp_path / "absent.toml"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert dropin.returncode == 0 and "version = 4" in dropin.stdout, dropin.stderr
    site = {p.name.split("-")[0] for p in (done.runtime / "site").iterdir()}
    assert {"nri_plugin", "yaml", "tomlkit"} <= site
    assert not site & {"grpc", "google", "uvloop", "prometheus_client", "urllib3"}, site
    size = sum(
        f.stat().st_size for f in done.runtime.rglob("*") if f.is_file() and not f.is_symlink()
    )
    print(f"evidence: host-hook copy {size / 2**20:.1f} MiB")
    # the copied interpreter runs from the copy, not from the image's prefix
    where = subprocess.run(
        [str(done.runtime / "bin" / "python3"), "-I", "-S", "-c", "import os; print(os.__file__)"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"LD_LIBRARY_PATH": str(done.runtime / "lib")},
    )
    assert where.stdout.startswith(str(done.runtime)), where
    # a second start replaces the runtime and leaves one
    again = install(host, str(configmap))
    assert again.runtime != done.runtime
    assert [p.name for p in (host / "opt/nri-sla").glob("runtime-*")] == [again.runtime.name]
    assert (host / "opt/nri-sla/current").readlink() == Path(again.runtime.name)


def test_host_hook_copy_is_byte_compiled_and_a_cold_hook_run_writes_nothing(tmp_path):
    """Every module of the copy on the host (its stdlib and site) has a current .pyc of
    the copied interpreter, made before `current` moved to it; a cold hook run from it,
    with that interpreter as the launcher runs it, imports the cold path and leaves the
    copy as it found it (no __pycache__ written at a container's start)."""
    from nri_plugin.commands.hostinstall import install

    config = tmp_path / "config.yaml"
    config.write_text("enforcement: hard\n")
    host = tmp_path / "host"
    (host / "opt/nri-sla").mkdir(parents=True)
    done = install(host, str(config))
    python = str(done.runtime / "bin" / "python3")
    env = {"LD_LIBRARY_PATH": str(done.runtime / "lib"), "PATH": "/usr/bin:/bin"}
    tag = cache_tag(python, env)
    assert uncompiled(done.runtime, tag, scripts=("nri-sla.py",)) == []
    site = done.runtime / "site"
    assert len(list(site.rglob(f"*.{tag}.pyc"))) > 100
    before = files_of(done.runtime)
    work = tmp_path / "work"
    work.mkdir()
    loaded = cold_hook_run(python, site, work, env)
    assert "nri_plugin.plan.planner" in loaded
    assert files_of(done.runtime) == before


def test_host_hook_compile_failure_is_one_failure_and_leaves_no_runtime(tmp_path, monkeypatch):
    """A copy its own interpreter cannot compile is not made current: the initContainer
    fails (InternalFailure, the compiler's words) and the half-made runtime is gone."""
    from nri_plugin.commands import hostinstall
    from nri_plugin.errors import InternalFailure

    config = tmp_path / "config.yaml"
    config.write_text("enforcement: hard\n")
    host = tmp_path / "host"
    (host / "opt/nri-sla").mkdir(parents=True)
    copy = hostinstall._copy_runtime

    def broken_copy(target):
        copy(target)
        (target / "site" / "broken.py").write_text("def (:\n")

    monkeypatch.setattr(hostinstall, "_copy_runtime", broken_copy)
    with pytest.raises(InternalFailure, match=r"byte-compiling .* failed .*broken\.py"):
        hostinstall.install(host, str(config))
    assert list((host / "opt/nri-sla").iterdir()) == []


def test_host_hook_refuses_a_config_that_does_not_validate(tmp_path, pk):
    from nri_plugin.commands.hostinstall import install
    from nri_plugin.config.loader import ConfigError

    bad = tmp_path / "config.yaml"
    bad.write_text("enforcement: sometimes\n")
    (tmp_path / "host/opt/nri-sla").mkdir(parents=True)
    with pytest.raises(ConfigError, match="enforcement"):
        install(tmp_path / "host", str(bad))
    assert list((tmp_path / "host/opt/nri-sla").iterdir()) == []


@pytest.mark.parametrize("host", ["absent", "file"])
def test_host_hook_command_failures_are_one_line(tmp_path, pk, host):
    # the host's directory not mounted (absent), or not usable (a file where it must be)
    if host == "file":
        (tmp_path / "host").write_text("")
    res = subprocess.run(
        [
            str(pk.VENV_NRI_SLA),
            "host-hook",
            "--host-root",
            str(tmp_path / "host"),
            "--config",
            "/dev/null",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 4, res.stderr
    assert res.stderr == (
        f"nri-sla host-hook: cannot install under {tmp_path}/host: "
        f"{tmp_path}/host/opt/nri-sla: No such file or directory (the "
        f"host's /opt/nri-sla and /etc/nri-sla must be mounted there, "
        f"writable)\n"
    )
    assert not (tmp_path / "host").is_dir()


def test_probes_use_the_health_port_not_the_metrics_port(manifest):
    """The kubelet probes the probe listener (nri_plugin.ops.health), which a connection flood
    on the metrics port cannot starve; no hostNetwork, so it probes the pod IP and the
    listener must bind every interface."""
    pod = by_kind(manifest, "DaemonSet")["spec"]["template"]["spec"]
    (ctr,) = pod["containers"]
    ports = {p["name"]: p["containerPort"] for p in ctr["ports"]}
    assert all(len(name) <= 15 for name in ports)
    assert ctr["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    assert ctr["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert not pod.get("hostNetwork")
    i = ctr["args"].index("--metrics-address")
    assert ctr["args"][i + 1] == f":{ports['metrics']}"
    i = ctr["args"].index("--health-address")
    assert ctr["args"][i + 1] == f":{ports['health']}" and ports["health"] != ports["metrics"]


def test_args_are_accepted_by_nri_sla_run(manifest):
    from nri_plugin.commands import run

    (ctr,) = by_kind(manifest, "DaemonSet")["spec"]["template"]["spec"]["containers"]
    parser = argparse.ArgumentParser(exit_on_error=False)
    run.add_arguments(parser)
    args = parser.parse_args(ctr["args"])
    assert args.config == "/etc/nri-sla/config.yaml"
    assert args.metrics_address == ":9810" and args.health_address == ":9811"


def test_configmap_is_a_valid_node_config(manifest):
    text = by_kind(manifest, "ConfigMap")["data"]["config.yaml"]
    config = node_config(text)  # raises ConfigError when invalid
    assert config.enforcement == "hard" and config.log.format == "json"
    assert config_value(config, "events.enabled") is True


# -- Dockerfile ------------------------------------------------------------------------------
def test_dockerfile(pk):
    text = (pk.REPO / "Dockerfile").read_text()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
    froms = [ln.split()[1] for ln in lines if ln.upper().startswith("FROM ")]
    assert froms and all(f.startswith("python:3.11-slim") for f in froms)
    (entry,) = [ln for ln in lines if ln.upper().startswith("ENTRYPOINT ")]
    assert json.loads(entry.split(None, 1)[1]) == ["nri-sla", "run"]
    (cmd,) = [ln for ln in lines if ln.upper().startswith("CMD ")]
    from nri_plugin.commands import run

    parser = argparse.ArgumentParser(exit_on_error=False)
    run.add_arguments(parser)
    parser.parse_args(json.loads(cmd.split(None, 1)[1]))
    # everything the image runs is byte-compiled in the build (the base image's stdlib
    # has no .pyc), by its own interpreter, timestamp-checked
    (build,) = [ln for ln in text.split("\nRUN ")[1:] if "compileall" in ln]
    assert "python -I -m compileall -q --invalidation-mode timestamp" in build
    assert 'get_paths()["stdlib"]' in build and 'get_paths()["purelib"]' in build
    assert build.index("pip install") < build.index("compileall")
    # every COPY source exists in the repository
    for ln in lines:
        if ln.upper().startswith("COPY ") and "--from=" not in ln:
            for src in ln.split()[1:-1]:
                assert (pk.REPO / src).exists(), src
