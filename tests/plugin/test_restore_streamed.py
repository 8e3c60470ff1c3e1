"""A Synchronize is restored container by container: the stub hands its pods and
containers on encoded, the restore decodes them on each pass and keeps no message and,
once it is done, not the request's bytes either."""

from __future__ import annotations

import gc
import weakref

from nri_plugin.nri.core import PLUGIN_SERVICE
from nri_plugin.nri.pb import nri_pb2 as pb
from nri_plugin.nri.stub import Stub
from nri_plugin.plugin import SlaPlugin
from nri_plugin.simulated.runtime import make_container, make_pod, make_resources
from tests.support.plugin_helpers import make_node

SLA = "enforcement: hard\nmemory: {max: 1Gi}"


class Frame(bytearray):
    """A frame's data as the decoder hands it over (a bytearray), weakly referable."""


def messages() -> int:
    return sum(isinstance(o, pb.Container | pb.PodSandbox) for o in gc.get_objects())


def test_the_restore_keeps_no_message_and_lets_the_request_go():
    plugin = SlaPlugin(make_node(2))
    pods = [make_pod(f"p{i}", annotations={"sla.nri.io/pod": SLA}) for i in range(20)]
    containers = [
        make_container(pod, "app", state=state, resources=make_resources(cpu_shares=102))
        for pod, state in zip(
            pods,
            [pb.CONTAINER_RUNNING, pb.CONTAINER_CREATED, pb.CONTAINER_STOPPED, pb.CONTAINER_PAUSED]
            * 5,
            strict=True,
        )
    ]
    request = Frame(pb.SynchronizeRequest(pods=pods, containers=containers).SerializeToString())
    live_ids = {c.id for c in containers if c.state != pb.CONTAINER_STOPPED}
    del pods, containers
    gc.collect()
    before = messages()
    sent = weakref.ref(request)
    Stub(plugin, name="t", idx="01").routes[(PLUGIN_SERVICE, "Synchronize")](memoryview(request))
    del request
    gc.collect()
    assert sent() is not None  # held, encoded, until the restore
    plugin.restorer.restore()
    gc.collect()
    assert sent() is None
    assert messages() == before
    assert {e.id for e in plugin.registry} == live_ids
    assert {e.pod_name for e in plugin.registry} == {f"p{i}" for i in range(20) if i % 4 != 2}
