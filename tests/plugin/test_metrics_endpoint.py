"""Metrics scraped over HTTP match the events sent through the simulator, and /readyz
follows the plugin's registration (the wiring `nri-sla run` uses)."""

from __future__ import annotations

import asyncio
import contextlib

from nri_plugin.nri.service import run_service
from nri_plugin.ops.metrics import Metrics
from nri_plugin.ops.metrics_http import start_http_server
from nri_plugin.plugin.service import build_service
from nri_plugin.simulated.runtime import (
    PluginCallError,
    RuntimeSimulator,
    SimulatorOptions,
    make_container,
    make_pod,
)
from tests.support.plugin_helpers import gpu_grant, guaranteed, make_node
from tests.support.plugin_process import http_get


def scrape(server, path: str) -> tuple[int, str]:
    return http_get(server.port, path, timeout=5)


def sample(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return float("nan")


def test_metrics_follow_simulated_events(tmp_path):
    metrics = Metrics()
    server = start_http_server(metrics, "127.0.0.1:0")
    socket_path = str(tmp_path / "nri.sock")
    before = scrape(server, "/readyz")[0]

    async def scenario():
        stop = asyncio.Event()
        plugin, options = build_service(
            make_node(2),
            metrics,
            socket=socket_path,
            handle_signals=False,
            stop_event=stop,
            backoff_initial=0.05,
            backoff_max=0.1,
        )
        async with RuntimeSimulator(socket_path, SimulatorOptions()) as sim:
            service = asyncio.create_task(run_service(plugin, options))
            session = await sim.accept()
            ready = scrape(server, "/readyz")[0]
            ok = make_pod(
                "ok", annotations={"sla.nri.io/pod": "gpu: {count: 2}\ncpu: {exclusive: 2}"}
            )
            await session.run_pod_sandbox(ok)
            await session.create_container(
                ok, make_container(ok, "c", resources=guaranteed(2), cdi_devices=gpu_grant(0, 1))
            )
            bad = make_pod("bad", annotations={"sla.nri.io/pod": "cpu: {limit: -1}"})
            with contextlib.suppress(PluginCallError):
                await session.create_container(bad, make_container(bad, "c"))
            soft = make_pod(
                "soft",
                annotations={
                    "sla.nri.io/pod": "cpu: {rt-runtime: 1ms}",
                    "sla.nri.io/enforcement": "soft",
                },
            )
            await session.create_container(soft, make_container(soft, "c"))
            plain = make_pod("plain")
            await session.create_container(plain, make_container(plain, "c"))
        # containerd went away: the service notices and keeps retrying
        for _ in range(100):
            if scrape(server, "/readyz")[0] == 503:
                break
            await asyncio.sleep(0.02)
        lost = scrape(server, "/readyz")[0]
        # containerd back with the same containers: the allocations come back from them
        state = sim.state
        async with RuntimeSimulator(
            socket_path,
            SimulatorOptions(),
            pods=state.pods.values(),
            containers=state.containers.values(),
        ) as sim:
            await sim.accept()
            text = scrape(server, "/metrics")[1]
        stop.set()
        await asyncio.wait_for(service, 5)
        return ready, lost, text

    try:
        ready, lost, text = asyncio.run(asyncio.wait_for(scenario(), 30))
    finally:
        server.close()
    assert (before, ready, lost) == (503, 200, 503)
    assert sample(text, 'nri_sla_decisions_total{outcome="enforced",reason="ok"}') == 1
    assert sample(text, 'nri_sla_decisions_total{outcome="refused",reason="invalid"}') == 1
    assert sample(text, 'nri_sla_decisions_total{outcome="warned",reason="unsupported"}') == 1
    assert sample(text, 'nri_sla_request_seconds_count{event="CreateContainer"}') == 4
    assert sample(text, "nri_sla_gpus_in_use") == 2
    assert sample(text, "nri_sla_exclusive_cpus_in_use") == 2
    assert sample(text, "nri_sla_reconnects_total") == 1
    assert sample(text, "nri_sla_registered") == 1
