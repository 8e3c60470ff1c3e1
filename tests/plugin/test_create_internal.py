"""A bug while deciding reaches the runtime as an INTERNAL status, never as a traceback
through the stub: the core's decide never raises (core.decision). A served create's
counts wait for the end of the loop's turn, as its decision line does."""

from __future__ import annotations

import asyncio
import io
import json
from types import SimpleNamespace

import pytest

from nri_plugin.nri.errors import Code, RpcError
from nri_plugin.nri.pb import nri_pb2 as pb
from nri_plugin.ops.logsetup import setup_logging
from nri_plugin.ops.metrics import Metrics
from nri_plugin.plugin import SlaPlugin
from tests.support.plugin_helpers import plain_node

IO_SLA = "io:\n  max:\n    - {device: /dev/sda, read-bps: 1Mi}\n"


def broken_resolver(device: str) -> tuple[int, int]:
    raise KeyError(device)  # a bug: not the OSError the planner expects


def test_a_bug_is_an_internal_status_and_one_decision_line():
    plugin = SlaPlugin(plain_node(resolve_device=broken_resolver))
    pod = pb.PodSandbox(
        id="pod-a", name="web-0", namespace="prod", annotations={"sla.nri.io/pod": IO_SLA}
    )
    container = pb.Container(id="ctr-1", pod_sandbox_id="pod-a", name="app")
    out = io.StringIO()
    setup_logging("json", "info", stream=out)
    with pytest.raises(RpcError) as raised:
        plugin.create_container(pod, container)
    assert raised.value.code == Code.INTERNAL
    assert raised.value.message.startswith("internal error while deciding the SLA: KeyError")
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    # The operator's traceback (once), then the decision line the refusal logs.
    assert [line["logger"] for line in lines] == ["nri_sla.core", "nri_sla.decision"]
    assert "KeyError" in lines[0]["exc"] and "Traceback" in lines[0]["exc"]
    assert (lines[1]["outcome"], lines[1]["error"]) == ("refused", raised.value.message)
    assert plugin.registry.get("ctr-1") is None  # refused: nothing registered for it


def test_a_served_create_is_counted_once_its_turn_ends():
    """Served from the loop, a create's counts (and its line) wait for the end of the
    loop's turn, after the answer; outside a loop they are made at once."""
    metrics = Metrics()
    plugin = SlaPlugin(plain_node(), metrics)
    pod = pb.PodSandbox(
        id="pod-a",
        name="web-0",
        namespace="prod",
        annotations={"sla.nri.io/pod": "cpu: {limit: 0.5}"},
    )

    def enforced() -> float:
        return (
            metrics.registry.get_sample_value(
                "nri_sla_decisions_total", {"outcome": "enforced", "reason": "ok"}
            )
            or 0.0
        )

    async def serve() -> tuple[float, float]:
        plugin.on_registered(SimpleNamespace(nri_version="v0.12.0"))
        plugin.create_container(pod, pb.Container(id="ctr-1", pod_sandbox_id="pod-a", name="app"))
        during = enforced()
        await asyncio.sleep(0)  # the turn ends
        return during, enforced()

    assert asyncio.run(serve()) == (0.0, 1.0)
    unserved = SlaPlugin(plain_node(), metrics)  # called outside a loop
    unserved.create_container(pod, pb.Container(id="ctr-2", pod_sandbox_id="pod-a", name="app"))
    assert enforced() == 2.0
