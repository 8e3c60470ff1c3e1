"""The Helm chart (packaging/kubernetes/helm/nri-sla), rendered and linted by a real
`helm` (scripts/ensure-helm; skipped, naming it, where absent): the plain manifest is its
output with default values, every values example of docs/install.md's chart section
lints, renders and gives objects valid against the Kubernetes 1.30 OpenAPI schema, and
each value does what values.yaml says.
"""

import argparse
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys

import pytest
import yaml

from tests.support.helm import (
    CHART,
    K8S_VERSION,
    MANIFEST,
    NAMESPACE,
    REPO,
    by_kind,
    config_value,
    manifest,
    node_config,
    normalized,
    pod_spec,
    render,
    run_helm,
    template_text,
)

INSTALL_DOC = REPO / "docs" / "install.md"


def documented_values() -> dict[str, dict]:
    """docs/install.md's values examples: ```yaml blocks whose first line is
    `# values: NAME`."""
    blocks = re.findall(r"```yaml\n# values: ([\w-]+)\n(.*?)```", INSTALL_DOC.read_text(), re.S)
    return {name: yaml.safe_load(body) or {} for name, body in blocks}


EXAMPLES = documented_values()


def schema_check(docs: list[dict]) -> None:
    kv = pytest.importorskip(
        "kubernetes_validate",
        reason="pip install kubernetes-validate (the Kubernetes OpenAPI schemas)",
    )
    for doc in docs:
        # strict: unknown fields (typos such as "readOnlly") are errors too
        kv.validate(doc, K8S_VERSION, strict=True)


def test_the_docs_give_an_example_of_each_option():
    assert {
        "nri-nodes",
        "gpu-nodes",
        "narrow-plugin",
        "host-hook",
        "device-plugin",
        "events-off",
        "network-policy",
        "admission-policy",
        "names",
    } <= set(EXAMPLES)


@pytest.mark.parametrize("name", ["defaults", *EXAMPLES])
def test_lint_render_and_schema(name):
    values = EXAMPLES.get(name, {})
    lint = run_helm("lint", "--strict", str(CHART), "-n", NAMESPACE, values=values)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    schema_check(render(values))


@pytest.mark.parametrize("name", ["defaults", *EXAMPLES])
def test_rendered_config_is_a_valid_node_config(name):
    values = EXAMPLES.get(name, {})
    config = node_config(by_kind(render(values), "ConfigMap")["data"]["config.yaml"])
    assert config_value(config, "events.enabled") == values.get("events", {}).get("enabled", True)


def test_the_plain_manifest_is_helm_template_with_default_values():
    """packaging/kubernetes/daemonset.yaml is a header, then helm's output verbatim."""
    text = MANIFEST.read_text()
    body = text[text.index("---\n") :]
    assert body == template_text(), (
        "regenerate it: helm template nri-sla packaging/kubernetes/helm/nri-sla "
        "-n kube-system, below the file's header"
    )
    assert normalized(manifest()) == normalized(render())


def test_schema_check_catches_a_typo():
    kv = pytest.importorskip("kubernetes_validate", reason="pip install kubernetes-validate")
    ds = json.loads(json.dumps(by_kind(manifest(), "DaemonSet")))
    ds["spec"]["template"]["spec"]["containers"][0]["volumeMounts"][0]["readOnlly"] = True
    with pytest.raises(kv.ValidationError):
        kv.validate(ds, K8S_VERSION, strict=True)


@pytest.mark.parametrize(
    ("values", "error"),
    [
        ({"hostHok": {"enabled": True}}, "additional properties 'hostHok' not allowed"),
        ({"hostHook": {"enabled": "yes"}}, "/hostHook/enabled"),
        ({"metricsPort": 70000}, "/metricsPort"),
        ({"image": {"pullPolicy": "Sometimes"}}, "/image/pullPolicy"),
        (
            {"admissionPolicy": {"allowedNamespaces": ["a'] || true || ['"]}},
            "/admissionPolicy/allowedNamespaces/0",
        ),
        ({"updateStrategy": {"type": "Sideways"}}, "/updateStrategy/type"),
    ],
)
def test_values_schema_refuses_bad_values(values, error):
    res = run_helm("template", "nri-sla", str(CHART), values=values)
    assert res.returncode != 0
    assert error in res.stderr, res.stderr


def test_names_and_labels():
    default = render()
    for doc in default:
        labels = doc["metadata"]["labels"]
        assert labels["helm.sh/chart"] == "nri-sla-0.1.0"
        assert labels["app.kubernetes.io/managed-by"] == "Helm"
        assert labels["app.kubernetes.io/version"] == "0.1.0"
        assert labels["app.kubernetes.io/instance"] == "nri-sla"
    ds = by_kind(default, "DaemonSet")
    assert ds["metadata"]["name"] == "nri-sla"
    # the selector is the stable part of the labels (a chart upgrade changes helm.sh/chart)
    assert ds["spec"]["selector"]["matchLabels"] == {
        "app.kubernetes.io/name": "nri-sla",
        "app.kubernetes.io/instance": "nri-sla",
    }
    assert ds["spec"]["template"]["metadata"]["labels"] == ds["spec"]["selector"]["matchLabels"]
    # another release name: <release>-nri-sla, every reference following it
    other = render(release="edge")
    assert by_kind(other, "DaemonSet")["metadata"]["name"] == "edge-nri-sla"
    pod = pod_spec(other)
    assert pod["serviceAccountName"] == by_kind(other, "ServiceAccount")["metadata"]["name"]
    assert {v["configMap"]["name"] for v in pod["volumes"] if "configMap" in v} == {
        by_kind(other, "ConfigMap")["metadata"]["name"]
    }
    assert by_kind(other, "ClusterRoleBinding")["subjects"] == [
        {"kind": "ServiceAccount", "name": "edge-nri-sla", "namespace": NAMESPACE}
    ]
    # the overrides
    named = render(EXAMPLES["names"])
    assert {d["metadata"]["name"] for d in named} >= {"sla-enforcer", "sla-enforcer-config"}
    assert (
        by_kind(render({"nameOverride": "enforcer"}), "DaemonSet")["metadata"]["name"]
        == "nri-sla-enforcer"
    )


def test_pod_values_take_effect():
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]}
                        ]
                    }
                ]
            }
        }
    }
    docs = render(
        {
            "imagePullSecrets": [{"name": "regcred"}],
            "affinity": affinity,
            "podAnnotations": {"example.com/team": "platform"},
            "extraArgs": ["--log-level", "debug"],
            "extraEnv": [{"name": "TZ", "value": "UTC"}],
            "updateStrategy": {"type": "OnDelete"},
            "nodeSelector": {"example.com/nri": "true"},
        }
    )
    ds = by_kind(docs, "DaemonSet")
    template = ds["spec"]["template"]
    pod = template["spec"]
    assert ds["spec"]["updateStrategy"] == {"type": "OnDelete"}
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    assert pod["affinity"] == affinity
    # a map value given at install merges into the default one
    assert pod["nodeSelector"] == {"kubernetes.io/os": "linux", "example.com/nri": "true"}
    annotations = template["metadata"]["annotations"]
    assert annotations["example.com/team"] == "platform"
    assert annotations["tolerate-missing-plugins.nri.io"] == "true"  # kept beside them
    (ctr,) = pod["containers"]
    assert ctr["args"][-2:] == ["--log-level", "debug"]
    assert ctr["env"][-1] == {"name": "TZ", "value": "UTC"}
    from nri_plugin.commands import run

    parser = argparse.ArgumentParser(exit_on_error=False)
    run.add_arguments(parser)
    assert parser.parse_args(ctr["args"]).log_level == "debug"


def test_chart_values_take_effect():
    docs = render(
        {
            "metricsPort": 9900,
            "healthPort": 9901,
            "runtimeClassName": "nvidia",
            "nvidiaVisibleDevices": "all",
            "image": {"tag": "dev"},
            "events": {"enabled": False},
            "config": {"enforcement": "soft"},
        }
    )
    pod = pod_spec(docs)
    (ctr,) = pod["containers"]
    assert pod["runtimeClassName"] == "nvidia"
    assert ctr["env"] == [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
    assert ctr["ports"][0]["containerPort"] == 9900 and ":9900" in ctr["args"]
    assert ctr["ports"][1] == {"name": "health", "containerPort": 9901, "protocol": "TCP"}
    assert ":9901" in ctr["args"]
    assert ctr["image"] == "nri-sla:dev"
    text = by_kind(docs, "ConfigMap")["data"]["config.yaml"]
    assert yaml.safe_load(text) == {
        "enforcement": "soft",
        "events": {"enabled": False},
        "log": {"format": "json", "level": "info"},
    }


def test_events_rbac_grants_creating_and_patching_events_only():
    docs = render()
    role = by_kind(docs, "ClusterRole")
    # core/v1 Events, as the plugin posts them
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]}
    ]
    binding = by_kind(docs, "ClusterRoleBinding")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": role["metadata"]["name"],
    }
    account = by_kind(docs, "ServiceAccount")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "namespace": NAMESPACE, "name": account["metadata"]["name"]}
    ]
    pod = pod_spec(docs)
    # the account mounts no token by itself; this pod does, for the Events
    assert account["automountServiceAccountToken"] is False
    assert pod["automountServiceAccountToken"] is True
    (ctr,) = pod["containers"]
    assert {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}} in ctr[
        "env"
    ]
    # off: no role, no token, no node name, and the plugin's config says so
    off = render(EXAMPLES["events-off"])
    assert not {"ClusterRole", "ClusterRoleBinding"} & {d["kind"] for d in off}
    assert pod_spec(off)["automountServiceAccountToken"] is False
    assert "env" not in pod_spec(off)["containers"][0]
    assert yaml.safe_load(by_kind(off, "ConfigMap")["data"]["config.yaml"])["events"] == {
        "enabled": False
    }
    # the chart's value wins over one set under config, other event keys are kept
    mixed = render(
        {"events": {"enabled": False}, "config": {"events": {"enabled": True, "burst": 5}}}
    )
    assert yaml.safe_load(by_kind(mixed, "ConfigMap")["data"]["config.yaml"])["events"] == {
        "enabled": False,
        "burst": 5,
    }


def test_a_changed_configmap_rolls_the_pods():
    def checksum(docs: list[dict]) -> str:
        return by_kind(docs, "DaemonSet")["spec"]["template"]["metadata"]["annotations"][
            "checksum/config"
        ]

    default = render()
    source = run_helm(
        "template",
        "nri-sla",
        str(CHART),
        "-n",
        NAMESPACE,
        "--show-only",
        "templates/configmap.yaml",
    )
    assert source.returncode == 0, source.stderr
    configmap = source.stdout.split("\n", 2)[2]  # helm's "---" and "# Source:" lines
    assert checksum(default) == hashlib.sha256(configmap.encode()).hexdigest()
    assert checksum(render({"config": {"enforcement": "soft"}})) != checksum(default)
    assert checksum(render({"events": {"enabled": False}})) != checksum(default)
    assert checksum(render({"metricsPort": 9900})) == checksum(default)


def test_host_hook_is_opt_in_and_runs_without_capabilities(tmp_path, pk):
    """Off by default: nothing of the host's /etc or /opt. On: the initContainer's
    securityContext leaves root no capability and a read-only root filesystem; its
    command, run here that way (as root with every capability dropped and no_new_privs,
    in a mount namespace where only the two host directories are writable), installs the
    hook all the same."""
    assert "initContainers" not in pod_spec(render())
    pod = pod_spec(render(EXAMPLES["host-hook"]))
    (init,) = pod["initContainers"]
    assert init["securityContext"] == {
        "runAsUser": 0,
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    volumes = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    writable = {
        m["mountPath"]: volumes[m["name"]]
        for m in init["volumeMounts"]
        if m["name"] in volumes and not m.get("readOnly")
    }
    assert writable == {"/host/opt/nri-sla": "/opt/nri-sla", "/host/etc/nri-sla": "/etc/nri-sla"}
    setpriv = pk.need_tool("setpriv", "util-linux")
    unshare = pk.need_tool("unshare", "util-linux")
    if subprocess.run(["id", "-u"], capture_output=True, text=True).stdout.strip() != "0":
        pytest.skip("needs root: the initContainer runs as uid 0")
    configmap = tmp_path / "config.yaml"
    configmap.write_text("enforcement: hard\n")
    host = tmp_path / "host"
    binds = []
    for path in writable:  # the hostPath volumes (DirectoryOrCreate)
        target = host / path.removeprefix("/host/")
        target.mkdir(parents=True)
        binds.append(f"mount --bind {target} {target}")
    args = [str(host) if a == "/host" else a for a in init["args"]]
    args[args.index("--config") + 1] = str(configmap)
    template = pk.REPO / "hooks" / "base-runtime-spec.json"
    if template.exists():  # where the image ships a spec template, the repository's copy
        args += ["--base-spec-template", str(template)]
    command = shlex.join(
        [
            setpriv,
            "--no-new-privs",
            "--inh-caps=-all",
            "--ambient-caps=-all",
            "--bounding-set=-all",
            "--",
            str(pk.VENV_NRI_SLA),
            "host-hook",
            *args,
        ]
    )
    script = " && ".join([*binds, "mount -o remount,bind,ro /", f"exec {command}"])
    res = subprocess.run(
        [unshare, "--mount", "--propagation", "private", "sh", "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if res.returncode and "unshare failed" in res.stderr:
        pytest.skip(f"no mount namespace here: {res.stderr.strip()}")
    assert res.returncode == 0, res.stderr
    assert (host / "etc/nri-sla/config.yaml").read_text() == configmap.read_text()
    assert (host / "opt/nri-sla/current/bin").is_dir()
    # the check has teeth: without capabilities root cannot write where it does not own,
    # nor outside the writable mounts
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o755)
    shutil.chown(locked, user=65534)
    denied = subprocess.run(
        [setpriv, "--inh-caps=-all", "--bounding-set=-all", "--", "touch", str(locked / "x")],
        capture_output=True,
        timeout=60,
    )
    assert denied.returncode != 0
    outside = subprocess.run(
        [
            unshare,
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            f"mount -o remount,bind,ro / && touch {tmp_path / 'x'}",
        ],
        capture_output=True,
        timeout=60,
    )
    assert outside.returncode != 0 and not (tmp_path / "x").exists()


# nri-sla's cgroup writer in a process with no capability (CapEff 0), on a container
# cgroup made beforehand (by runc, in real life); prints each write's outcome.
_WRITE_WITHOUT_CAPABILITIES = """
import json, sys
from nri_plugin.enforce.cgfile import CgroupWriter
from nri_plugin.enforce.cgpaths import CgroupPaths
from nri_plugin.enforce.mapping import v1_cpu_writes, v1_memory_writes
status = open("/proc/self/status").read()
effective = [ln.split()[1] for ln in status.splitlines() if ln.startswith("CapEff:")]
dirs, roots = json.loads(sys.argv[1]), json.loads(sys.argv[2])
writer = CgroupWriter(CgroupPaths("ctr", 1, dirs, roots))
results = writer.apply(v1_cpu_writes(quota_us=250000, period_us=100000)
                       + v1_memory_writes(high=128 << 20, max_bytes=256 << 20))
print(json.dumps({"capeff": effective, "results": [[r.ok, str(r.error)] for r in results]}))
"""


@pytest.mark.root
def test_narrow_plugin_context_writes_cgroups_without_capabilities(pk):
    """The documented narrow securityContext drops every capability: nri-sla's cgroup
    writer, run as root with none left (setpriv, no_new_privs), still sets CPU bandwidth
    and memory limits of a container's cgroups and reads them back."""
    (ctr,) = pod_spec(render(EXAMPLES["narrow-plugin"]))["containers"]
    assert ctr["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert "privileged" not in ctr["securityContext"]
    setpriv = pk.need_tool("setpriv", "util-linux")
    if os.geteuid() != 0:
        pytest.skip("needs root: the plugin runs as uid 0")
    from nri_plugin.enforce.cgroupdetect import detect_cgroup_facts

    try:
        facts = detect_cgroup_facts()
    except Exception as exc:  # any failure: no usable hierarchy here
        pytest.skip(f"no cgroup hierarchy detected: {exc}")
    if facts.version != 1:
        pytest.skip("written for a cgroup v1 host's files; this host is cgroup v2")
    own = facts.process_paths(os.getpid())
    if not {"cpu", "memory"} <= set(own.dirs):
        pytest.skip("cgroup v1 cpu and memory controllers not both mounted")
    name = f"nri-sla-chart-{os.getpid()}"
    dirs = {c: os.path.join(own.dirs[c], name) for c in ("cpu", "memory")}
    for d in dirs.values():
        os.mkdir(d)  # with capabilities, as runc makes a container's cgroup
    try:
        res = subprocess.run(
            [
                setpriv,
                "--no-new-privs",
                "--inh-caps=-all",
                "--ambient-caps=-all",
                "--bounding-set=-all",
                "--",
                sys.executable,
                "-c",
                _WRITE_WITHOUT_CAPABILITIES,
                json.dumps(dirs),
                json.dumps({c: facts.hierarchy(c).path for c in dirs}),
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert res.returncode == 0, res.stderr
        out = json.loads(res.stdout)
        assert int(out["capeff"][0], 16) == 0
        assert all(ok for ok, _ in out["results"]), out["results"]
        with open(os.path.join(dirs["cpu"], "cpu.cfs_quota_us")) as f:
            assert f.read().strip() == "250000"
        with open(os.path.join(dirs["memory"], "memory.limit_in_bytes")) as f:
            assert int(f.read()) == 256 << 20
    finally:
        for d in dirs.values():
            os.rmdir(d)


def test_chart_device_plugin_option():
    from nri_plugin.commands import device_plugin

    docs = render({"devicePlugin": {"enabled": True, "socketDir": "/var/lib/k/device-plugins"}})
    pod = pod_spec(docs)
    main, dp = pod["containers"]
    assert main["name"] == "nri-sla" and dp["name"] == "device-plugin"
    assert dp["image"] == main["image"]
    assert dp["command"] == ["nri-sla", "device-plugin"]
    assert dp["securityContext"] == {"privileged": True}
    parser = argparse.ArgumentParser(exit_on_error=False)
    device_plugin.add_arguments(parser)
    args = parser.parse_args(dp["args"])
    assert args.config == "/etc/nri-sla/config.yaml"
    assert args.socket_dir == "/var/lib/k/device-plugins"
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in dp["volumeMounts"]}
    assert volumes[mounts["/var/lib/k/device-plugins"]]["hostPath"] == {
        "path": "/var/lib/k/device-plugins",
        "type": "Directory",
    }
    assert all(m in volumes for m in mounts.values())
    assert {"/etc/nri-sla", "/dev", "/sys"} <= set(mounts)
    # off by default: one container and no kubelet mount
    (ctr,) = pod_spec(render())["containers"]
    assert ctr["name"] == "nri-sla"


def test_gpu_nodes_example_narrows_both_containers():
    """The documented GPU-node values: the NVIDIA runtime class gives both containers the
    GPUs' device nodes, so neither runs privileged; both see NVIDIA_VISIBLE_DEVICES."""
    pod = pod_spec(render(EXAMPLES["gpu-nodes"]))
    assert pod["runtimeClassName"] == "nvidia"
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"][0]["matchExpressions"][0]["key"] == "nvidia.com/gpu.present"
    for ctr in pod["containers"]:
        assert not ctr["securityContext"].get("privileged"), ctr["name"]
        assert ctr["securityContext"]["capabilities"] == {"drop": ["ALL"]}
        assert {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"} in ctr["env"]


def test_chart_metadata():
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["apiVersion"] == "v2" and chart["name"] == "nri-sla"
    from nri_plugin import __version__

    assert chart["appVersion"] == __version__
    schema = json.loads((CHART / "values.schema.json").read_text())
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    assert set(schema["properties"]) == set(defaults)  # every value described


def test_network_policy_admits_only_the_scraper_to_the_metrics_port():
    assert not [d for d in render() if d["kind"] == "NetworkPolicy"]  # off by default
    docs = render(EXAMPLES["network-policy"])
    policy = by_kind(docs, "NetworkPolicy")
    ds = by_kind(docs, "DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    assert policy["metadata"]["namespace"] == ds["metadata"]["namespace"] == NAMESPACE
    # it selects exactly the DaemonSet's pods, for ingress
    assert policy["spec"]["podSelector"] == ds["spec"]["selector"]
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    # one rule: the scraper (both selectors in one peer: AND), the metrics port only
    (rule,) = policy["spec"]["ingress"]
    assert rule["from"] == [
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "obs"}},
            "podSelector": {"matchLabels": {"app.kubernetes.io/name": "vmagent"}},
        }
    ]
    assert rule["ports"] == [{"port": "metrics", "protocol": "TCP"}]
    # the defaults: every pod of namespace monitoring, nothing else
    (default_rule,) = by_kind(render({"networkPolicy": {"enabled": True}}), "NetworkPolicy")[
        "spec"
    ]["ingress"]
    assert default_rule["from"] == [
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
            "podSelector": {"matchLabels": {}},
        }
    ]
    (ctr,) = pod["containers"]
    assert "metrics" in {p["name"] for p in ctr["ports"]}
    # the probes need no rule: they come from the node, which policies always admit; the
    # policy applies only because the pods are not on the host network
    assert ctr["livenessProbe"]["httpGet"]["port"] == "health" and not pod.get("hostNetwork")
