"""Hostile manifests for `nri-sla validate` / `explain`: bounded cost, exit 2, one line."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import pytest

from nri_plugin.commands.manifests import (
    MAX_MANIFEST_BYTES,
    MAX_MANIFEST_CONTAINERS,
    MAX_MANIFEST_DEPTH,
    MAX_MANIFEST_DOCUMENTS,
    MAX_MANIFEST_NODES,
    ManifestError,
    load_pods,
)
from nri_plugin.sla.parse import MAX_VALUES

REPO = Path(__file__).resolve().parents[2]
DGX = str(REPO / "examples" / "dgx-like.yaml")

# Nine levels of nine: 387,420,489 strings once the plain loader expands it.
ALIAS_BOMB = """apiVersion: v1
kind: Pod
metadata:
  name: bomb
  annotations:
    a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
    b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
    c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
    d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
    e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
    f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
    g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
    h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
    i: [*h,*h,*h,*h,*h,*h,*h,*h,*h]
spec:
  containers: [{name: c}]
"""

HOSTILE = {
    "alias-bomb.yaml": (ALIAS_BOMB, "metadata.annotations.a uses a YAML anchor or alias"),
    "deep-flow.yaml": ("[" * 200_000, "nest"),
    "deep-block.yaml": (
        "".join(" " * i + "a:\n" for i in range(200)),
        f"is nested more than {MAX_MANIFEST_DEPTH} levels deep",
    ),
    "many-values.yaml": (
        "[" + "1," * (MAX_MANIFEST_NODES + 10) + "1]",
        f"has more than {MAX_MANIFEST_NODES} values",
    ),
    "many-documents.yaml": (
        "---\n" * (MAX_MANIFEST_DOCUMENTS + 10),
        f"holds more than {MAX_MANIFEST_DOCUMENTS} YAML documents",
    ),
    "python-tag.yaml": (
        "kind: !!python/object/apply:os.system ['true']\n",
        "has an explicit YAML tag",
    ),
    "duplicate.yaml": ("kind: Pod\nkind: Pod\n", "kind is given twice"),
    "broken.yaml": ("kind: Pod\nmetadata: [unclosed", "is not valid YAML"),
}


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "nri_plugin.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_manifest_is_one_line_error_in_bounded_time_and_memory(tmp_path, name):
    text, fragment = HOSTILE[name]
    path = tmp_path / name
    path.write_text(text)
    tracemalloc.start()
    # CPU time, not wall time: a busy CI box stretches the wall clock, not the work.
    start = time.process_time()
    try:
        with pytest.raises(ManifestError) as info:
            load_pods(path)
    finally:
        elapsed = time.process_time() - start
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    message = str(info.value)
    assert message.startswith(f"{path}: ") and "\n" not in message
    assert fragment in message
    assert len(message) < 4096
    # The plain loader spent GBs (alias bomb) or hit RecursionError (deep nesting);
    # bounded, the worst case is the 256Ki-value cap: ~12 MB traced and ~1 s of CPU traced.
    assert peak < 64 << 20, f"{peak} bytes"
    # Generous: tracemalloc makes the 256Ki-value case cost ~12 s of CPU on a loaded
    # 2-core box; unbounded inputs never finish (deep nesting, alias bombs).
    assert elapsed < 60, f"{elapsed:.2f}s"


@pytest.mark.parametrize("command", ["validate", "explain"])
def test_cli_exits_2_with_one_line_naming_file_and_problem(tmp_path, command):
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(ALIAS_BOMB)
    deep = tmp_path / "deep.yaml"
    deep.write_text("[" * 100_000)
    extra = ("--inventory", DGX) if command == "explain" else ()
    for path, fragment in ((bomb, "anchor or alias"), (deep, "nest")):
        start = time.perf_counter()
        out = run_cli(command, *extra, str(path))
        assert time.perf_counter() - start < 30
        assert out.returncode == 2, out.stderr
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1, out.stderr
        assert str(path) in lines[0] and fragment in lines[0]
        assert "Traceback" not in out.stderr


def test_reading_stops_at_the_size_limit(tmp_path):
    big = tmp_path / "big.yaml"
    with big.open("wb") as f:  # sparse: no disk, and st_size alone is not trusted
        f.truncate(MAX_MANIFEST_BYTES + 1)
    with pytest.raises(ManifestError, match=f"larger than {MAX_MANIFEST_BYTES} bytes"):
        load_pods(big)
    start = time.perf_counter()
    with pytest.raises(ManifestError, match="larger than"):
        load_pods("/dev/zero")  # endless, st_size 0
    assert time.perf_counter() - start < 5
    latin = tmp_path / "latin1.yaml"
    latin.write_bytes(b"kind: Pod\nmetadata: {name: caf\xe9}\n")
    with pytest.raises(ManifestError, match=r"not UTF-8 text \(byte 30\)"):
        load_pods(latin)


def test_real_multi_document_manifests_still_load(tmp_path):
    # A CRD-like schema 30 levels deep, a Service and a Deployment in one file.
    schema = "x"
    for _ in range(28):
        schema = f"{{properties: {{p: {schema}}}}}"
    text = f"""apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {{name: things.example.com}}
spec: {{versions: [{{name: v1, schema: {{openAPIV3Schema: {schema}}}}}]}}
---
apiVersion: v1
kind: Service
metadata: {{name: web}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: web, namespace: shop}}
spec:
  template:
    metadata:
      annotations:
        sla.nri.io/pod: |
          cpu: {{limit: 2}}
          memory: {{max: 1Gi}}
        on: yes
    spec:
      containers:
      - name: app
        env: [{{name: MODE, value: fast}}]
"""
    path = tmp_path / "all.yaml"
    path.write_text(text)
    [pod] = load_pods(path)
    assert (pod.namespace, pod.name, pod.containers) == ("shop", "web", ("app",))
    assert pod.annotations["sla.nri.io/pod"] == "cpu: {limit: 2}\nmemory: {max: 1Gi}\n"
    assert pod.annotations["on"] == "yes"  # YAML 1.2: not a boolean
    assert pod.environments == {"app": {"MODE": "fast"}}
    out = run_cli("validate", str(path))
    assert out.returncode == 0 and "container app: ok" in out.stdout


def test_validate_lists_ten_problems_and_counts_the_rest(tmp_path):
    doc = "".join(f"k{i}: 1\\n" for i in range(50))
    path = tmp_path / "pod.yaml"
    path.write_text(
        '{"kind": "Pod", "metadata": {"name": "p", "annotations": '
        f'{{"sla.nri.io/pod": "{doc}"}}}}, "spec": {{"containers": '
        '[{"name": "c"}]}}'
    )
    out = run_cli("validate", str(path))
    assert out.returncode == 1
    lines = out.stdout.splitlines()
    assert len(lines) == 12
    assert lines[-2].endswith("container c: ... and 40 more problems")
    assert lines[-1] == "1 manifests, 1 containers: 0 ok, 1 refused, 0 warned (exit status 1)"


# SLA text near the parser's value bound, refused for an unknown field: parsed in full.
HEAVY_SLA = "cpu: {limit: 1}\nzzz: [" + ",".join(["100"] * (MAX_VALUES - 8)) + "]\n"


def heavy_manifest(path: Path, containers: int) -> Path:
    """One pod, the heavy annotation, `containers` containers written `- {}`."""
    head = (
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: heavy\n  annotations:\n"
        f"    sla.nri.io/pod: {json.dumps(HEAVY_SLA)}\nspec:\n  containers:\n"
    )
    path.write_text(head + "  - {}\n" * containers)
    return path


@pytest.mark.parametrize("command", ["validate", "explain"])
def test_an_annotation_is_parsed_once_per_manifest_however_many_containers(tmp_path, command):
    # At the container bound: one parse, then lookups (one parse per container took 2-4
    # minutes on the development VM; this takes about a second of CPU).
    path = heavy_manifest(tmp_path / "heavy.yaml", MAX_MANIFEST_CONTAINERS)
    extra = ("--inventory", DGX) if command == "explain" else ()
    start = time.perf_counter()
    out = run_cli(command, *extra, str(path))
    assert time.perf_counter() - start < 30
    assert out.returncode == 1, out.stderr
    assert out.stdout.count("zzz is not a known field") == MAX_MANIFEST_CONTAINERS


@pytest.mark.parametrize("command", ["validate", "explain"])
def test_past_the_container_bound_is_one_line_at_once(tmp_path, command):
    # 1.4 MB: the heavy annotation and 200,000 containers (an hour of parsing, once).
    path = heavy_manifest(tmp_path / "huge.yaml", 200_000)
    assert path.stat().st_size > 1_400_000
    extra = ("--inventory", DGX) if command == "explain" else ()
    start = time.perf_counter()
    out = run_cli(command, *extra, str(path))
    assert time.perf_counter() - start < 30
    assert out.returncode == 2
    assert out.stderr.splitlines() == [
        f"{'error: ' if command == 'validate' else 'nri-sla explain: '}{path}: holds more "
        f"than {MAX_MANIFEST_CONTAINERS} containers; at most that many are checked per "
        "manifest"
    ]
