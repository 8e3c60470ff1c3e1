"""CreateContainer admits a decided container as one reservation: what the node took
for it (GPUs, exclusive CPUs, RT time, its place in the CPU pool) is kept once the
container is registered, and given back whole when anything after the admission fails."""

from __future__ import annotations

import pytest

from nri_plugin.nri.errors import RpcError
from nri_plugin.nri.pb import nri_pb2 as pb
from nri_plugin.plugin import SlaPlugin
from tests.support.plugin_helpers import make_node

SLA = "cpu: {exclusive: 2, rt-runtime: 100ms, rt-period: 1s}\ngpu: {count: 1}"


def request(cid: str) -> tuple[pb.PodSandbox, pb.Container]:
    pod = pb.PodSandbox(
        id=f"pod-{cid}", name=cid, namespace="ml", annotations={"sla.nri.io/pod": SLA}
    )
    container = pb.Container(id=cid, pod_sandbox_id=pod.id, name="app")
    container.CDI_devices.add(name="nvidia.com/gpu=0")
    container.linux.resources.cpu.shares.value = 2048
    return pod, container


def holds(plugin: SlaPlugin, cid: str) -> bool:
    node = plugin.node
    return (
        node.allocator.placement_of(cid) is not None
        or node.rt_budget.share_of(cid) > 0
        or node.cpu_pool.member(cid) is not None
    )


def test_a_registered_container_keeps_what_it_was_admitted_with():
    plugin = SlaPlugin(make_node(1))
    plugin.create_container(*request("ctr-1"))
    placement = plugin.node.allocator.placement_of("ctr-1")
    assert len(placement.gpus) == 1 and len(placement.exclusive_cpus) == 2
    assert plugin.node.rt_budget.share_of("ctr-1") == pytest.approx(0.1)
    assert plugin.node.cpu_pool.member("ctr-1") is not None


def test_a_failure_after_admission_gives_every_book_back(monkeypatch):
    plugin = SlaPlugin(make_node(1))

    def broken(entry):
        raise RuntimeError("registry broke")

    monkeypatch.setattr(plugin.registry, "add", broken)
    with pytest.raises(RuntimeError, match="registry broke"):
        plugin.create_container(*request("ctr-1"))
    assert not holds(plugin, "ctr-1")
    assert not plugin.node.allocator.gpus_in_use()


def test_a_refused_container_is_never_admitted():
    plugin = SlaPlugin(make_node(1, gpus=()))  # no namespace may use GPUs: refused
    with pytest.raises(RpcError):
        plugin.create_container(*request("ctr-1"))
    assert not holds(plugin, "ctr-1") and plugin.registry.get("ctr-1") is None
