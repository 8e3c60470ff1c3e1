"""Kubernetes Events on the pods nri-sla refuses, clamps, repairs or finds unenforced: the
real plugin over a real NRI socket (the runtime simulator), its events sent over HTTPS to
a local API server that checks each against the Kubernetes schema
(tests/support/kube_api.py), correlated as the kubelet's recorder does; an API server that
is down, slow or refusing costs events (counted), never an answer or its time."""

from __future__ import annotations

import asyncio
import socket
import statistics
import subprocess
import sys
import time

import pytest

from nri_plugin.config.values import EventsConfig
from nri_plugin.nri.pb import nri_pb2 as pb
from nri_plugin.ops.kube_api import ApiServer, InvolvedPod
from nri_plugin.ops.kube_events import COMBINED, Correlator, make_event
from nri_plugin.ops.kube_sender import EventRecorder
from nri_plugin.ops.metrics import Metrics
from nri_plugin.plugin.errors import EventsUnavailable
from nri_plugin.plugin.pod_events import PodEvents, pod_events
from nri_plugin.simulated.runtime import PluginCallError, make_container, make_pod
from tests.plugin.test_drift import started
from tests.support.kube_api import FakeApiServer
from tests.support.plugin_helpers import gpu_grant, make_node, permissive_node, plugin_session

TWO_GPUS = "gpu: {count: 2}"  # with a grant of one GPU: refused (hard), warned (soft)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


@pytest.fixture
def api(tmp_path):
    with FakeApiServer(tmp_path) as server:
        yield server


def recorder_for(
    api: FakeApiServer,
    tmp_path,
    metrics: Metrics,
    *,
    port: int | None = None,
    queue_size: int = 100,
    timeout=(2.0, 5.0),
) -> EventRecorder:
    environ = api.environ() | ({"KUBERNETES_SERVICE_PORT": str(port)} if port else {})
    server = ApiServer.in_cluster(str(api.service_account(tmp_path / "sa")), environ)
    assert server is not None
    return EventRecorder(
        server, metrics, host="node-1", queue_size=queue_size, qps=100, burst=100, timeout=timeout
    )


def sent(metrics: Metrics, result: str, reason: str) -> float:
    label = "verb" if result == "sent" else "reason"
    return metrics.value(f"nri_sla_events_{result}_total", **{label: reason}) or 0.0


async def create(
    session, name: str, sla: str = TWO_GPUS, mode: str = "hard", namespace: str = "team-a"
):
    """CreateContainer for container "c" of pod `name`: (pod, the answer or the refusal)."""
    pod = make_pod(
        name,
        namespace=namespace,
        annotations={"sla.nri.io/pod": sla, "sla.nri.io/enforcement": mode},
    )
    await session.run_pod_sandbox(pod)
    try:
        return pod, await session.create_container(
            pod, make_container(pod, "c", cdi_devices=gpu_grant(1))
        )
    except PluginCallError as exc:
        return pod, exc


def test_refusal_and_clamp_are_schema_valid_events_on_the_pod(tmp_path, api):
    metrics = Metrics()
    events = PodEvents(recorder_for(api, tmp_path, metrics))

    async def scenario():
        async with plugin_session(make_node(2), tmp_path, events=events) as (_, session, _p):
            return await create(session, "hard"), await create(session, "soft", mode="soft")

    (hard, refusal), (soft, answer) = run(scenario())
    assert isinstance(refusal, PluginCallError)
    assert "sla.nri.io/warnings" in answer.adjust.annotations  # created, warned
    by_reason = {e["reason"]: e for e in api.wait_for(2)}
    events.close()
    assert api.problems == []
    assert set(by_reason) == {"SLARefused", "SLAClamped"}
    refused, clamped = by_reason["SLARefused"], by_reason["SLAClamped"]
    for event, pod in ((refused, hard), (clamped, soft)):
        assert event["involvedObject"] == {
            "apiVersion": "v1",
            "kind": "Pod",
            "namespace": "team-a",
            "name": pod.name,
            "uid": pod.uid,
            "fieldPath": "spec.containers{c}",
        }
        assert event["type"] == "Warning" and event["count"] == 1
        assert event["source"] == {"component": "nri-sla", "host": "node-1"}
        assert event["metadata"]["namespace"] == "team-a"
    # What the runtime told the kubelet, and what the warnings annotation says.
    assert refused["message"] == f"container not created: {refusal.message}"
    assert clamped["message"] == (
        "SLA not applied as asked: " + answer.adjust.annotations["sla.nri.io/warnings"]
    )
    assert "gpu" in clamped["message"]
    assert sent(metrics, "sent", "created") == 2


def test_identical_refusals_are_one_event_with_their_count(tmp_path, api):
    """The kubelet retries a refused container: N identical refusals are one Event, posted
    once and its count patched N-1 times, as the kubelet's recorder would."""
    metrics = Metrics()
    events = PodEvents(recorder_for(api, tmp_path, metrics))
    retries = 6

    async def scenario():
        async with plugin_session(make_node(2), tmp_path, events=events) as (_, session, _p):
            for _ in range(retries):
                _, refusal = await create(session, "retried")
                assert isinstance(refusal, PluginCallError)

    run(scenario())
    assert events.recorder.flush(10)
    events.close()
    (event,) = api.events.values()
    assert event["count"] == retries and event["reason"] == "SLARefused"
    assert event["firstTimestamp"] <= event["lastTimestamp"]
    assert [m for m, _, _ in api.requests] == ["POST"] + ["PATCH"] * (retries - 1)
    assert api.problems == []
    assert (sent(metrics, "sent", "created"), sent(metrics, "sent", "patched")) == (1, 5)


def test_similar_messages_combine_and_spam_is_filtered():
    """The kubelet recorder's rules: the 10th distinct message of one reason about one
    object within 10 minutes becomes a combined event, counted from then on; a source
    gets 25 events per object, then one every 5 minutes."""
    now = [0.0]
    correlator = Correlator(clock=lambda: now[0])
    pod = InvolvedPod("ns", "p", "uid-1", "c")
    results = [
        correlator.correlate(
            make_event(pod, "Warning", "SLAClamped", f"m{i}", host="n", now=1000.0 + i)
        )
        for i in range(12)
    ]
    assert all(r is not None for r in results)
    assert [r.patch is None for r in results] == [True] * 10 + [False] * 2
    assert [r.event["message"] for r in results[8:]] == [
        "m8",
        COMBINED + "m9",
        COMBINED + "m10",
        COMBINED + "m11",
    ]
    assert results[11].event["count"] == 3
    assert results[11].event["metadata"]["name"] == results[9].event["metadata"]["name"]
    # 25 in all about this pod: the 26th is skipped until the bucket refills.
    more = [
        correlator.correlate(
            make_event(pod, "Normal", "SLADriftRepaired", f"r{i}", host="n", now=2000.0)
        )
        for i in range(14)
    ]
    assert sum(r is not None for r in more) == 13 and more[-1] is None
    now[0] += 300
    assert (
        correlator.correlate(make_event(pod, "Normal", "X", "y", host="n", now=2300.0)) is not None
    )
    # Ten minutes after the last similar one, messages count from one again.
    now[0] += 601
    fresh = correlator.correlate(
        make_event(
            InvolvedPod("ns", "q", "uid-2"), "Warning", "SLAClamped", "m99", host="n", now=3000.0
        )
    )
    assert fresh is not None and fresh.event["message"] == "m99"


def test_a_patch_of_an_event_the_server_lost_creates_it_again(tmp_path, api):
    metrics = Metrics()
    recorder = recorder_for(api, tmp_path, metrics)
    pod = InvolvedPod("team-a", "p", "uid-1", "c")
    recorder.record(pod, "Warning", "SLARefused", "no")
    assert recorder.flush(10)
    api.events.clear()  # expired (the API server keeps events an hour)
    recorder.record(pod, "Warning", "SLARefused", "no")
    assert recorder.flush(10)
    recorder.close()
    assert [(m, s) for m, _, s in api.requests] == [("POST", 201), ("PATCH", 404), ("POST", 201)]
    (event,) = api.events.values()
    assert event["count"] == 2 and api.problems == []


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("failure", ["down", 403, 500])
def test_an_unusable_api_server_costs_events_not_answers(tmp_path, api, failure):
    """Down (nothing listens), refusing (403: no RBAC) or failing (500): each event is
    dropped and counted, the plugin answers as without events."""
    metrics = Metrics()
    port = free_port() if failure == "down" else None
    if failure != "down":
        api.status = failure
    events = PodEvents(recorder_for(api, tmp_path, metrics, port=port))

    async def scenario():
        async with plugin_session(make_node(2), tmp_path, events=events) as (_, session, _p):
            results = [
                await create(session, f"p{i}", mode=("soft", "hard")[i % 2]) for i in range(4)
            ]
            later = await create(session, "fits", sla="cpu: {limit: 100m}")
            return results, later

    results, (_, fits) = run(scenario())
    assert events.recorder.flush(20)
    events.close()
    assert [type(r).__name__ for _, r in results] == [
        "CreateContainerResponse",
        "PluginCallError",
    ] * 2
    assert fits.adjust.annotations["sla.nri.io/applied"]
    reason = {"down": "unreachable", 403: "client_error", 500: "server_error"}[failure]
    assert sent(metrics, "failed", reason) == 4
    assert sent(metrics, "dropped", "failed") == 4
    assert sent(metrics, "sent", "created") == 0 and api.events == {}


@pytest.mark.slow
def test_a_slow_api_server_does_not_delay_create_container(tmp_path, api, capsys):
    """Each answer's time with events going to an API server that answers after 2 s, and
    without events: the same. What the queue cannot hold is dropped, and what the API
    server does not answer in time (here 0.5 s) fails: both counted."""
    api.delay = 2.0
    creates = 16

    async def timed(events: PodEvents | None) -> list[float]:
        times = []
        async with plugin_session(make_node(2), tmp_path, events=events) as (_, session, _p):
            for i in range(creates):
                started_at = time.perf_counter()
                _, refusal = await create(session, f"p{i}")
                times.append(time.perf_counter() - started_at)
                assert isinstance(refusal, PluginCallError)
        return times

    metrics = Metrics()
    events = PodEvents(recorder_for(api, tmp_path, metrics, queue_size=4, timeout=(2.0, 0.5)))
    without = run(timed(None))
    with_events = run(timed(events))
    assert events.recorder.flush(10)
    events.close()
    slowest = max(with_events)
    with capsys.disabled():
        print(
            f"\nCreateContainer round trip, median ms: without events "
            f"{statistics.median(without) * 1e3:.2f}, with a 2 s API server "
            f"{statistics.median(with_events) * 1e3:.2f} (slowest {slowest * 1e3:.1f})"
        )
    # No answer waited for the API server; how fast they are is bench work, not a test's.
    assert slowest < api.delay / 2
    # One in flight, four queued: the rest dropped for a full queue.
    timeouts, full = sent(metrics, "failed", "timeout"), sent(metrics, "dropped", "queue_full")
    assert timeouts + full == creates and full >= creates - 6
    assert sent(metrics, "dropped", "failed") == timeouts >= 1


def test_drift_and_its_repair_are_events(tmp_path, v1_tree, api):
    from nri_plugin.config.values import WatchConfig

    metrics = Metrics()
    events = PodEvents(recorder_for(api, tmp_path, metrics))
    node = make_node(1, v1_tree, watch=WatchConfig(interval=30))

    async def scenario():
        async with plugin_session(node, tmp_path, events=events) as (_, session, plugin):
            pod, _, dirs = await started(session, plugin, node, v1_tree, "api", "io: {weight: 500}")
            (dirs["blkio"] / "blkio.bfq.weight").write_text("100")
            plugin.drift_pass()
            return pod

    pod = run(scenario())
    by_reason = {e["reason"]: e for e in api.wait_for(2)}
    events.close()
    assert api.problems == []
    drift, repaired = by_reason["SLADrift"], by_reason["SLADriftRepaired"]
    assert drift["message"].startswith("blkio/blkio.bfq.weight is 100, the SLA sets ")
    assert drift["message"].endswith(": putting it back") and drift["type"] == "Warning"
    assert repaired["type"] == "Normal" and "rewritten" in repaired["message"]
    assert drift["involvedObject"]["uid"] == pod.uid == repaired["involvedObject"]["uid"]


def test_a_container_created_unenforced_is_an_event(tmp_path, api):
    metrics = Metrics()
    events = PodEvents(recorder_for(api, tmp_path, metrics))
    pod = make_pod("early", namespace="team-b", annotations={"sla.nri.io/pod": "cpu: {limit: 1}"})
    # running, no record: created while nri-sla was away
    ctr = make_container(pod, "app", state=pb.CONTAINER_RUNNING)

    async def scenario():
        async with plugin_session(
            make_node(2), tmp_path, events=events, pods=[pod], containers=[ctr]
        ):
            pass

    run(scenario())
    (event,) = api.wait_for(1)
    events.close()
    assert api.problems == []
    assert event["reason"] == "SLAUnenforced" and event["type"] == "Warning"
    assert event["involvedObject"]["uid"] == pod.uid
    assert event["involvedObject"]["fieldPath"] == "spec.containers{app}"


def test_events_config(tmp_path, monkeypatch):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    missing = str(tmp_path / "none")
    assert pod_events(EventsConfig(service_account=missing), Metrics()).recorder is None
    with pytest.raises(
        EventsUnavailable,
        match=r"events.enabled is true, but no service "
        r"account: KUBERNETES_SERVICE_HOST unset",
    ):
        pod_events(EventsConfig(enabled=True, service_account=missing), Metrics())


def test_events_off_never_load_the_http_client():
    """`events.enabled: false`, and auto off a cluster: the plugin service is built
    without loading urllib3, the sender or the Event objects (ops.kube_api decides)."""
    code = (
        "import sys\n"
        "from nri_plugin.config.values import NodeConfig, EventsConfig\n"
        "from nri_plugin.plugin.service import build_service\n"
        "from nri_plugin.ops.metrics import RegistrationOnly\n"
        "from tests.support.plugin_helpers import make_node\n"
        "for enabled in (False, None):\n"
        "    node = make_node(2, events=EventsConfig(enabled=enabled))\n"
        "    plugin, _ = build_service(node, RegistrationOnly(), socket='/x.sock')\n"
        "    assert plugin.events.recorder is None\n"
        "    loaded = sorted(m for m in sys.modules if 'urllib3' in m or 'kube_sender' in m\n"
        "                    or 'kube_events' in m)\n"
        "    print(enabled, loaded)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin"},
        cwd=str(_repo()),
        check=True,
    )
    assert out.stdout.splitlines() == ["False []", "None []"]


def _repo():
    from pathlib import Path

    return Path(__file__).resolve().parents[2]


def test_a_hard_start_refusal_is_an_event(tmp_path, v1_tree, api, monkeypatch):
    import errno

    from nri_plugin.nri import events as ev
    from tests.plugin.test_cgroup_faults import BEFORE, IO_SLA, refuse

    refuse(monkeypatch, "blkio.throttle.write_iops_device", errno.EBUSY)
    events = PodEvents(recorder_for(api, tmp_path, Metrics()))

    async def scenario():
        node = permissive_node(1, v1_tree)
        async with plugin_session(node, tmp_path, events=events) as (_, session, _p):
            pod = make_pod("io", annotations={"sla.nri.io/pod": IO_SLA})
            ctr = make_container(pod, "c", cdi_devices=gpu_grant(0))
            await session.create_container(pod, ctr)
            blkio = v1_tree.add_cgroup(ctr.linux.cgroups_path)["blkio"]
            for name, value in BEFORE.items():
                (blkio / name).write_text(value)
            with pytest.raises(PluginCallError) as refused:
                await session.event(ev.START_CONTAINER, pod, ctr)
            return pod, refused.value

    pod, refusal = run(scenario())
    (event,) = api.wait_for(1)
    events.close()
    assert api.problems == []
    assert (event["reason"], event["involvedObject"]["uid"]) == ("SLARefused", pod.uid)
    assert event["message"] == f"container not started: {refusal.message}"


def test_close_sends_what_is_queued_then_stops(tmp_path, api):
    metrics = Metrics()
    recorder = recorder_for(api, tmp_path, metrics)
    for name in ("a", "b", "c"):
        recorder.record(InvolvedPod("team-a", name, f"uid-{name}"), "Warning", "SLARefused", "no")
    recorder.close(timeout=10)
    assert not recorder._thread.is_alive()
    assert len(api.events) == 3
    assert sent(metrics, "sent", "created") == 3


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("enabled: yes", "events.enabled must be auto, true or false, got yes"),
        ("queue-size: 0", "events.queue-size must be a count of events from 1 to 100000, got 0"),
        ("qps: .nan", "events.qps must be a number of requests per second from 0.01 to 1000"),
        ("burst: 1e9", "events.burst must be a count of requests from 1 to 10000"),
        ("service-account: relative", "events.service-account must be an absolute path"),
    ],
)
def test_events_keys_refuse_bad_values_naming_the_key(text, problem):
    from nri_plugin.config.loader import ConfigError, parse_config

    with pytest.raises(ConfigError) as err:
        parse_config(f"events: {{{text}}}\n", "node.yaml")
    assert problem in str(err.value)
    done = parse_config("events: {enabled: false, queue-size: 10, qps: 0.5, burst: 2}\n", "x")
    assert done.events == EventsConfig(enabled=False, queue_size=10, qps=0.5, burst=2)
