"""Kubernetes Events from `nri-sla run` beside a real containerd: a refused container (the
kubelet retrying it) and a soft-clamped one become the Events a kubelet-side reader
(`kubectl describe pod`) would see. No API server exists here: the plugin's in-cluster
configuration (KUBERNETES_SERVICE_HOST/PORT, a service account's token and CA) points at
the local HTTPS server of tests/support/kube_api.py, which checks every Event against the
Kubernetes schema.
"""

from __future__ import annotations

import json
import time

import pytest

from tests.e2e.e2e_cluster import NAMESPACE
from tests.e2e.e2e_metrics import free_port, scrape
from tests.e2e.e2e_sla_cases import GREEDY, KUBELET_LIMITS
from tests.support.kube_api import FakeApiServer

pytestmark = pytest.mark.e2e
PLUGIN = "50-nri-sla"
RETRIES = 3  # CreateContainer attempts for the refused container, as the kubelet retries


def described(api: FakeApiServer, name: str, uid: str) -> list[dict]:
    """The events `kubectl describe pod` lists for the pod: those whose involvedObject is
    that pod (kind, namespace, name and uid), oldest first."""
    events = [
        e
        for e in api.events.values()
        if e["involvedObject"]["kind"] == "Pod"
        and (
            e["involvedObject"]["namespace"],
            e["involvedObject"]["name"],
            e["involvedObject"]["uid"],
        )
        == (NAMESPACE, name, uid)
    ]
    events.sort(key=lambda e: e["firstTimestamp"])
    for e in events:
        print(
            f"evidence: {name}: {e['type']} {e['reason']} x{e['count']} from "
            f"{e['source']['component']} on {e['source']['host']}: {e['message']}"
        )
    return events


def pod_uid(cluster, name: str) -> str:
    return json.loads((cluster.base / "pods" / name / "pod.json").read_text())["metadata"]["uid"]


def test_refused_and_clamped_containers_are_events_on_their_pods(
    cluster, plugins, sla_plugin_argv, tmp_path, monkeypatch
):
    with FakeApiServer(tmp_path) as api:
        account = api.service_account(tmp_path / "serviceaccount")
        for key, value in {**api.environ(), "NODE_NAME": "e2e-node"}.items():
            monkeypatch.setenv(key, value)  # the plugin's environment, as in its pod
        port = free_port()
        config = cluster.base / "nri-sla.yaml"
        config.write_text(
            "enforcement: hard\ncgroup: {driver: cgroupfs}\n"
            f"state-dir: {cluster.base / 'nri-sla-state'}\n"
            f"events: {{enabled: true, service-account: {account}}}\n"
        )
        plugin = plugins.start(
            [
                *sla_plugin_argv,
                "--config",
                str(config),
                "--socket",
                str(cluster.nri_sock),
                "--metrics-address",
                f"127.0.0.1:{port}",
            ],
            "nri-sla",
        )
        cluster.wait_plugin_synchronized(PLUGIN)
        print("evidence: plugin log:", *plugin.wait_output(r"Kubernetes Events on"))

        files = cluster.pod_files("greedy", {"sla.nri.io/pod": GREEDY}, resources=KUBELET_LIMITS)
        pod_id = cluster.run_sandbox(files)
        refusals = []
        for _ in range(RETRIES):
            with pytest.raises(cluster.Error) as err:
                cluster.create_container(pod_id, files)
            refusals.append(str(err.value))
        print("evidence: refused:", refusals[0])
        soft = cluster.run_pod(
            "greedy-soft",
            {"sla.nri.io/pod": "enforcement: soft\n" + GREEDY},
            resources=KUBELET_LIMITS,
        )
        assert soft.container_id

        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not (
            len(api.events) == 2 and max(e["count"] for e in api.events.values()) == RETRIES
        ):
            time.sleep(0.1)
        assert api.problems == []
        (refused,) = described(api, "greedy", pod_uid(cluster, "greedy"))
        (clamped,) = described(api, "greedy-soft", pod_uid(cluster, "greedy-soft"))
        samples = scrape(port)

    assert (refused["type"], refused["reason"], refused["count"]) == (
        "Warning",
        "SLARefused",
        RETRIES,
    )
    assert refused["involvedObject"]["fieldPath"] == "spec.containers{work}"
    assert refused["source"] == {"component": "nri-sla", "host": "e2e-node"}
    # The same refusal the runtime returned to the kubelet (containerd wraps it).
    text = refused["message"].removeprefix("container not created: ")
    assert text != refused["message"] and text in refusals[0]
    assert "cpu.limit: 64 exceeds the 0.5 CPUs the runtime granted" in text
    assert (clamped["type"], clamped["reason"], clamped["count"]) == ("Warning", "SLAClamped", 1)
    assert clamped["message"].startswith("SLA not applied as asked: ")
    assert "cpu.limit: 64 exceeds the 0.5 CPUs the runtime granted" in clamped["message"]
    # One POST per event, the refusal's repeats PATCHed.
    assert samples.get("nri_sla_events_sent_total", verb="created") == 2
    assert samples.get("nri_sla_events_sent_total", verb="patched") == RETRIES - 1
    assert samples.get("nri_sla_events_dropped_total", reason="failed") == 0
