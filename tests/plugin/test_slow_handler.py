"""A handler slower than the runtime's request timeout.

containerd (nri/pkg/adaptation, 1.7.34 and 2.3.4 alike) gives every plugin request
`plugin_request_timeout` (2 s by default); past it the request fails with
DeadlineExceeded, which isFatalError counts as fatal: containerd logs "closing plugin
..., failed to handle CreateContainer request", closes the plugin's connection and
creates the container without that plugin's adjustment. The simulator does the same
(simulated/cri.py). nri-sla's handlers are synchronous, so the late answer is computed
before the service notices the closed connection; it then reconnects, and Synchronize
releases what the late answer took (its container has no record) and reports the
container as created unenforced.

The plugin service runs in a thread with its own event loop, as in its own process: a
handler blocking that loop must not block the runtime's.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time

from nri_plugin.nri.service import run_service
from nri_plugin.ops.metrics import Metrics
from nri_plugin.plugin import SlaPlugin
from nri_plugin.plugin.service import build_service
from nri_plugin.simulated.cri import Cri
from nri_plugin.simulated.runtime import (
    RuntimeSimulator,
    SimulatorOptions,
    make_container,
    make_pod,
)
from tests.support.fault_helpers import held_by_records, holdings, live_records
from tests.support.plugin_helpers import gpu_grant, permissive_node

REQUEST_TIMEOUT = 0.5  # s; containerd's default is 2 s
SLOW = 1.5  # s the handler takes for the pod named "slow"


class ServiceThread:
    """run_service on its own event loop in a thread (the plugin's own process)."""

    def __init__(self, plugin, options) -> None:
        self._started = threading.Event()

        async def serve() -> None:
            self.loop = asyncio.get_running_loop()
            options.stop_event = self.stop = asyncio.Event()
            self._started.set()
            await run_service(plugin, options)

        self.thread = threading.Thread(target=asyncio.run, args=(serve(),), daemon=True)
        self.thread.start()
        assert self._started.wait(10)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.stop.set)
        self.thread.join(10)
        assert not self.thread.is_alive()


def test_handler_past_the_deadline_is_dropped_and_recovers(tmp_path, monkeypatch, caplog):
    caplog.set_level(logging.INFO, logger="nri_sla")
    real = SlaPlugin.create_container

    def create_container(self, pod, container):
        if pod.name == "slow":
            time.sleep(SLOW)  # e.g. a cgroup or NVML call that hangs
        return real(self, pod, container)

    monkeypatch.setattr(SlaPlugin, "create_container", create_container)

    metrics = Metrics()
    socket_path = str(tmp_path / "nri.sock")
    plugin, options = build_service(
        permissive_node(2),
        metrics,
        socket=socket_path,
        handle_signals=False,
        backoff_initial=0.1,
        backoff_max=0.2,
    )

    async def scenario():
        sim = await RuntimeSimulator(
            socket_path, SimulatorOptions(request_timeout=REQUEST_TIMEOUT)
        ).start()
        service = ServiceThread(plugin, options)
        try:
            first = await sim.accept()
            cri = Cri(sim)
            made = {}
            for name, grant in (("before", (0, 1)), ("slow", (2, 3))):
                pod = make_pod(name, annotations={"sla.nri.io/pod": "gpu: {count: 2}"})
                await cri.run_pod(pod)
                started = time.monotonic()
                made[name] = await cri.create_container(
                    pod, make_container(pod, "c", cdi_devices=gpu_grant(*grant))
                )
                waited = time.monotonic() - started
            second = await sim.accept(timeout=10)  # the plugin is back
            after = make_pod("after", annotations={"sla.nri.io/pod": "gpu: {count: 4}"})
            await cri.run_pod(after)
            made["after"] = await cri.create_container(
                after, make_container(after, "c", cdi_devices=gpu_grant(4, 5, 6, 7))
            )
            records = live_records(plugin, sim)
            return (
                first,
                second,
                cri,
                made,
                waited,
                records,
                holdings(plugin),
                held_by_records(plugin, records),
            )
        finally:
            service.close()
            await sim.close()

    first, second, cri, made, waited, records, held, want = asyncio.run(
        asyncio.wait_for(scenario(), 30)
    )
    # The runtime waited its timeout, not the handler, dropped the plugin and created the
    # container without its adjustment.
    assert REQUEST_TIMEOUT <= waited < SLOW
    assert "CreateContainer" in first.drop_reason and "deadline" in first.drop_reason
    assert first.conn.is_closed and second is not first
    slow = made["slow"]
    assert slow.id in cri.unadjusted and len(slow.CDI_devices) == 2  # its grant, no more
    assert "sla.nri.io/applied" not in slow.annotations
    # nri-sla saw the connection go, came back, reported the container, and holds what the
    # records hold plus the unenforced container's grant (it can open those GPUs).
    assert any("NRI connection lost" in m for m in caplog.messages)
    assert metrics.value("nri_sla_reconnects_total") == 1
    (reported,) = [r for r in caplog.records if r.getMessage() == "created unenforced"]
    assert reported.fields["container"] == slow.id and reported.fields["pod"] == "slow"
    assert metrics.value("nri_sla_unenforced_containers_total") == 1
    assert set(records) == {made["before"].id, made["after"].id}
    assert held == {**want, "gpus": {**want["gpus"], 2: {slow.id}, 3: {slow.id}}}
    assert len(held["gpus"]) == 8
