"""`nri-sla explain`, `validate` and `demo` as a user runs them (subprocess, real exit codes)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DGX = str(REPO / "examples" / "dgx-like.yaml")


def nri_plugin(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "nri_plugin.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )


def pod_file(
    tmp_path: Path,
    annotations: dict[str, str],
    kind: str = "Pod",
    containers=("work",),
    limits: dict | None = None,
) -> str:
    resources = {"limits": limits} if limits else {}
    pod = {
        "metadata": {"name": "p", "namespace": "ml", "annotations": annotations},
        "spec": {
            "containers": [
                {"name": c, "image": "busybox", "resources": resources} for c in containers
            ]
        },
    }
    if kind == "Pod":
        doc = {"apiVersion": "v1", "kind": "Pod", **pod}
    elif kind == "CronJob":
        doc = {
            "apiVersion": "batch/v1",
            "kind": "CronJob",
            "metadata": {"name": "cj"},
            "spec": {"jobTemplate": {"spec": {"template": pod}}},
        }
    else:
        doc = {
            "apiVersion": "apps/v1",
            "kind": kind,
            "metadata": {"name": "d"},
            "spec": {"template": pod},
        }
    path = tmp_path / f"{kind}.yaml"
    path.write_text(json.dumps(doc))  # JSON is YAML
    return str(path)


def test_explain_shows_gpus_and_numa_from_inventory(tmp_path):
    path = pod_file(
        tmp_path,
        {"sla.nri.io/pod": "gpu: {count: 2, topology: nvlink}\ncpu: {exclusive: 4}"},
        limits={"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": 2},
    )
    out = nri_plugin("explain", "--inventory", DGX, "--cgroup", "v2", "--json", path)
    assert out.returncode == 0, out.stderr
    (result,) = json.loads(out.stdout)
    adj = result["adjustment"]
    assert "CDIDevices" not in adj and "env" not in adj  # nri-sla adds no GPU
    assert adj["linux.resources.cpu.mems"] in ("0", "1")
    record = json.loads(adj["annotations.sla.nri.io/applied"])
    assert len(record["placement_record"]["gpus"]) == 2  # the device plugin's grant
    assert record["placement_record"]["exclusive"]


@pytest.mark.parametrize("kind", ["Pod", "Deployment", "CronJob"])
def test_explain_v1_direct_writes_and_kinds(tmp_path, kind):
    path = pod_file(
        tmp_path,
        {"sla.nri.io/pod": "memory: {high: 1Gi, max: 2Gi}", "sla.nri.io/enforcement": "soft"},
        kind,
    )
    out = nri_plugin("explain", "--inventory", DGX, "--cgroup", "v1", path)
    assert out.returncode == 0, out.stderr
    assert "at StartContainer write memory/memory.soft_limit_in_bytes = 1073741824" in out.stdout
    assert "warning: sla.nri.io/pod: memory.high" in out.stdout


def test_explain_refusal_exits_1_with_message(tmp_path):
    path = pod_file(tmp_path, {"sla.nri.io/container.work": "memory: {high: 12Gi, max: 10Gi}"})
    out = nri_plugin("explain", "--inventory", DGX, "--cgroup", "v2", path)
    assert out.returncode == 1
    assert (
        "sla.nri.io/container.work: memory.high (12Gi) must be below memory.max (10Gi)"
        in out.stdout
    )


def test_explain_unreadable_manifest_exits_2(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: Pod\nmetadata: [unclosed")
    out = nri_plugin("explain", "--inventory", DGX, str(bad))
    assert out.returncode == 2 and "not valid YAML" in out.stderr
    assert "Traceback" not in out.stderr


def test_validate_exit_codes(tmp_path):
    good = pod_file(tmp_path, {"sla.nri.io/pod": "cpu: {limit: 2}"}, containers=("a", "b"))
    out = nri_plugin("validate", good)
    assert out.returncode == 0 and out.stdout.count(": ok") == 2
    bad = pod_file(tmp_path, {"sla.nri.io/pod": "cpu: {limt: 2}"}, "Deployment")
    out = nri_plugin("validate", good, bad)
    assert out.returncode == 1
    assert "sla.nri.io/pod: cpu.limt" in out.stdout
    out = nri_plugin("validate", str(tmp_path / "missing.yaml"))
    assert out.returncode == 2 and "cannot read" in out.stderr


GREEDY = """\
apiVersion: v1
kind: Pod
metadata:
  name: greedy
  namespace: ml
  annotations:
    sla.nri.io/pod: "cpu: {limit: 64}"
spec:
  initContainers:
  - name: setup
    resources: {limits: {cpu: "0.5"}}
  containers:
  - name: app
    resources: {limits: {cpu: "0.5", memory: 256Mi}}
  - name: side
    resources: {limits: {cpu: "64"}}
---
apiVersion: v1
kind: Pod
metadata:
  name: soft
  annotations:
    sla.nri.io/pod: "enforcement: soft\\nmemory: {max: 1Gi}"
spec:
  containers:
  - {name: app, resources: {limits: {memory: 256Mi}}}
  - {name: plain}
"""
OVER_CPU = (
    "sla.nri.io/pod: cpu.limit: 64 exceeds the 0.5 CPUs the runtime granted (the pod's "
    "limit, quota 50000us per 100000us); allowed: at most 0.5"
)


def test_validate_applies_the_pods_own_limits_to_init_containers_too(tmp_path):
    path = tmp_path / "pods.yaml"
    path.write_text(GREEDY)
    out = nri_plugin("validate", str(path))
    assert out.returncode == 1, out.stderr
    where = f"{path}[0]: Pod/greedy"
    hint = (
        "hint: sla.nri.io/pod applies to each of the pod's containers; give this one its "
        "own SLA with sla.nri.io/container."
    )
    assert out.stdout.splitlines() == [
        f"{where} init container setup: {OVER_CPU}",
        f"{where} init container setup: {hint}setup",
        f"{where} container app: {OVER_CPU}",
        f"{where} container app: {hint}app",
        f"{where} container side: ok",
        f"{path}[1]: Pod/soft container app: warning: sla.nri.io/pod: memory.max: 1Gi exceeds "
        "the 256Mi the runtime granted (the pod's limit); allowed: at most 256Mi; clamped to "
        "256Mi",
        f"{path}[1]: Pod/soft container app: {hint}app",
        f"{path}[1]: Pod/soft container plain: ok",
        "1 manifests, 5 containers: 2 ok, 2 refused, 1 warned (exit status 1)",
    ]
    # What the node config allows: the namespace may exceed its limits there.
    config = tmp_path / "config.yaml"
    config.write_text("permissions: {exceed-runtime-limits: [ml]}\n")
    out = nri_plugin("validate", "--config", str(config), "-q", str(path))
    assert out.returncode == 0
    assert out.stdout.splitlines()[-1] == (
        "1 manifests, 5 containers: 4 ok, 0 refused, 1 warned (exit status 0)"
    )
    # explain says the same for this node (the rule is the planner's, not validate's own).
    explained = json.loads(nri_plugin("explain", "--json", "--inventory", DGX, str(path)).stdout)
    assert [r["outcome"] for r in explained] == [
        "refused",
        "refused",
        "enforced",
        "warned",
        "enforced",
    ]
    assert explained[0]["error"] == OVER_CPU


def test_validate_json(tmp_path):
    path = tmp_path / "pods.yaml"
    path.write_text(GREEDY)
    out = nri_plugin("validate", "--json", str(path), str(tmp_path / "missing.yaml"))
    assert out.returncode == 2 and out.stderr.count("\n") == 1  # the unreadable one
    doc = json.loads(out.stdout)
    assert {
        k: doc[k]
        for k in ("manifests", "containers", "ok", "refused", "warned", "unreadable", "status")
    } == {
        "manifests": 2,
        "containers": 5,
        "ok": 2,
        "refused": 2,
        "warned": 1,
        "unreadable": 1,
        "status": 2,
    }
    # The file nobody could read is in the document too, not only on stderr.
    missing = str(tmp_path / "missing.yaml")
    assert doc["errors"] == [
        {"source": missing, "error": f"{missing}: cannot read: No such file or directory"}
    ]
    assert doc["results"][0] == {
        "source": f"{path}[0]: Pod/greedy",
        "container": "setup",
        "init": True,
        "outcome": "refused",
        "problems": [OVER_CPU],
        "hint": "sla.nri.io/pod applies to each of the pod's containers; give this one its "
        "own SLA with sla.nri.io/container.setup",
    }
    assert [r["outcome"] for r in doc["results"]] == ["refused", "refused", "ok", "warned", "ok"]


IO_POLICY = (
    "io:\n  max:\n  - {device: /dev/nvme0n1, read-bps: 100Mi}\n"
    "  - {device: '259:0', write-bps: 10Mi}\n"
    "numa: {nodes: '0', memory-policy: interleave}\nenforcement: soft"
)


def test_explain_replaying_a_node_does_not_look_up_devices_here(tmp_path):
    path = pod_file(tmp_path, {"sla.nri.io/pod": IO_POLICY})
    out = nri_plugin("explain", "--inventory", DGX, "--cgroup", "v2", "--json", path)
    assert out.returncode == 0, out.stderr
    [result] = json.loads(out.stdout)
    assert (result["outcome"], result["nri_version"]) == ("enforced", "v0.12.0")
    assert result["direct_writes"] == [
        "io/io.max = 0:0 rbps=104857600",
        "io/io.max = 259:0 wbps=10485760",
    ]
    assert result["warnings"] == [
        "io.max device /dev/nvme0n1: not looked up here (--inventory replays another node), "
        "shown as 0:0; that node resolves it at CreateContainer"
    ]
    assert result["adjustment"]["linux.memoryPolicy.mode"] == "MPOL_INTERLEAVE"


def test_explain_for_a_runtime_without_nri_version(tmp_path):
    path = pod_file(tmp_path, {"sla.nri.io/pod": IO_POLICY})
    out = nri_plugin(
        "explain", "--inventory", DGX, "--cgroup", "v2", "--nri-version", "unversioned", path
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "runtime: NRI older than v0.12 (--nri-version)"
    assert (
        "  warning: sla.nri.io/pod: numa.memory-policy: interleave needs NRI v0.12 "
        "(containerd 2.3); NRI older than v0.12 cannot set it (cpuset.mems=0 applies)"
    ) in lines
    assert not any("memoryPolicy" in line for line in lines)
    bad = nri_plugin("explain", "--nri-version", "12", path)
    assert bad.returncode == 2
    assert bad.stderr.splitlines()[-1] == (
        "nri-sla explain: error: argument --nri-version: '12' is not vX.Y[.Z] or unversioned"
    )


def test_demo_prints_table_with_enforced_and_refused():
    out = nri_plugin("demo")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert any(line.startswith("POD") and "RESULT" in line for line in lines)
    assert "REFUSED" in out.stdout and "enforced" in out.stdout
    assert "memory.high (12Gi) must be below memory.max (10Gi)" in " ".join(out.stdout.split())
    assert "CDI device" not in out.stdout  # the grant is the device plugin's, never added


def test_demo_refuses_a_pod_above_its_limits_and_clamps_a_soft_one():
    text = " ".join(nri_plugin("demo").stdout.split())
    assert (
        "shop/greedy app REFUSED sla.nri.io/pod: cpu.limit: 64 exceeds the 0.5 CPUs the "
        "runtime granted"
    ) in text
    assert "memory.max: 512Gi exceeds the 256Mi the runtime granted" in text
    assert (
        "memory.max: 2Gi exceeds the 1536Mi the runtime granted (the pod's limit); "
        "allowed: at most 1536Mi; clamped to 1536Mi"
    ) in text


def test_readme_shows_what_make_demo_prints():
    out = nri_plugin("demo")  # as `make demo` runs it: from the repository root
    readme = (REPO / "README.md").read_text()
    block = readme.split("What `make demo` prints", 1)[1].split("```\n", 2)[1]
    assert block == out.stdout


def test_demo_containerd_17_v1():
    out = nri_plugin("demo", "--runtime", "containerd-1.7", "--cgroup", "v1")
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())
    assert "NRI v0.8.0 cannot set it" in text  # sends none: told from its release
    # The demo's node policy lets "trading" use real-time: granted, ancestors raised first.
    assert (
        "trading/feed-handler feed enforced cpu: quota 200000us/100000us, rt "
        "5000us/1000000us rt budget of the ancestors: kubepods 5000us, burstable 5000us, "
        "pod 5000us"
    ) in text


def test_demo_with_the_envvar_strategy_reads_grants_from_the_kubelets_books():
    # The grant reaches the runtime as NVIDIA_VISIBLE_DEVICES alone: nri-sla holds it and
    # aligns to it only through the simulated kubelet's PodResources.
    out = nri_plugin("demo", "--device-list-strategy", "envvar")
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""
    text = " ".join(out.stdout.split())
    assert (
        "ml/inference server enforced granted GPUs 0 (NUMA 0) by the device plugin "
        "opens GPUs 0, nri-sla holds GPUs 0 cpu: quota 400000us/100000us, cpus "
        "0-15,32-47, mems 0"
    ) in text
    assert "opens GPUs 5,6, nri-sla holds GPUs 5,6" in text
    # the runtime accepts the env from any pod: the notebook's is the runtime's leak
    assert (
        "lab/notebook jupyter warned granted no GPU: NVIDIA_VISIBLE_DEVICES=all in the "
        "env is not a grant opens GPUs 0,1,2,3,4,5,6,7, nri-sla holds none"
    ) in text


def test_explain_uses_the_manifests_resources(tmp_path):
    path = pod_file(
        tmp_path,
        {"sla.nri.io/pod": "memory: {max: 1Gi}\ncpu: {exclusive: 2}"},
        limits={"cpu": "1", "memory": "512Mi"},
    )
    out = nri_plugin("explain", "--inventory", DGX, "--cgroup", "v2", path)
    assert out.returncode == 1
    assert (
        "memory.max: 1Gi exceeds the 512Mi the runtime granted (the pod's limit); allowed: "
        "at most 512Mi"
    ) in out.stdout
    assert "cpu.exclusive: 2 exceeds the CPU request the runtime granted (1000m" in out.stdout


def test_node_config_inventory_snapshot_is_used(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text(f"gpu:\n  inventory: {DGX}\n  injection: env\n")
    path = pod_file(tmp_path, {"sla.nri.io/pod": "gpu: {count: 1}"}, limits={"nvidia.com/gpu": 1})
    out = nri_plugin("explain", "--config", str(config), "--cgroup", "v2", "--json", path)
    assert out.returncode == 0, out.stderr
    (result,) = json.loads(out.stdout)
    record = json.loads(result["adjustment"]["annotations.sla.nri.io/applied"])
    assert record["placement_record"]["gpus"] == ["GPU-d0000000-0000-0000-0000-000000000000"]
    assert "env" not in result["adjustment"]  # injection: env is the device plugin's mode


DGX1V = str(REPO / "examples" / "dgx1v.yaml")


def test_explain_gpus_shows_the_preference_and_its_score():
    out = nri_plugin("explain", "--inventory", DGX1V, "--gpus", "2", "--free", "0,1,3")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    # 0-3 are joined by two NVLinks, 0-1 and 1-3 by one
    assert lines[0] == ("GPU preference for 2 GPU(s), topology any, free GPUs 0-1,3: GPU 0, 3")
    assert lines[1] == (
        "  score: NVLinks inside 2, NUMA nodes 1, PCIe closeness 2; left free: "
        "NVLinks 0, PCIe closeness 0"
    )
    out = nri_plugin(
        "explain",
        "--inventory",
        DGX1V,
        "--gpus",
        "6",
        "--topology",
        "nvlink",
        "--must-include",
        "7",
        "--json",
    )
    result = json.loads(out.stdout)
    assert len(result["gpus"]) == 6 and 7 in result["gpus"]
    assert result["search"] == "exhaustive" and result["score"]["nvlink_links"] >= 12


@pytest.mark.parametrize(
    ("args", "rc", "message"),
    [
        (["--gpus", "2", "--topology", "nvlink", "--free", "0,5"], 1, "none satisfies"),
        (["--gpus", "2", "--free", "0,9"], 2, "--free: no GPU 9 on this node (GPUs: 0-7)"),
        (["--gpus", "2", "--must-include", "x"], 2, "--must-include: "),
        (["--gpus", "-1"], 2, "--gpus: -1 must be >= 0"),
        ([], 2, "give pod manifests or --gpus N"),
    ],
)
def test_explain_gpus_errors(args, rc, message):
    out = nri_plugin("explain", "--inventory", DGX1V, *args)
    assert out.returncode == rc
    assert message in out.stdout + out.stderr


def test_explain_says_when_the_kubelet_would_not_admit_the_pod(tmp_path):
    # Two containers of 6 GPUs each on an 8-GPU node: the second is never admitted.
    path = pod_file(tmp_path, {}, containers=("a", "b"), limits={"nvidia.com/gpu": 6})
    out = nri_plugin("explain", "--inventory", DGX, "--cgroup", "v2", path)
    assert out.returncode == 1
    assert (
        "ml/p / b: not admitted\n  error: pod ml/p: Allocate failed due to requested "
        "number of devices unavailable for nvidia.com/gpu. Requested: 6, Available: 2"
    ) in out.stdout


def test_demo_shows_a_pod_the_kubelet_does_not_admit(tmp_path):
    first = pod_file(tmp_path, {}, limits={"nvidia.com/gpu": 6})
    second = tmp_path / "second.yaml"
    second.write_text(Path(first).read_text().replace('"name": "p"', '"name": "q"'))
    out = nri_plugin("demo", first, str(second))
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())
    assert (
        "ml/p work enforced granted GPUs 0,1,2,3,4,5 (NUMA 0,1) by the device plugin "
        "opens GPUs 0,1,2,3,4,5" in text
    )
    assert (
        "ml/q work NOT ADMITTED pod ml/q: Allocate failed due to requested number of "
        "devices unavailable for nvidia.com/gpu. Requested: 6, Available: 2"
    ) in text


def test_validate_refuses_a_container_key_naming_no_container(tmp_path):
    # The plugin sees one container at a time and cannot tell; validate sees the pod.
    path = pod_file(
        tmp_path,
        {
            "sla.nri.io/container.ap": "cpu: {limit: 1}",
            "sla.nri.io/container.sidecar": "cpu: {limit: 1}",
        },
        containers=("app", "sidecar"),
    )
    out = nri_plugin("validate", path)
    assert out.returncode == 1, out.stderr
    assert (
        f"{path}: Pod/p: sla.nri.io/container.ap: names container ap, which this pod "
        "does not have (its containers: app, sidecar); did you mean "
        "sla.nri.io/container.app?"
    ) in out.stdout.splitlines()
    assert out.stdout.splitlines()[-1] == (
        "1 manifests, 2 containers: 2 ok, 0 refused, 0 warned; 1 pods with annotations "
        "naming no container (exit status 1)"
    )
    doc = json.loads(nri_plugin("validate", "--json", path).stdout)
    assert (doc["containers"], doc["pod_problems"]) == (2, 1)
    assert (
        nri_plugin(
            "validate",
            pod_file(
                tmp_path, {"sla.nri.io/container.app": "cpu: {limit: 1}"}, containers=("app",)
            ),
        ).returncode
        == 0
    )


def test_demo_help_states_the_defaults_it_uses():
    def flat(text: str) -> str:  # argparse wraps paths at '-': compare without blanks
        return "".join(text.split())

    text = flat(nri_plugin("demo", "--help").stdout)
    assert flat(f"node config file (default {REPO / 'examples' / 'demo-config.yaml'})") in text
    assert flat("instead of this host's (default v2)") in text
    assert flat(f"(default {DGX})") in text
    assert "/etc/nri-sla/config.yaml" not in text  # explain's and run's default, not the demo's
    explain = flat(nri_plugin("explain", "--help").stdout)
    assert flat("(default /etc/nri-sla/config.yaml if present)") in explain


def test_demo_verbose_logs_decisions_with_their_fields():
    out = nri_plugin("demo", "--verbose", "examples/pods/30-web.yaml")
    assert out.returncode == 0, out.stderr
    [line] = [x for x in out.stderr.splitlines() if 'msg="sla decision"' in x]
    assert line.endswith(
        'pod=shop/web container=web path=nri outcome=refused applied="" '
        'warnings="" error="sla.nri.io/container.web: memory.high (12Gi) '
        'must be below memory.max (10Gi)"'
    )


CI_MANIFEST = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  annotations:
    sla.nri.io/pod: "cpu: {limit: 1}"
spec:
  template:
    metadata:
      annotations:
        sla.nri.io/pod: "cpu: {limit: 2}"
    spec:
      containers:
      - {name: app, resources: {limits: {cpu: "2"}}}
      - {name: proxy, resources: {limits: {cpu: 100m}}}
---
apiVersion: v1
kind: Pod
metadata: {name: typo}
spec:
  containers:
  - {name: a, resources: {limits: {cpu: abc}}}
---
apiVersion: batch/v1
kind: CronJob
metadata: {name: nightly, annotations: {sla.nri.io/enforcement: soft}}
spec:
  jobTemplate:
    spec:
      template:
        spec:
          containers: [{name: job}]
"""


def test_validate_checks_every_document_of_stdin_and_says_why_it_fails():
    out = subprocess.run(
        [sys.executable, "-m", "nri_plugin.cli", "validate", "-"],
        input=CI_MANIFEST,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    # A document that cannot be read is reported on its own; the ones after it are checked.
    assert out.stderr.splitlines() == [
        "error: <stdin>[1]: Pod/typo: spec.containers[0].resources.limits.cpu must be CPUs "
        "like 2.5 or 2500m, got abc"
    ]
    web, job = "<stdin>[0]: Deployment/web", "<stdin>[2]: CronJob/nightly"
    assert out.stdout.splitlines() == [
        f"{web} container app: ok",
        f"{web} container proxy: sla.nri.io/pod: cpu.limit: 2 exceeds the 0.1 CPUs the "
        "runtime granted (the pod's limit, quota 10000us per 100000us); allowed: at most 0.1",
        f"{web} container proxy: hint: sla.nri.io/pod applies to each of the pod's "
        "containers; give this one its own SLA with sla.nri.io/container.proxy",
        f"{web}: warning: sla.nri.io/pod: on the workload's own metadata.annotations, which "
        "no pod gets; put it under spec.template.metadata.annotations",
        f"{job} container job: no SLA",
        f"{job}: warning: sla.nri.io/enforcement: on the workload's own "
        "metadata.annotations, which no pod gets; put it under "
        "spec.jobTemplate.spec.template.metadata.annotations",
        "1 manifests, 3 containers: 2 ok, 1 refused, 0 warned; 2 workloads with SLA "
        "annotations on their own metadata; 1 manifests or documents not read "
        "(exit status 2)",
    ]
    assert out.returncode == 2  # unreadable input wins over a refusal


@pytest.mark.parametrize(
    "kind", ["Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "CronJob"]
)
def test_validate_checks_workloads_through_their_pod_templates(tmp_path, kind):
    path = pod_file(tmp_path, {"sla.nri.io/pod": "cpu: {limit: 2}"}, kind, limits={"cpu": "1"})
    out = nri_plugin("validate", "--json", path)
    assert out.returncode == 1, out.stderr
    [result] = json.loads(out.stdout)["results"]
    assert (result["container"], result["outcome"]) == ("work", "refused")
    assert result["problems"][0].startswith("sla.nri.io/pod: cpu.limit: 2 exceeds the 1 CPUs")
    assert result["hint"] == ""  # one container: the pod's SLA is meant for it


def test_validate_exit_status_is_stable_across_outcomes(tmp_path):
    ok = pod_file(tmp_path, {"sla.nri.io/pod": "cpu: {limit: 1}"}, limits={"cpu": "1"})
    warned = tmp_path / "warned.yaml"
    warned.write_text(
        Path(ok).read_text().replace("cpu: {limit: 1}", "enforcement: soft\\ncpu: {limit: 2}")
    )
    refused = pod_file(tmp_path, {"sla.nri.io/pod": "cpu: {limit: 2}"}, "Job", limits={"cpu": "1"})
    for files, status in (
        ([ok], 0),
        ([ok, str(warned)], 0),
        ([warned, refused], 1),
        ([refused, str(tmp_path / "none.yaml")], 2),
    ):
        out = nri_plugin("validate", *map(str, files))
        assert out.returncode == status, (files, out.stdout, out.stderr)
        assert out.stdout.splitlines()[-1].endswith(f"(exit status {status})")
