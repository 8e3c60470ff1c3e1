"""Stub <-> simulator over real unix sockets."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket

import pytest

from nri_plugin.nri import events as ev
from nri_plugin.nri.connection import Connection
from nri_plugin.nri.core import Role
from nri_plugin.nri.errors import (
    Code,
    ConnectionClosed,
    PluginConfigError,
    RegistrationError,
    RemoteProtocolError,
)
from nri_plugin.nri.pb import nri_pb2 as pb
from nri_plugin.nri.stub import (
    PLUGIN_SERVICE,
    RUNTIME_SERVICE,
    CreateResult,
    PluginHandlers,
    Stub,
)
from nri_plugin.simulated.runtime import (
    PluginCallError,
    PluginDropped,
    RuntimeSimulator,
    SimulatorOptions,
    make_container,
    make_pod,
    make_resources,
)


class Recorder:
    """Has every handler; some async. Records (handler, name) in call order."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.synced: tuple[int, int] | None = None
        self.config: tuple[str, str, str] | None = None

    def configure(self, config, runtime_name, runtime_version):
        self.config = (config, runtime_name, runtime_version)

    async def synchronize(self, pods, containers):
        self.synced = (len(pods), len(containers))
        return [pb.ContainerUpdate(container_id=c.id) for c in containers[:1]]

    def _rec(self, handler, obj):
        self.calls.append((handler, obj.name))

    def run_pod_sandbox(self, pod):
        self._rec("run_pod_sandbox", pod)

    async def stop_pod_sandbox(self, pod):
        await asyncio.sleep(0)
        self._rec("stop_pod_sandbox", pod)

    def remove_pod_sandbox(self, pod):
        self._rec("remove_pod_sandbox", pod)

    def update_pod_sandbox(self, pod, overhead, resources):
        self._rec("update_pod_sandbox", pod)

    def post_update_pod_sandbox(self, pod):
        self._rec("post_update_pod_sandbox", pod)

    async def create_container(self, pod, ctr):
        self._rec("create_container", ctr)
        adj = pb.ContainerAdjustment()
        adj.annotations["sla.nri.io/applied"] = ctr.name
        adj.linux.resources.cpu.cpus = "0-1"
        return CreateResult(adj, [pb.ContainerUpdate(container_id="other")],
                            [pb.ContainerEviction(container_id="victim", reason="make room")])

    def post_create_container(self, pod, ctr):
        self._rec("post_create_container", ctr)

    def start_container(self, pod, ctr):
        self._rec("start_container", ctr)

    def post_start_container(self, pod, ctr):
        self._rec("post_start_container", ctr)

    def update_container(self, pod, ctr, resources):
        self._rec("update_container", ctr)
        return [pb.ContainerUpdate(container_id=ctr.id, linux=pb.LinuxContainerUpdate(
            resources=resources))]

    def post_update_container(self, pod, ctr):
        self._rec("post_update_container", ctr)

    def stop_container(self, pod, ctr):
        self._rec("stop_container", ctr)
        return [pb.ContainerUpdate(container_id="x", ignore_failure=True)]

    def remove_container(self, pod, ctr):
        self._rec("remove_container", ctr)

    def validate_container_adjustment(self, request):
        if request.adjust.annotations.get("forbidden"):
            raise ValueError("forbidden annotation")


LIFE_CYCLE = ["run_pod_sandbox", "create_container", "post_create_container",
              "start_container", "post_start_container", "stop_container",
              "remove_container", "stop_pod_sandbox", "remove_pod_sandbox"]


async def _start(sock_dir, plugin, options=None, pods=(), containers=(), **stub_kw):
    path = os.path.join(sock_dir, "nri.sock")
    sim = await RuntimeSimulator(path, options, pods=pods, containers=containers).start()
    stub = Stub(plugin, name="test", idx="10", socket_path=path, **stub_kw)
    task = asyncio.create_task(stub.run())
    session = await sim.accept(timeout=5)
    return sim, stub, task, session


async def _finish(sim, stub, task):
    stub.stop()
    await asyncio.wait_for(task, 5)
    await sim.close()


@pytest.mark.parametrize("mode", ["v0.12", "v0.8"])
@pytest.mark.parametrize("configure_first", [True, False])
def test_full_life_cycle(sock_dir, mode, configure_first):
    async def main():
        plugin = Recorder()
        existing = make_pod("existing")
        ready = []
        opts = SimulatorOptions(mode=mode, config="answer: 42",
                                configure_before_register_reply=configure_first)
        sim, stub, task, s = await _start(
            sock_dir, plugin, opts, pods=[existing],
            containers=[make_container(existing, "a"), make_container(existing, "b")],
            on_ready=lambda: ready.append(plugin.config))
        # on_ready comes after Configure, whichever order the runtime uses
        assert ready == [("answer: 42", "containerd", opts.runtime_version)]
        assert stub.registered
        assert (s.name, s.idx, s.plugin_nri_version) == ("test", "10", "v0.12.0")
        assert plugin.config == ("answer: 42", "containerd", opts.runtime_version)
        assert stub.nri_version == ("v0.12.0" if mode == "v0.12" else "")
        assert s.events == (ev.FULL_MASK if mode == "v0.12" else ev.LEGACY_MASK)
        assert plugin.synced == (1, 2) and len(s.sync_updates) == 1

        pod = make_pod("web", annotations={"sla.nri.io/pod": "cpu: {limit: 1}"})
        ctr = make_container(pod, "app", resources=make_resources(cpu_quota=50000))
        created = await s.container_life_cycle(pod, ctr)
        assert created.adjust.annotations["sla.nri.io/applied"] == "app"
        assert created.adjust.linux.resources.cpu.cpus == "0-1"
        assert [u.container_id for u in created.update] == ["other"]
        assert [(e.container_id, e.reason) for e in created.evict] == [("victim", "make room")]
        assert [c[0] for c in plugin.calls] == LIFE_CYCLE

        plugin.calls.clear()
        upd = await s.update_container(pod, ctr, make_resources(cpu_quota=1000))
        assert upd.update[0].linux.resources.cpu.quota.value == 1000
        await s.event(ev.POST_UPDATE_CONTAINER, pod, ctr)
        stopped = await s.stop_container(pod, ctr)
        assert stopped.update[0].ignore_failure
        await s.event(ev.UPDATE_POD_SANDBOX, pod, overhead_linux_resources=pb.LinuxResources())
        await s.event(ev.POST_UPDATE_POD_SANDBOX, pod)
        expected = ["update_container", "post_update_container", "stop_container"]
        if mode == "v0.12":
            expected += ["update_pod_sandbox", "post_update_pod_sandbox"]
            ok = await s.event(ev.VALIDATE_CONTAINER_ADJUSTMENT, pod, ctr,
                               adjust=pb.ContainerAdjustment(annotations={"a": "b"}))
            assert not ok.reject
            bad = await s.event(ev.VALIDATE_CONTAINER_ADJUSTMENT, pod, ctr,
                                adjust=pb.ContainerAdjustment(annotations={"forbidden": "1"}))
            assert bad.reject and bad.reason == "forbidden annotation"
        assert [c[0] for c in plugin.calls] == expected
        await s.shutdown()
        await _finish(sim, stub, task)
    asyncio.run(main())


def test_subscription_follows_handlers(sock_dir):
    class OnlyCreate:
        def create_container(self, pod, ctr):
            return CreateResult()

    async def main():
        sim, stub, task, s = await _start(sock_dir, OnlyCreate())
        assert s.events == ev.bit(ev.CREATE_CONTAINER) == stub.events
        pod = make_pod("p")
        ctr = make_container(pod, "c")
        assert await s.run_pod_sandbox(pod) is None  # not subscribed: never sent
        resp = await s.create_container(pod, ctr)
        assert resp == pb.CreateContainerResponse()
        await _finish(sim, stub, task)
    asyncio.run(main())


def test_chunked_synchronize_of_5000_containers(sock_dir):
    pods = [make_pod(f"pod-{i}") for i in range(50)]
    containers = [make_container(pods[i % 50], f"c{i}") for i in range(5000)]

    async def main():
        plugin = Recorder()
        opts = SimulatorOptions(sync_chunk_bytes=256 * 1024)
        sim, stub, task, s = await _start(sock_dir, plugin, opts, pods=pods,
                                          containers=containers)
        assert plugin.synced == (50, 5000)
        assert s.conn.core.client.next_stream_id > 2 * 10  # Configure + >= 10 chunks
        await _finish(sim, stub, task)
    asyncio.run(main())


def test_out_of_order_responses(sock_dir):
    class Slow:
        async def create_container(self, pod, ctr):
            await asyncio.sleep(0.5 if ctr.name == "slow" else 0)
            return CreateResult(pb.ContainerAdjustment(annotations={"who": ctr.name}))

    async def main():
        sim, stub, task, s = await _start(sock_dir, Slow())
        pod = make_pod("p")
        done: list[str] = []

        async def create(name):
            resp = await s.create_container(pod, make_container(pod, name))
            done.append(resp.adjust.annotations["who"])
        await asyncio.gather(create("slow"), create("fast1"), create("fast2"))
        assert done[-1] == "slow" and sorted(done) == ["fast1", "fast2", "slow"]
        await _finish(sim, stub, task)
    asyncio.run(main())


def test_handler_error_becomes_status_and_connection_survives(sock_dir):
    class Failing:
        def __init__(self):
            self.n = 0

        def create_container(self, pod, ctr):
            self.n += 1
            if self.n == 1:
                raise RuntimeError("memory.high (12Gi) must be below memory.max (10Gi)")
            return CreateResult()

        async def start_container(self, pod, ctr):
            raise ValueError("async failure")

    async def main():
        sim, stub, task, s = await _start(sock_dir, Failing())
        pod = make_pod("p")
        ctr = make_container(pod, "c")
        with pytest.raises(PluginCallError) as err:
            await s.create_container(pod, ctr)
        assert err.value.code == Code.UNKNOWN
        assert err.value.message == "memory.high (12Gi) must be below memory.max (10Gi)"
        assert "rpc error: code = Unknown desc = memory.high" in str(err.value)
        with pytest.raises(PluginCallError, match="async failure"):
            await s.event(ev.START_CONTAINER, pod, ctr)
        assert await s.create_container(pod, ctr) == pb.CreateContainerResponse()
        assert stub.registered and not task.done()
        await _finish(sim, stub, task)
    asyncio.run(main())


def test_create_container_has_one_return_shape(sock_dir):
    class OldStyle:
        def create_container(self, pod, ctr):
            return pb.ContainerAdjustment(), None

    async def main():
        sim, stub, task, s = await _start(sock_dir, OldStyle())
        pod = make_pod("p")
        with pytest.raises(PluginCallError) as err:
            await s.create_container(pod, make_container(pod, "c"))
        assert err.value.code == Code.UNKNOWN
        assert err.value.message == "create_container must return CreateResult, got tuple"
        await _finish(sim, stub, task)
    asyncio.run(main())


def test_handler_protocol_covers_exactly_the_handlers_the_stub_routes():
    declared = {name for name in vars(PluginHandlers) if not name.startswith("_")}
    assert declared == set(ev.HANDLERS.values()) | {"configure", "synchronize", "shutdown"}
    assert ev.plugin_mask(Recorder()) == ev.FULL_MASK  # Recorder has every event handler


def test_slow_handler_misses_deadline_and_runtime_drops_plugin(sock_dir):
    class TooSlow:
        async def create_container(self, pod, ctr):
            await asyncio.sleep(5)
            return CreateResult()

    async def main():
        opts = SimulatorOptions(request_timeout=0.2)
        sim, stub, task, s = await _start(sock_dir, TooSlow(), opts)
        pod = make_pod("p")
        with pytest.raises(PluginCallError) as err:
            await s.create_container(pod, make_container(pod, "c"))
        assert err.value.code == Code.DEADLINE_EXCEEDED
        assert "deadline" in s.drop_reason
        with pytest.raises(ConnectionClosed):
            await asyncio.wait_for(task, 5)
        assert not stub.registered
        await sim.close()
    asyncio.run(main())


def test_unknown_method_and_update_containers(sock_dir):
    async def main():
        sim, stub, task, s = await _start(sock_dir, Recorder())
        with pytest.raises(Exception) as err:
            await s.conn.call(PLUGIN_SERVICE, "NoSuchMethod", b"", 1.0)
        assert err.value.code == Code.UNIMPLEMENTED
        assert "nri.pkg.api.v1alpha1.Plugin/NoSuchMethod" in err.value.message
        known = make_container(make_pod("p"), "known")
        sim.state.containers[known.id] = known
        failed = await stub.update_containers(
            [pb.ContainerUpdate(container_id=known.id), pb.ContainerUpdate(container_id="gone")],
            [pb.ContainerEviction(container_id="x", reason="test")])
        assert [f.container_id for f in failed] == ["gone"]
        assert len(s.unsolicited) == 1 and s.unsolicited[0].evict[0].reason == "test"
        await _finish(sim, stub, task)
    asyncio.run(main())


def test_new_events_clipped_for_old_runtime(sock_dir):
    class NewOnly:
        def update_pod_sandbox(self, pod, overhead, resources):
            pass

        def create_container(self, pod, ctr):
            return CreateResult()

    async def main():
        sim, stub, task, s = await _start(sock_dir, NewOnly(), SimulatorOptions(mode="v0.8"))
        # bit 0x800 would make containerd 1.7 drop us: clipped, still connected
        assert stub.events == ev.bit(ev.CREATE_CONTAINER) and not s.drop_reason
        await _finish(sim, stub, task)
    asyncio.run(main())


def test_stub_clips_a_plugin_asking_too_much(sock_dir):
    class Greedy:
        def configure(self, config, name, version):
            return 0x3FFF  # asks for 12-14 from an old runtime; the stub clips it

    async def main():
        sim, stub, task, s = await _start(sock_dir, Greedy(), SimulatorOptions(mode="v0.8"))
        assert stub.events == ev.LEGACY_MASK == s.events
        await _finish(sim, stub, task)
    asyncio.run(main())


def test_runtime_drops_plugin_with_unknown_event_bits(sock_dir):
    # A raw client that does not clip, to check the simulator behaves like containerd.
    async def main():
        path = os.path.join(sock_dir, "nri.sock")
        sim = await RuntimeSimulator(path, SimulatorOptions(mode="v0.8")).start()
        answer = pb.ConfigureResponse(events=0x3FFF).SerializeToString()
        routes = {(PLUGIN_SERVICE, "Configure"): lambda payload: answer}
        loop = asyncio.get_running_loop()
        _, conn = await loop.create_unix_connection(
            lambda: Connection(Role.PLUGIN, routes), path)
        req = pb.RegisterPluginRequest(plugin_name="greedy", plugin_idx="01")
        with contextlib.suppress(ConnectionClosed):
            await conn.call(RUNTIME_SERVICE, "RegisterPlugin", req.SerializeToString(), 2)
        await asyncio.wait_for(conn.wait_closed(), 3)
        assert "unknown events 0x3800" in sim.sessions[0].drop_reason
        with pytest.raises(PluginDropped, match="01-greedy was dropped during set-up"):
            await sim.accept(timeout=3)
        await sim.close()
    asyncio.run(main())


def test_simulator_drops_silent_plugin_and_reports_bad_options(sock_dir):
    async def main():
        path = os.path.join(sock_dir, "nri.sock")
        sim = await RuntimeSimulator(path, SimulatorOptions(registration_timeout=0.2)).start()
        reader, writer = await asyncio.open_unix_connection(path)
        assert await asyncio.wait_for(reader.read(), 3) == b""  # closed on us
        writer.close()
        assert "register" in sim.sessions[0].drop_reason
        await sim.close()
    asyncio.run(main())
    with pytest.raises(PluginConfigError, match="allowed"):
        SimulatorOptions(mode="v0.9")


def test_stub_rejects_bad_identity_and_missing_socket(sock_dir):
    with pytest.raises(PluginConfigError, match="two digits"):
        Stub(object(), name="x", idx="5")
    with pytest.raises(PluginConfigError, match="letters"):
        Stub(object(), name="bad name", idx="05")

    async def main():
        stub = Stub(object(), name="x", idx="05", socket_path=os.path.join(sock_dir, "none"))
        with pytest.raises(ConnectionClosed, match="cannot connect"):
            await stub.run()
    asyncio.run(main())


def test_runtime_breaking_the_framing_ends_the_connection(sock_dir):
    """A mux length no runtime sends (it would swallow every later frame): the stub hangs
    up at once and run() says why; the runtime side sees the plugin gone."""
    from nri_plugin.nri import mux

    async def main():
        sim, stub, task, s = await _start(sock_dir, Recorder())
        s.conn.transport.write(mux.HEADER.pack(mux.PLUGIN_CONN, 0xFFFFFFFF) + b"junk")
        with pytest.raises(ConnectionClosed, match="NRI connection ended: mux frame for "
                           "conn 1 announces 4294967295 bytes") as err:
            await asyncio.wait_for(task, 5)
        assert isinstance(err.value.__cause__, RemoteProtocolError)
        assert not stub.registered
        await asyncio.wait_for(s.wait_closed(), 5)
        with pytest.raises(PluginDropped):
            await s.run_pod_sandbox(make_pod("p"))
        await sim.close()
    asyncio.run(main())


def test_stub_on_given_socket_and_dropped_session_errors(sock_dir):
    async def main():
        sim = RuntimeSimulator(os.path.join(sock_dir, "unused"))
        ours, theirs = socket.socketpair()
        await sim.attach(theirs)
        stub = Stub(Recorder(), name="fd", idx="01", sock=ours)
        task = asyncio.create_task(stub.run())
        s = await sim.accept()
        assert s.name == "fd"
        s.drop("test")
        with pytest.raises(PluginDropped):
            await s.run_pod_sandbox(make_pod("p"))
        with pytest.raises(ConnectionClosed):
            await asyncio.wait_for(task, 5)
        with contextlib.suppress(Exception):
            await sim.close()
    asyncio.run(main())


def test_runtime_that_never_configures_fails_registration(sock_dir):
    async def main():
        path = os.path.join(sock_dir, "nri.sock")
        routes = {(RUNTIME_SERVICE, "RegisterPlugin"): lambda payload: b""}
        loop = asyncio.get_running_loop()
        server = await loop.create_unix_server(lambda: Connection(Role.RUNTIME, routes), path)
        stub = Stub(Recorder(), name="x", idx="01", socket_path=path,
                    registration_timeout=0.3)
        with pytest.raises(RegistrationError, match=r"sent no Configure within 0\.3s"):
            await stub.run()
        assert not stub.registered
        server.close()
    asyncio.run(main())


def test_stop_during_registration_returns_quietly(sock_dir):
    async def main():
        path = os.path.join(sock_dir, "nri.sock")
        # a runtime that accepts but never answers RegisterPlugin
        server = await asyncio.start_unix_server(lambda r, w: None, path)
        stub = Stub(Recorder(), name="x", idx="01", socket_path=path)
        task = asyncio.create_task(stub.run())
        await asyncio.sleep(0.1)
        stub.stop()
        assert await asyncio.wait_for(task, 3) is None
        stub2 = Stub(Recorder(), name="x", idx="01", socket_path=path)
        stub2.stop()  # before run(): returns at once
        assert await asyncio.wait_for(stub2.run(), 3) is None
        server.close()
    asyncio.run(main())


def test_simulator_requests_look_like_containerds(sock_dir, golden_loader):
    """Same envelope as the recorded containerd CreateContainer: service, method,
    namespace metadata, deadline of about request_timeout."""
    from nri_plugin.nri import mux
    from nri_plugin.nri.pb import ttrpc_pb2

    golden = golden_loader("containerd-2.3.4.jsonl")
    recorded = next(ttrpc_pb2.Request.FromString(f.data) for c, f in golden.frames("r2p")
                    if c == mux.PLUGIN_CONN and b"CreateContainer" in f.data)
    seen = []

    class Spy:
        def create_container(self, pod, ctr):
            return CreateResult()

    async def main():
        sim, stub, task, s = await _start(sock_dir, Spy())
        original = stub._conn.core.receive_data

        def spy(data):
            events = original(data)
            seen.extend(e for e in events if getattr(e, "method", "") == "CreateContainer")
            return events
        stub._conn.core.receive_data = spy
        pod = make_pod("p")
        await s.create_container(pod, make_container(pod, "c"))
        await _finish(sim, stub, task)
    asyncio.run(main())
    (ours,) = seen
    assert (ours.service, ours.method) == (recorded.service, recorded.method)
    assert ours.metadata == tuple((kv.key, kv.value) for kv in recorded.metadata)
    assert abs(ours.timeout_nano - recorded.timeout_nano) < 100_000_000
    assert 2000 < len(ours.payload) < 4000 and 2000 < len(recorded.payload) < 4000


def test_failing_configure_gets_the_plugin_dropped(sock_dir):
    class BadConfig:
        def configure(self, config, name, version):
            raise ValueError("config: unknown key 'colour'")

    async def main():
        path = os.path.join(sock_dir, "nri.sock")
        sim = await RuntimeSimulator(path).start()
        stub = Stub(BadConfig(), name="bad", idx="02", socket_path=path)
        task = asyncio.create_task(stub.run())
        with pytest.raises(PluginDropped, match="unknown key 'colour'"):
            await sim.accept(timeout=5)
        with pytest.raises(RegistrationError):
            await asyncio.wait_for(task, 5)
        await sim.close()
    asyncio.run(main())
