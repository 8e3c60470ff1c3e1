"""packaging/kubernetes: the plain DaemonSet manifest is well-formed and the Helm chart,
rendered with its default values, produces exactly the same objects.

`helm` is used when installed; otherwise a small renderer for the subset of Go templates
the chart sticks to (values, if/end, and the pipeline functions toYaml, nindent, indent,
quote, default) renders it. Anything outside that subset fails the test, which keeps the
chart simple enough to review at a glance.
"""

import argparse
import hashlib
import json
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from nri_plugin.config import parse_config

K8S = Path(__file__).resolve().parents[2] / "packaging" / "kubernetes"
CHART = K8S / "helm" / "nri-sla"
RELEASE, NAMESPACE = "nri-sla", "kube-system"


# -- a minimal Go-template renderer -----------------------------------------------------
_ACTION = re.compile(r"\{\{(-?)\s*(.*?)\s*(-?)\}\}", re.S)


def _truthy(v: Any) -> bool:
    return v not in (None, False, 0, "") and not (isinstance(v, (dict, list)) and not v)


def _show(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (dict, list)):
        raise AssertionError(f"template prints a collection without toYaml: {v!r}")
    return "" if v is None else str(v)


def _indent(n: int, s: str) -> str:
    return "\n".join(" " * n + line if line else line for line in str(s).split("\n"))


FUNCS = {
    "toYaml": lambda v: yaml.safe_dump(v, default_flow_style=False, sort_keys=True).rstrip(),
    "indent": lambda n, s: _indent(int(n), s),
    "nindent": lambda n, s: "\n" + _indent(int(n), s),
    "quote": lambda s: json.dumps(_show(s)),
    "default": lambda d, v: v if _truthy(v) else d,
    "or": lambda *values: next((v for v in values if _truthy(v)), values[-1]),
    "sha256sum": lambda s: hashlib.sha256(s.encode()).hexdigest(),
    "print": lambda *parts: "".join(_show(p) for p in parts),  # strings: no spaces between
    # Helm names a chart's templates <chart>/templates/<file> (.Template.BasePath/<file>).
    "include": lambda name, ctx: render_template((CHART.parent / name).read_text(), ctx),
}


def _term(tok: str, ctx: dict) -> Any:
    if tok.startswith('"'):
        return json.loads(tok)
    if re.fullmatch(r"-?\d+", tok):
        return int(tok)
    if tok == ".":
        return ctx
    if tok.startswith("(") and tok.endswith(")"):
        return _pipeline(tok[1:-1], ctx)
    if tok.startswith("$."):  # the root context: the only one this renderer has
        tok = tok[1:]
    if tok.startswith("."):
        value: Any = ctx
        for part in tok[1:].split("."):
            assert isinstance(value, dict), f"{tok}: {part} of a non-map"
            value = value.get(part)
        return value
    raise AssertionError(f"unsupported template term {tok!r}")


def _pipeline(expr: str, ctx: dict) -> Any:
    value: Any = None
    for i, cmd in enumerate(c.strip() for c in expr.split("|")):
        words = re.findall(r'"(?:[^"\\]|\\.)*"|\([^()]*\)|\S+', cmd)
        if words[0] in FUNCS:
            args = [_term(w, ctx) for w in words[1:]] + ([value] if i else [])
            value = FUNCS[words[0]](*args)
        else:
            assert i == 0 and len(words) == 1, f"unsupported template command {cmd!r}"
            value = _term(words[0], ctx)
    return value


def render_template(text: str, ctx: dict) -> str:
    pieces: list[tuple[str, str]] = []  # ("text", s) | ("action", expr)
    pos = 0
    for m in _ACTION.finditer(text):
        before = text[pos:m.start()]
        if m.group(1):
            before = before.rstrip()
        pieces.append(("text", before))
        pieces.append(("action", m.group(2)))
        pos = m.end()
        if m.group(3):
            rest = text[pos:]
            pos += len(rest) - len(rest.lstrip())
    pieces.append(("text", text[pos:]))

    out: list[str] = []
    stack: list[bool] = []  # enclosing if-conditions
    for kind, body in pieces:
        active = all(stack)
        if kind == "text":
            if active:
                out.append(body)
        elif body.startswith("if "):
            stack.append(active and _truthy(_pipeline(body[3:], ctx)))
        elif body == "end":
            assert stack, "{{ end }} without {{ if }}"
            stack.pop()
        elif body.startswith("/*"):
            continue
        elif active:
            out.append(_show(_pipeline(body, ctx)))
    assert not stack, "unclosed {{ if }}"
    return "".join(out)


def _deep_merge(base: dict, over: dict) -> dict:
    merged = dict(base)
    for k, v in over.items():
        merged[k] = _deep_merge(base[k], v) if isinstance(v, dict) and isinstance(
            base.get(k), dict) else v
    return merged


def render_chart(overrides: dict | None = None) -> list[dict]:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    values = _deep_merge(yaml.safe_load((CHART / "values.yaml").read_text()), overrides or {})
    helm = shutil.which("helm")
    if helm:
        with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
            yaml.safe_dump(values, f)
            f.flush()
            res = subprocess.run([helm, "template", RELEASE, str(CHART), "-n", NAMESPACE,
                                  "-f", f.name], capture_output=True, text=True, check=True,
                                 timeout=60)
        return [d for d in yaml.safe_load_all(res.stdout) if d]
    ctx = {"Values": values, "Release": {"Name": RELEASE, "Namespace": NAMESPACE},
           "Chart": {k[0].upper() + k[1:]: v for k, v in chart.items()},
           "Template": {"BasePath": f"{chart['name']}/templates"}}
    docs = []
    for tpl in sorted((CHART / "templates").glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(render_template(tpl.read_text(), ctx)) if d]
    return docs


def _normalized(docs: list[dict]) -> dict[tuple[str, str], dict]:
    """kind/name -> object, with ConfigMap files parsed (their text formatting differs)."""
    out = {}
    for doc in docs:
        doc = json.loads(json.dumps(doc))
        if doc["kind"] == "ConfigMap":
            doc["data"] = {k: yaml.safe_load(v) for k, v in doc["data"].items()}
        out[(doc["kind"], doc["metadata"]["name"])] = doc
    return out


@pytest.fixture(scope="module")
def manifest() -> list[dict]:
    return [d for d in yaml.safe_load_all((K8S / "daemonset.yaml").read_text()) if d]


def _by_kind(docs, kind):
    (doc,) = [d for d in docs if d["kind"] == kind]
    return doc


# -- the renderer itself -------------------------------------------------------------------
def test_renderer_subset():
    ctx = {"Values": {"a": {"b": 7}, "l": [1, 2], "e": ""}, "Chart": {"AppVersion": "1.2"}}
    assert render_template("x: {{ .Values.a.b }}", ctx) == "x: 7"
    assert render_template("k:\n  {{- .Values.l | toYaml | nindent 2 }}\n", ctx) == \
        "k:\n  - 1\n  - 2\n"
    assert render_template('{{ .Values.e | default .Chart.AppVersion | quote }}', ctx) == \
        '"1.2"'
    assert render_template("a\n{{- if .Values.e }}\nb\n{{- end }}\nc", ctx) == "a\nc"
    assert render_template('{{ "x" | sha256sum }}', ctx) == hashlib.sha256(b"x").hexdigest()
    assert render_template('{{ print $.Chart.AppVersion "/x" }}', ctx) == "1.2/x"
    assert render_template('{{ (print "x") | sha256sum }}', ctx) == \
        hashlib.sha256(b"x").hexdigest()
    with pytest.raises(AssertionError, match="unsupported"):
        render_template("{{ range .Values.l }}{{ end }}", ctx)


# -- plain manifest ----------------------------------------------------------------------
def test_objects_and_metadata(manifest):
    kinds = sorted(d["kind"] for d in manifest)
    assert kinds == ["ConfigMap", "DaemonSet", "ServiceAccount"]
    for doc in manifest:
        assert doc["apiVersion"] == ("apps/v1" if doc["kind"] == "DaemonSet" else "v1")
        assert doc["metadata"]["namespace"] == NAMESPACE
        assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", doc["metadata"]["name"])


def test_daemonset_pod_spec(manifest):
    ds = _by_kind(manifest, "DaemonSet")
    spec = ds["spec"]
    pod = spec["template"]["spec"]
    labels = spec["template"]["metadata"]["labels"]
    assert spec["selector"]["matchLabels"].items() <= labels.items()
    annotations = spec["template"]["metadata"]["annotations"]
    assert annotations["tolerate-missing-plugins.nri.io"] == "true"
    assert annotations["tolerate-missing-nri-plugins.noderesource.dev"] == "true"
    assert pod["priorityClassName"] == "system-node-critical"
    assert {"operator": "Exists"} in pod["tolerations"]
    assert pod["serviceAccountName"] == _by_kind(manifest, "ServiceAccount")["metadata"][
        "name"]
    assert not pod.get("hostNetwork") and not pod.get("hostPID")
    (ctr,) = pod["containers"]
    assert set(ctr) <= {"name", "image", "imagePullPolicy", "args", "env", "ports",
                        "readinessProbe", "livenessProbe", "resources", "securityContext",
                        "volumeMounts"}
    assert ctr["securityContext"] == {"privileged": True}
    res = ctr["resources"]
    assert res["requests"]["cpu"] and res["requests"]["memory"] and res["limits"]["memory"]


def test_volumes_mounts_and_host_paths(manifest):
    ds = _by_kind(manifest, "DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    (ctr,) = pod["containers"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m for m in ctr["volumeMounts"]}
    assert all(m["name"] in volumes for m in ctr["volumeMounts"])
    assert len(volumes) == len(pod["volumes"])  # unique names
    host = {v["hostPath"]["path"]: (v["name"], v["hostPath"]["type"])
            for v in volumes.values() if "hostPath" in v}
    assert set(host) == {"/var/run/nri", "/sys", "/sys/fs/cgroup", "/dev", "/var/lib/nri-sla",
                         "/var/lib/kubelet/pod-resources", "/opt/nri-sla", "/etc/nri-sla"}
    # the host's /opt/nri-sla and /etc/nri-sla are the initContainer's alone
    assert {host["/opt/nri-sla"][0], host["/etc/nri-sla"][0]}.isdisjoint(
        m["name"] for m in ctr["volumeMounts"])
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
    cm_name = _by_kind(manifest, "ConfigMap")["metadata"]["name"]
    assert volumes["config"]["configMap"]["name"] == cm_name
    assert mounts["/etc/nri-sla"]["readOnly"] is True


def test_host_hook_init_container_installs_the_configmaps_policy(manifest, tmp_path, pk):
    """The initContainer runs `nri-sla host-hook` from the plugin's image, with the same
    ConfigMap mounted where the plugin reads it; run here against a scratch host root,
    the hook it installs runs on its own (its own interpreter copy) with that config."""
    from nri_plugin.commands import host_hook
    from nri_plugin.commands.hostinstall import install

    pod = _by_kind(manifest, "DaemonSet")["spec"]["template"]["spec"]
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
    configmap.write_text(_by_kind(manifest, "ConfigMap")["data"]["config.yaml"])
    host = tmp_path / "host"
    (host / "opt/nri-sla").mkdir(parents=True)  # the DaemonSet's hostPath mount
    done = install(host, str(configmap))
    assert done.config.read_text() == configmap.read_text()
    assert not (host / "etc/nri-sla/base-runtime-spec.json").exists()
    version = subprocess.run([str(done.binary), "version"], capture_output=True, text=True,
                             timeout=60, env={"PATH": "/usr/bin:/bin"})
    assert version.returncode == 0 and version.stdout.startswith("nri-sla "), version.stderr
    # what runs on the host: the hook and containerd-config, not the plugin's protocols
    dropin = subprocess.run([str(done.binary), "containerd-config", "--containerd-version",
                             "2.3", "--main-config", str(tmp_path / "absent.toml")],
                            capture_output=True, text=True, timeout=60,
                            env={"PATH": "/usr/bin:/bin"})
    assert dropin.returncode == 0 and "version = 4" in dropin.stdout, dropin.stderr
    site = {p.name.split("-")[0] for p in (done.runtime / "site").iterdir()}
    assert {"nri_plugin", "yaml", "tomlkit"} <= site
    assert not site & {"grpc", "google", "uvloop", "prometheus_client"}, site
    size = sum(f.stat().st_size for f in done.runtime.rglob("*")
               if f.is_file() and not f.is_symlink())
    print(f"evidence: host-hook copy {size / 2**20:.1f} MiB")
    # the copied interpreter runs from the copy, not from the image's prefix
    where = subprocess.run([str(done.runtime / "bin" / "python3"), "-I", "-S", "-c",
                            "import os; print(os.__file__)"], capture_output=True, text=True,
                           timeout=60, env={"LD_LIBRARY_PATH": str(done.runtime / "lib")})
    assert where.stdout.startswith(str(done.runtime)), where
    # a second start replaces the runtime and leaves one
    again = install(host, str(configmap))
    assert again.runtime != done.runtime
    assert [p.name for p in (host / "opt/nri-sla").glob("runtime-*")] == [again.runtime.name]
    assert (host / "opt/nri-sla/current").readlink() == Path(again.runtime.name)


def test_host_hook_refuses_a_config_that_does_not_validate(tmp_path, pk):
    from nri_plugin.commands.hostinstall import install
    from nri_plugin.config import ConfigError

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
    res = subprocess.run([str(pk.VENV_NRI_SLA), "host-hook", "--host-root",
                          str(tmp_path / "host"), "--config", "/dev/null"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 4, res.stderr
    assert res.stderr == (f"nri-sla host-hook: cannot install under {tmp_path}/host: "
                          f"{tmp_path}/host/opt/nri-sla: No such file or directory (the "
                          f"host's /opt/nri-sla and /etc/nri-sla must be mounted there, "
                          f"writable)\n")
    assert not (tmp_path / "host").is_dir()


def test_chart_pod_values_take_effect():
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]}]}]}}}
    docs = render_chart({"imagePullSecrets": [{"name": "regcred"}], "affinity": affinity,
                         "podAnnotations": {"example.com/team": "platform"},
                         "extraArgs": ["--log-level", "debug"],
                         "extraEnv": [{"name": "TZ", "value": "UTC"}]})
    template = _by_kind(docs, "DaemonSet")["spec"]["template"]
    pod = template["spec"]
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    assert pod["affinity"] == affinity
    annotations = template["metadata"]["annotations"]
    assert annotations["example.com/team"] == "platform"
    assert annotations["tolerate-missing-plugins.nri.io"] == "true"  # kept beside them
    (ctr,) = pod["containers"]
    assert ctr["args"][-2:] == ["--log-level", "debug"]
    assert ctr["env"] == [{"name": "TZ", "value": "UTC"}]
    from nri_plugin.commands import run

    parser = argparse.ArgumentParser(exit_on_error=False)
    run.add_arguments(parser)
    assert parser.parse_args(ctr["args"]).log_level == "debug"
    both = render_chart({"nvidiaVisibleDevices": "all",
                         "extraEnv": [{"name": "TZ", "value": "UTC"}]})
    (ctr,) = _by_kind(both, "DaemonSet")["spec"]["template"]["spec"]["containers"]
    assert ctr["env"] == [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
                          {"name": "TZ", "value": "UTC"}]


def test_chart_can_leave_the_host_alone():
    pod = _by_kind(render_chart({"hostHook": {"enabled": False}}), "DaemonSet")["spec"][
        "template"]["spec"]
    assert "initContainers" not in pod
    assert not {"/opt/nri-sla", "/etc/nri-sla"} & {
        v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}


def test_probes_use_the_health_port_not_the_metrics_port(manifest):
    """The kubelet probes the probe listener (nri_plugin.ops.health), which a connection flood
    on the metrics port cannot starve; no hostNetwork, so it probes the pod IP and the
    listener must bind every interface."""
    pod = _by_kind(manifest, "DaemonSet")["spec"]["template"]["spec"]
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

    (ctr,) = _by_kind(manifest, "DaemonSet")["spec"]["template"]["spec"]["containers"]
    parser = argparse.ArgumentParser(exit_on_error=False)
    run.add_arguments(parser)
    args = parser.parse_args(ctr["args"])
    assert args.config == "/etc/nri-sla/config.yaml"
    assert args.metrics_address == ":9810" and args.health_address == ":9811"


def test_configmap_is_a_valid_node_config(manifest):
    text = _by_kind(manifest, "ConfigMap")["data"]["config.yaml"]
    config = parse_config(text, source="configmap")  # raises ConfigError when invalid
    assert config.enforcement == "hard" and config.log.format == "json"


# -- chart == manifest ---------------------------------------------------------------------
def test_chart_defaults_render_the_plain_manifest(manifest):
    assert _normalized(render_chart()) == _normalized(manifest)


def test_chart_values_take_effect():
    docs = render_chart({"metricsPort": 9900, "healthPort": 9901, "runtimeClassName": "nvidia",
                         "nvidiaVisibleDevices": "all", "image": {"tag": "dev"},
                         "config": {"enforcement": "soft"}})
    ds = _by_kind(docs, "DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    (ctr,) = pod["containers"]
    assert pod["runtimeClassName"] == "nvidia"
    assert ctr["env"] == [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
    assert ctr["ports"][0]["containerPort"] == 9900 and ":9900" in ctr["args"]
    assert ctr["ports"][1] == {"name": "health", "containerPort": 9901, "protocol": "TCP"}
    assert ":9901" in ctr["args"]
    assert ctr["image"] == "nri-sla:dev"
    cm = _by_kind(docs, "ConfigMap")
    assert parse_config(cm["data"]["config.yaml"]).enforcement == "soft"


def test_a_changed_configmap_rolls_the_pods():
    def checksum(docs: list[dict]) -> str:
        return _by_kind(docs, "DaemonSet")["spec"]["template"]["metadata"]["annotations"][
            "checksum/config"]

    default = render_chart()
    configmap = render_template((CHART / "templates" / "configmap.yaml").read_text(), {
        "Values": yaml.safe_load((CHART / "values.yaml").read_text()),
        "Release": {"Name": RELEASE, "Namespace": NAMESPACE}})
    assert checksum(default) == hashlib.sha256(configmap.encode()).hexdigest()
    assert checksum(render_chart({"config": {"enforcement": "soft"}})) != checksum(default)
    assert checksum(render_chart({"metricsPort": 9900})) == checksum(default)


def test_chart_device_plugin_option():
    from nri_plugin.commands import device_plugin

    docs = render_chart({"devicePlugin": {"enabled": True,
                                          "socketDir": "/var/lib/k/device-plugins"}})
    pod = _by_kind(docs, "DaemonSet")["spec"]["template"]["spec"]
    main, dp = pod["containers"]
    assert main["name"] == "nri-sla" and dp["name"] == "device-plugin"
    assert dp["image"] == main["image"]
    assert dp["command"] == ["nri-sla", "device-plugin"]
    parser = argparse.ArgumentParser(exit_on_error=False)
    device_plugin.add_arguments(parser)
    args = parser.parse_args(dp["args"])
    assert args.config == "/etc/nri-sla/config.yaml"
    assert args.socket_dir == "/var/lib/k/device-plugins"
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in dp["volumeMounts"]}
    assert volumes[mounts["/var/lib/k/device-plugins"]]["hostPath"] == {
        "path": "/var/lib/k/device-plugins", "type": "Directory"}
    assert all(m in volumes for m in mounts.values())
    assert {"/etc/nri-sla", "/dev", "/sys"} <= set(mounts)
    # off by default: the plain manifest has one container and no kubelet mount
    (ctr,) = _by_kind(render_chart(), "DaemonSet")["spec"]["template"]["spec"]["containers"]
    assert ctr["name"] == "nri-sla"


def test_chart_metadata():
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["apiVersion"] == "v2" and chart["name"] == "nri-sla"
    from nri_plugin import __version__
    assert chart["appVersion"] == __version__


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
    # every COPY source exists in the repository
    for ln in lines:
        if ln.upper().startswith("COPY ") and "--from=" not in ln:
            for src in ln.split()[1:-1]:
                assert (pk.REPO / src).exists(), src


# -- OpenAPI schema of the Kubernetes API --------------------------------------------------
@pytest.mark.parametrize("source", ["manifest", "chart-defaults", "chart-overrides"])
def test_objects_match_the_kubernetes_openapi_schema(manifest, source):
    kv = pytest.importorskip(
        "kubernetes_validate",
        reason="schema check needs `pip install kubernetes-validate` (bundles the API's "
               "OpenAPI schemas)")
    docs = {"manifest": lambda: manifest,
            "chart-defaults": render_chart,
            "chart-overrides": lambda: render_chart({
                "runtimeClassName": "nvidia", "nvidiaVisibleDevices": "all",
                "devicePlugin": {"enabled": True}, "imagePullSecrets": [{"name": "regcred"}],
                "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [
                        {"key": "gpu", "operator": "Exists"}]}]}}},
                "podAnnotations": {"example.com/team": "platform"},
                "extraArgs": ["--log-level", "debug"],
                "extraEnv": [{"name": "TZ", "value": "UTC"}]})
            }[source]()
    for doc in docs:
        # strict: unknown fields (typos such as "readOnlly") are errors too
        kv.validate(doc, "1.30.0", strict=True)


def test_schema_check_catches_a_typo(manifest):
    kv = pytest.importorskip("kubernetes_validate", reason="pip install kubernetes-validate")
    ds = json.loads(json.dumps(_by_kind(manifest, "DaemonSet")))
    ds["spec"]["template"]["spec"]["containers"][0]["volumeMounts"][0]["readOnlly"] = True
    with pytest.raises(kv.ValidationError):
        kv.validate(ds, "1.30.0", strict=True)


# -- NetworkPolicy ---------------------------------------------------------------------------
def test_network_policy_admits_only_the_scraper_to_the_metrics_port():
    assert not [d for d in render_chart() if d["kind"] == "NetworkPolicy"]  # off by default
    docs = render_chart({"networkPolicy": {"enabled": True, "scraper": {
        "namespace": "obs", "podLabels": {"app.kubernetes.io/name": "vmagent"}}}})
    policy = _by_kind(docs, "NetworkPolicy")
    ds = _by_kind(docs, "DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    assert policy["metadata"]["namespace"] == ds["metadata"]["namespace"] == NAMESPACE
    # it selects exactly the DaemonSet's pods, for ingress
    assert policy["spec"]["podSelector"] == ds["spec"]["selector"]
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    # one rule: the scraper (both selectors in one peer: AND), the metrics port only
    (rule,) = policy["spec"]["ingress"]
    assert rule["from"] == [{
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "obs"}},
        "podSelector": {"matchLabels": {"app.kubernetes.io/name": "vmagent"}}}]
    assert rule["ports"] == [{"port": "metrics", "protocol": "TCP"}]
    # the defaults: every pod of namespace monitoring, nothing else
    (default_rule,) = _by_kind(render_chart({"networkPolicy": {"enabled": True}}),
                               "NetworkPolicy")["spec"]["ingress"]
    assert default_rule["from"] == [{
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
        "podSelector": {"matchLabels": {}}}]
    (ctr,) = pod["containers"]
    assert "metrics" in {p["name"] for p in ctr["ports"]}
    # the probes need no rule: they come from the node, which policies always admit; the
    # policy applies only because the pods are not on the host network
    assert ctr["livenessProbe"]["httpGet"]["port"] == "health" and not pod.get("hostNetwork")
    kv = pytest.importorskip("kubernetes_validate", reason="pip install kubernetes-validate")
    kv.validate(policy, "1.30.0", strict=True)
