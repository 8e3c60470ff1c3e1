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
    RpcError,
)
from nri_plugin.nri.pb import nri_pb2 as pb
from nri_plugin.nri.stub import (
    PLUGIN_SERVICE,
    RUNTIME_SERVICE,
    CreateResult,
    PluginHandlers,
    Stub,
    SyncLimits,
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
from tests.support.nri_golden import load_golden


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
        return [pb.ContainerUpdate(container_id=c.id) for c in list(containers)[:1]]

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
        return CreateResult(
            adj,
            [pb.ContainerUpdate(container_id="other")],
            [pb.ContainerEviction(container_id="victim", reason="make room")],
        )

    def post_create_container(self, pod, ctr):
        self._rec("post_create_container", ctr)

    def start_container(self, pod, ctr):
        self._rec("start_container", ctr)

    def post_start_container(self, pod, ctr):
        self._rec("post_start_container", ctr)

    def update_container(self, pod, ctr, resources):
        self._rec("update_container", ctr)
        return [
            pb.ContainerUpdate(
                container_id=ctr.id, linux=pb.LinuxContainerUpdate(resources=resources)
            )
        ]

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


LIFE_CYCLE = [
    "run_pod_sandbox",
    "create_container",
    "post_create_container",
    "start_container",
    "post_start_container",
    "stop_container",
    "remove_container",
    "stop_pod_sandbox",
    "remove_pod_sandbox",
]


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


@pytest.mark.parametrize("mode", ["v0.12", "v0.11", "v0.8"])
@pytest.mark.parametrize("configure_first", [True, False])
def test_full_life_cycle(sock_dir, mode, configure_first):
    """v0.11 is CRI-O 1.36: no NRI version in Configure, yet events 12-14 known; the stub
    tells that from its name and release and subscribes to them."""

    async def main():
        plugin = Recorder()
        existing = make_pod("existing")
        ready = []
        opts = SimulatorOptions(
            mode=mode, config="answer: 42", configure_before_register_reply=configure_first
        )
        sim, stub, task, s = await _start(
            sock_dir,
            plugin,
            opts,
            pods=[existing],
            containers=[make_container(existing, "a"), make_container(existing, "b")],
            on_ready=lambda: ready.append(plugin.config),
        )
        # on_ready comes after Configure, whichever order the runtime uses
        runtime = "cri-o" if mode == "v0.11" else "containerd"
        assert ready == [("answer: 42", runtime, opts.runtime_version)]
        assert stub.registered
        assert (s.name, s.idx, s.plugin_nri_version) == ("test", "10", "v0.12.0")
        assert plugin.config == ("answer: 42", runtime, opts.runtime_version)
        assert stub.nri_version == {"v0.12": "v0.12.0", "v0.11": "v0.11.0", "v0.8": "v0.8.0"}[mode]
        assert stub.nri_level.source == (
            "sent" if mode == "v0.12" else f"{runtime} {opts.runtime_version} (release table)"
        )
        assert s.events == (ev.LEGACY_MASK if mode == "v0.8" else ev.FULL_MASK)
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
        if mode != "v0.8":
            expected += ["update_pod_sandbox", "post_update_pod_sandbox"]
            ok = await s.event(
                ev.VALIDATE_CONTAINER_ADJUSTMENT,
                pod,
                ctr,
                adjust=pb.ContainerAdjustment(annotations={"a": "b"}),
            )
            assert not ok.reject
            bad = await s.event(
                ev.VALIDATE_CONTAINER_ADJUSTMENT,
                pod,
                ctr,
                adjust=pb.ContainerAdjustment(annotations={"forbidden": "1"}),
            )
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
        sim, stub, task, s = await _start(sock_dir, plugin, opts, pods=pods, containers=containers)
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
            [pb.ContainerEviction(container_id="x", reason="test")],
        )
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
        _, conn = await loop.create_unix_connection(lambda: Connection(Role.PLUGIN, routes), path)
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
        with pytest.raises(
            ConnectionClosed,
            match="NRI connection ended: mux frame for conn 1 announces 4294967295 bytes",
        ) as err:
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
        stub = Stub(Recorder(), name="x", idx="01", socket_path=path, registration_timeout=0.3)
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


def test_simulator_requests_look_like_containerds(sock_dir):
    """Same envelope as the recorded containerd CreateContainer: service, method,
    namespace metadata, deadline of about request_timeout."""
    from nri_plugin.nri import mux
    from nri_plugin.nri.pb import ttrpc_pb2

    golden = load_golden("containerd-2.3.4.jsonl")
    recorded = next(
        ttrpc_pb2.Request.FromString(f.data)
        for c, f in golden.frames("r2p")
        if c == mux.PLUGIN_CONN and b"CreateContainer" in f.data
    )
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


# -- bounds: hostile or broken runtimes cost bounded memory and never wedge the plugin ----


def test_state_change_never_runs_adjusting_handlers(sock_dir):
    """containerd 1.7 sends only non-adjusting events as StateChange. One carrying
    CreateContainer (or another adjusting event) is refused and runs nothing, so no
    resources are reserved for a container the runtime never adjusts."""

    async def main():
        plugin = Recorder()
        sim, stub, task, s = await _start(sock_dir, plugin, SimulatorOptions(mode="v0.8"))
        pod = make_pod("p")
        ctr = make_container(pod, "c")
        for event in (
            ev.CREATE_CONTAINER,
            ev.UPDATE_CONTAINER,
            ev.STOP_CONTAINER,
            ev.VALIDATE_CONTAINER_ADJUSTMENT,
        ):
            with pytest.raises(PluginCallError) as err:
                await s.call(
                    "StateChange",
                    pb.StateChangeEvent(event=event, pod=pod, container=ctr),
                    pb.Empty,
                )
            assert err.value.code == Code.INVALID_ARGUMENT
            assert f"StateChange cannot carry {ev.RPCS[event]} (event {event})" in err.value.message
        assert plugin.calls == []
        await s.call("StateChange", pb.StateChangeEvent(event=99, pod=pod), pb.Empty)
        await s.call(
            "StateChange",
            pb.StateChangeEvent(event=ev.START_CONTAINER, pod=pod, container=ctr),
            pb.Empty,
        )
        assert plugin.calls == [("start_container", "c")]
        assert (await s.create_container(pod, ctr)).adjust.linux.resources.cpu.cpus == "0-1"
        assert stub.registered and not task.done()
        await _finish(sim, stub, task)

    asyncio.run(main())


def test_synchronize_over_its_bounds_fails_whole_and_is_never_handed_on(sock_dir):
    pods = [make_pod(f"pod-{i}") for i in range(4)]
    containers = [make_container(pods[i % 4], f"c{i}") for i in range(300)]

    async def main():
        plugin = Recorder()
        path = os.path.join(sock_dir, "nri.sock")
        opts = SimulatorOptions(sync_chunk_bytes=32 * 1024)  # ~12 parts
        sim = await RuntimeSimulator(path, opts, pods=pods, containers=containers).start()
        stub = Stub(
            plugin, name="test", idx="10", socket_path=path, sync_limits=SyncLimits(containers=100)
        )
        task = asyncio.create_task(stub.run())
        with pytest.raises(
            PluginDropped,
            match=r"Synchronize refused: more than 100 "
            r"containers after \d+ parts; nri-sla holds at most 1024 parts",
        ):
            await sim.accept(timeout=5)
        assert plugin.synced is None  # never called with a part of the state
        with pytest.raises(ConnectionClosed):
            await asyncio.wait_for(task, 5)
        # the same runtime state within the bounds: one complete Synchronize
        stub = Stub(
            plugin, name="test", idx="10", socket_path=path, sync_limits=SyncLimits(containers=300)
        )
        task = asyncio.create_task(stub.run())
        await sim.accept(timeout=5)
        assert plugin.synced == (4, 300)
        await _finish(sim, stub, task)

    asyncio.run(main())


def test_100k_synchronize_parts_cost_bounded_memory_and_time():
    """A runtime that never says more=false: the parts are refused once past the bounds
    (every later part of the same Synchronize too), nothing more is held, and the next
    Synchronize starts afresh."""
    import resource
    import time

    def rss() -> int:  # upb allocates outside Python's allocator: tracemalloc misses it
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * resource.getpagesize()

    plugin = Recorder()
    stub = Stub(plugin, name="test", idx="10")
    route = stub.routes[(PLUGIN_SERVICE, "Synchronize")]
    pod = make_pod("p")
    part = pb.SynchronizeRequest(
        pods=[pod], containers=[make_container(pod, "c")], more=True
    ).SerializeToString()
    refused = 0
    base = peak = rss()
    start = time.perf_counter()
    for n in range(100_000):
        if n % 512 == 0:
            peak = max(peak, rss())
        try:
            assert route(part) == pb.SynchronizeResponse(more=True).SerializeToString()
        except RpcError as exc:
            assert exc.code == Code.RESOURCE_EXHAUSTED
            assert "more than 1024 parts" in exc.message
            refused += 1
    elapsed = time.perf_counter() - start
    assert refused == 100_000 - SyncLimits().parts
    assert plugin.synced is None
    # Held without a bound, these 100k parts (2.7 KB each) took ~1.1 GB of RSS;
    # bounded, at most 1,024 of them are held at once.
    assert peak - base < 96 << 20, f"grew {(peak - base) >> 20} MiB"
    assert elapsed < 60, f"{elapsed:.1f}s"
    last = pb.SynchronizeRequest(
        pods=[pod], containers=[make_container(pod, "last")], more=False
    ).SerializeToString()
    with pytest.raises(RpcError, match="more than 1024 parts"):
        route(last)  # ends the refused Synchronize
    answer = pb.SynchronizeResponse.FromString(asyncio.run(route(last)))  # a new one
    assert plugin.synced == (1, 1)
    assert [u.container_id for u in answer.update] == [make_container(pod, "last").id]


def test_stream_ids_at_the_top_of_the_range_never_wedge_the_plugin(sock_dir):
    """Ours: after 2**32 - 1 the connection ends and the service reconnects (fresh ids).
    The runtime's: a call after its id 2**32 - 1 (a Go client wraps to 1) ends the
    connection too, instead of every later call failing InvalidArgument."""
    from nri_plugin.nri.service import ServiceOptions, run_service
    from nri_plugin.nri.ttrpc import MAX_STREAM_ID

    async def main():
        path = os.path.join(sock_dir, "nri.sock")
        sim = await RuntimeSimulator(path).start()
        stubs: list[Stub] = []
        reconnects: list[int] = []
        stop = asyncio.Event()
        opts = ServiceOptions(
            socket_path=path,
            name="ids",
            idx="10",
            backoff_initial=0.05,
            handle_signals=False,
            environ={},
            on_ready=stubs.append,
            on_reconnect=reconnects.append,
            stop_event=stop,
        )
        svc = asyncio.create_task(run_service(Recorder(), opts))
        s = await sim.accept(timeout=5)
        pod = make_pod("p")
        ctr = make_container(pod, "c")
        # our side
        stubs[-1]._conn.core.client.next_stream_id = MAX_STREAM_ID
        await stubs[-1].update_containers([])  # the last id is valid
        with pytest.raises(ConnectionClosed, match="used its last stream id"):
            await stubs[-1].update_containers([])
        s = await sim.accept(timeout=5)
        assert reconnects == [1] and stubs[-1].registered
        assert (await s.create_container(pod, ctr)).adjust.linux.resources.cpu.cpus == "0-1"
        # the runtime's side
        s.conn.core.client.next_stream_id = MAX_STREAM_ID
        await s.create_container(pod, ctr)
        s.conn.core.client.next_stream_id = 1  # wraps, as Go's uint32 counter does
        with pytest.raises(PluginDropped):
            await s.create_container(pod, ctr)
        s = await sim.accept(timeout=5)
        assert reconnects == [1, 2] and stubs[-1].registered
        assert (await s.create_container(pod, ctr)).adjust.linux.resources.cpu.cpus == "0-1"
        stop.set()
        await asyncio.wait_for(svc, 5)
        await sim.close()

    asyncio.run(main())


@pytest.mark.slow
@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_a_runtime_that_stops_reading_gets_backpressure_then_is_dropped(sock_dir, loop):
    """The runtime keeps calling but reads nothing: the stub stops reading once ~1 MiB
    of answers wait (its calls stay in the runtime's socket), answers everything once the
    runtime reads again, and stays registered. Our own calls piling up past the hard cap
    end the connection instead of growing the buffer."""
    from nri_plugin.nri.connection import MAX_UNSENT, WRITE_HIGH_WATER

    class Chatty:
        def stop_container(self, pod, ctr):  # ~6 KB per answer
            return [pb.ContainerUpdate(container_id=f"{ctr.id}-{i}") for i in range(80)]

    async def main():
        sim, stub, task, s = await _start(sock_dir, Chatty())
        ours = stub._conn
        pod = make_pod("p")
        payload = pb.StopContainerRequest(pod=pod, container=make_container(pod, "c"))
        s.conn.transport.pause_reading()  # the runtime stops reading
        calls = 4000  # ~24 MB of answers if nothing pushed back
        for _ in range(calls):
            s.conn.core.send_request(PLUGIN_SERVICE, "StopContainer", payload.SerializeToString())
        s.conn._flush()
        peak = 0
        for _ in range(100):
            await asyncio.sleep(0.02)
            peak = max(peak, ours.transport.get_write_buffer_size())
        assert ours.reading_paused
        # one read's worth of answers past the high-water mark, not the 24 MB
        assert WRITE_HIGH_WATER <= peak < 4 * WRITE_HIGH_WATER, peak
        assert len(s.conn.core.client.pending) == calls  # nothing answered yet
        s.conn.transport.resume_reading()
        for _ in range(500):
            if not s.conn.core.client.pending:
                break
            await asyncio.sleep(0.02)
        assert not s.conn.core.client.pending  # every call answered, in the end
        assert stub.registered and not ours.reading_paused and not task.done()

        s.conn.transport.pause_reading()
        big = [pb.ContainerUpdate(container_id="x" * 1024) for _ in range(3000)]  # 3 MB
        calls = [asyncio.create_task(stub.update_containers(big)) for _ in range(8)]
        results = await asyncio.gather(*calls, return_exceptions=True)
        assert all(
            isinstance(r, ConnectionClosed) and "the peer is not reading" in str(r) for r in results
        ), results
        with pytest.raises(
            ConnectionClosed,
            match=f"NRI connection ended: the peer is not "
            rf"reading: \d+ bytes unsent \(at most {MAX_UNSENT}\)",
        ):
            await asyncio.wait_for(task, 5)
        assert ours.transport.get_write_buffer_size() == 0  # aborted, nothing kept
        await sim.close()

    if loop == "uvloop":  # what `nri-sla run` serves on
        uvloop = pytest.importorskip("uvloop")
        uvloop.run(main())
    else:
        asyncio.run(main())


def test_create_response_bytes_are_protobufs_own():
    """The stub writes CreateContainerResponse field by field: the same bytes protobuf
    makes of the message, for every shape of answer (none, an empty adjustment, updates
    and evictions too); a wrong message kind in a field fails the call, as protobuf's
    constructor would."""
    adjustment = pb.ContainerAdjustment(annotations={"a": "b"})
    adjustment.linux.resources.cpu.cpus = "0-3"
    update = pb.ContainerUpdate(container_id="other", ignore_failure=True)
    update.linux.resources.cpu.cpus = "4-7"
    eviction = pb.ContainerEviction(container_id="gone", reason="why")
    answers = [
        CreateResult(),
        CreateResult(pb.ContainerAdjustment()),
        CreateResult(adjustment),
        CreateResult(None, [update, update]),
        CreateResult(adjustment, [update], [eviction, eviction]),
    ]

    class Answers:
        def create_container(self, pod, ctr):
            return answers.pop(0)

    route = Stub(Answers(), name="x", idx="01").routes[(PLUGIN_SERVICE, "CreateContainer")]
    pod = make_pod("p")
    request = pb.CreateContainerRequest(pod=pod, container=make_container(pod, "c"))
    for answer in list(answers):
        expected = pb.CreateContainerResponse(update=answer.updates, evict=answer.evictions)
        if answer.adjustment is not None:
            expected.adjust.CopyFrom(answer.adjustment)
        assert route(request.SerializeToString()) == expected.SerializeToString()

    answers.append(CreateResult(None, [eviction]))
    with pytest.raises(TypeError, match="holds a ContainerEviction where a ContainerUpdate"):
        route(request.SerializeToString())
