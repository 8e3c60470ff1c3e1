"""The metrics endpoint cannot be turned against the node, against a real
containerd: while one client resets 200 connections and then holds the metrics port's 16
connections (re-opened as they drop), pods are created through nri-sla; the kubelet-style
probes on the probe listener answer 200 throughout, every pod gets its SLA, the plugin's
log holds at most a few lines about the peers and no traceback, and the per-container
series cap leaves the small namespace's series in place.
"""

from __future__ import annotations

import threading
import time

import pytest

from tests.e2e.e2e_metrics import free_port, scrape
from tests.support.http_flood import HeldConnections, probe, resetting_requests

pytestmark = pytest.mark.e2e
PLUGIN = "50-nri-sla"
LOCAL = "127.0.0.1"
SLA = "cpu: {limit: 0.5, period: 100ms}\nmemory: {max: 256Mi}\n"
NODE_CONFIG = """\
enforcement: hard
cgroup: {driver: cgroupfs}
nri: {reconnect-max-seconds: 1}
watch: {interval-seconds: 1, metrics-containers: 3}
"""


@pytest.fixture
def isolated_plugin(cluster, plugins, sla_plugin_argv):
    """nri-sla with its metrics port and its probe listener on two local ports."""
    metrics_port = free_port()
    health_port = free_port()
    while health_port == metrics_port:
        health_port = free_port()
    config = cluster.base / "nri-sla.yaml"
    config.write_text(
        NODE_CONFIG + f"state-dir: {cluster.base / 'nri-sla-state'}\n"
        f"status: {{socket: {cluster.base / 'status.sock'}}}\n"
    )
    proc = plugins.start(
        [
            *sla_plugin_argv,
            "--config",
            str(config),
            "--socket",
            str(cluster.nri_sock),
            "--metrics-address",
            f"{LOCAL}:{metrics_port}",
            "--health-address",
            f"{LOCAL}:{health_port}",
        ],
        "nri-sla",
    )
    cluster.wait_plugin_synchronized(PLUGIN)
    proc.wait_output(r"synchronized: 0 pods")
    proc.metrics_port, proc.health_port = metrics_port, health_port
    return proc


class Prober:
    """The kubelet: /healthz and /readyz on the probe listener, one each every 0.2 s,
    each on a new connection with a 1 s timeout."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.results: list[tuple[str, object]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            for path in ("/healthz", "/readyz"):
                self.results.append((path, probe(LOCAL, self.port, path, timeout=1.0)))
            time.sleep(0.2)

    def __enter__(self) -> Prober:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)


def test_probes_slas_and_logs_hold_under_a_flood_on_the_metrics_port(cluster, isolated_plugin):
    plugin = isolated_plugin
    pods = []
    with Prober(plugin.health_port) as prober:
        # 1. connections that send a request and reset before the answer
        resetting_requests(LOCAL, plugin.metrics_port, 200)
        pods.append(cluster.run_pod("batch-0", {"sla.nri.io/pod": SLA}, namespace="batch"))
        # 2. the metrics port's 16 connections held, re-opened as they drop (< 10/s)
        with HeldConnections(LOCAL, plugin.metrics_port, 16, rate=9) as held:
            assert probe(LOCAL, plugin.metrics_port).status == 503  # the flood bites
            for name, namespace in (("batch-1", "batch"), ("batch-2", "batch"), ("web", "prod")):
                pods.append(cluster.run_pod(name, {"sla.nri.io/pod": SLA}, namespace=namespace))
            time.sleep(12)  # past the metrics server's 10 s deadline: the flood re-opens
            opened = held.opened
    results = prober.results
    took = sorted(r.seconds for _, r in results)
    print(
        f"evidence: {len(results)} probes during the flood ({opened} held connections "
        f"opened), statuses {sorted({(p, r.status) for p, r in results})}, latency "
        f"median {took[len(took) // 2] * 1000:.1f} ms, max {took[-1] * 1000:.1f} ms"
    )
    assert opened > 16  # the flood re-opened what the deadline cut
    assert len(results) >= 40
    assert all(r.status == 200 for _, r in results), [x for x in results if x[1].status != 200]
    assert took[-1] < 1.0
    for pc in pods:
        values = cluster.cgroup(pc)
        assert (values.cpu_quota, values.cpu_period, values.memory_limit) == (
            50000,
            100000,
            268435456,
        )
    log = plugin.output()
    peers = [ln for ln in log.splitlines() if "HTTP connections failed" in ln]
    print(
        f"evidence: plugin log {len(log.splitlines())} lines, {len(peers)} about peers:",
        *peers,
        sep="\n  ",
    )
    assert 1 <= len(peers) <= 2 and "listener=metrics" in peers[0]
    assert "Traceback" not in log and "Exception occurred during processing" not in log
    # 3. the cap of 3 per-container series, shared: prod keeps its one, batch loses one
    deadline = time.monotonic() + 15
    while True:
        samples = scrape(plugin.metrics_port)
        web = samples.get(
            "nri_sla_container_cpu_limit_cores", namespace="prod", pod="web", container="work"
        )
        if web is not None or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert web == 0.5
    assert samples.get("nri_sla_containers_unexported") == 1
    assert samples.get("nri_sla_namespace_containers_unexported", namespace="batch") == 1
    batch = [
        p
        for p in ("batch-0", "batch-1", "batch-2")
        if samples.get(
            "nri_sla_container_cpu_limit_cores", namespace="batch", pod=p, container="work"
        )
    ]
    assert batch == ["batch-0", "batch-1"]
    print(f"evidence: series for prod/web and {batch}; batch-2 counted unexported")
    plugin.wait_output(r"per-container series capped")
