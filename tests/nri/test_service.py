"""run_service: reconnects, pre-launched fd 3, systemd notify, signals."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
import textwrap
import time

import pytest

from nri_plugin.nri import service
from nri_plugin.nri.errors import PluginConfigError
from nri_plugin.nri.pb import nri_pb2 as pb
from nri_plugin.nri.service import ServiceOptions, SystemdNotifier, run_service
from nri_plugin.nri.stub import CreateResult
from nri_plugin.simulated.runtime import RuntimeSimulator, make_container, make_pod


class Plugin:
    def create_container(self, pod, ctr):
        return CreateResult(pb.ContainerAdjustment(annotations={"by": "service"}))


def test_reconnects_after_runtime_restart_and_stops_cleanly(sock_dir):
    async def main():
        path = os.path.join(sock_dir, "nri.sock")
        states: list[str] = []
        reconnects: list[int] = []
        stubs = []
        stop = asyncio.Event()
        opts = ServiceOptions(
            socket_path=path,
            name="svc",
            idx="42",
            backoff_initial=0.05,
            backoff_max=0.2,
            handle_signals=False,
            environ={},
            on_state=states.append,
            on_reconnect=reconnects.append,
            on_ready=stubs.append,
            stop_event=stop,
        )
        svc = asyncio.create_task(run_service(Plugin(), opts))
        for _ in range(200):  # no runtime yet: the service keeps retrying
            if states.count(service.CONNECTING) >= 3:
                break
            await asyncio.sleep(0.025)
        assert states.count(service.CONNECTING) >= 3 and not svc.done()
        assert service.REGISTERED not in states
        for round_ in range(2):
            sim = await RuntimeSimulator(path).start()
            s = await sim.accept(timeout=5)
            assert (s.name, s.idx) == ("svc", "42")
            pod = make_pod("p")
            resp = await s.create_container(pod, make_container(pod, "c"))
            assert resp.adjust.annotations["by"] == "service"
            await sim.close()  # containerd restart
            await asyncio.sleep(0.05)
            assert reconnects == list(range(1, round_ + 1))
        sim = await RuntimeSimulator(path).start()
        await sim.accept(timeout=5)
        assert reconnects == [1, 2] and len(stubs) == 3 and stubs[-1].registered
        stop.set()
        await asyncio.wait_for(svc, 5)
        assert states[-1] == service.STOPPED
        assert service.DISCONNECTED in states and states.count(service.REGISTERED) == 3
        await sim.close()

    asyncio.run(main())


def test_prelaunched_socket_exits_when_connection_ends():
    async def main():
        ours, theirs = socket.socketpair()
        sim = RuntimeSimulator("/nonexistent/unused")
        await sim.attach(theirs)
        env = {
            "NRI_PLUGIN_SOCKET": str(ours.fileno()),
            "NRI_PLUGIN_NAME": "sla",
            "NRI_PLUGIN_IDX": "07",
        }
        svc = asyncio.create_task(
            run_service(
                Plugin(), ServiceOptions(environ=env, handle_signals=False, backoff_initial=0.01)
            )
        )
        s = await sim.accept(timeout=5)
        assert (s.name, s.idx) == ("sla", "07")
        s.drop("containerd stops the plugin")
        await asyncio.wait_for(svc, 5)  # no reconnect attempts: it returns

    asyncio.run(main())


@pytest.mark.parametrize(
    ("env", "match"),
    [
        ({"NRI_PLUGIN_SOCKET": "three"}, "file descriptor"),
        ({"NRI_PLUGIN_SOCKET": "3", "NRI_PLUGIN_NAME": "x", "NRI_PLUGIN_IDX": "7"}, "two digits"),
        (
            {"NRI_PLUGIN_SOCKET": "987", "NRI_PLUGIN_NAME": "x", "NRI_PLUGIN_IDX": "07"},
            "not an open socket",
        ),
    ],
)
def test_bad_prelaunch_environment_is_a_clear_error(env, match):
    with pytest.raises(PluginConfigError, match=match):
        asyncio.run(run_service(Plugin(), ServiceOptions(environ=env, handle_signals=False)))


def test_bad_options():
    with pytest.raises(PluginConfigError, match="backoff"):
        ServiceOptions(backoff_initial=5, backoff_max=1)
    with pytest.raises(PluginConfigError, match="index"):
        asyncio.run(
            run_service(Plugin(), ServiceOptions(idx="x", environ={}, handle_signals=False))
        )


def test_notifier_addresses_and_watchdog_interval():
    n = SystemdNotifier({"NOTIFY_SOCKET": "@abstract", "WATCHDOG_USEC": "3000000"})
    assert n.address == "\0abstract" and n.watchdog_interval == 1.5
    n = SystemdNotifier({"NOTIFY_SOCKET": "/run/x", "WATCHDOG_USEC": "100", "WATCHDOG_PID": "1"})
    assert n.watchdog_interval is None  # watchdog meant for another process
    assert not SystemdNotifier({}).enabled
    SystemdNotifier({}).notify("READY=1")  # no socket: a no-op


CHILD = textwrap.dedent("""
    import asyncio, sys
    from nri_plugin.nri.service import ServiceOptions, run_service
    from nri_plugin.nri.stub import CreateResult
    class Plugin:
        def create_container(self, pod, ctr):
            return CreateResult()
    opts = ServiceOptions(socket_path=sys.argv[1] if len(sys.argv) > 1 else "",
                          name="child", idx="33")
    asyncio.run(run_service(Plugin(), opts))
""")


def _read_notify(sock: socket.socket, until: str, timeout: float = 10) -> list[str]:
    sock.settimeout(timeout)
    lines: list[str] = []
    while not any(line.startswith(until) for line in lines):
        lines += sock.recv(4096).decode().split("\n")
    return lines


def test_sigterm_and_systemd_notify_in_a_real_process(sock_dir):
    notify_path = os.path.join(sock_dir, "notify")
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(notify_path)

    async def main():
        path = os.path.join(sock_dir, "nri.sock")
        sim = await RuntimeSimulator(path).start()
        env = {
            "NOTIFY_SOCKET": notify_path,
            "WATCHDOG_USEC": "200000",
            "PYTHONPATH": os.pathsep.join(sys.path),
        }
        proc = await asyncio.create_subprocess_exec(sys.executable, "-c", CHILD, path, env=env)
        s = await sim.accept(timeout=20)
        assert s.name == "child"
        lines = await asyncio.to_thread(_read_notify, notify, "READY=1")
        assert any(line.startswith("STATUS=registered with containerd") for line in lines)
        lines = await asyncio.to_thread(_read_notify, notify, "WATCHDOG=1")
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 10) == 0
        lines = await asyncio.to_thread(_read_notify, notify, "STOPPING=1")
        await sim.close()

    try:
        asyncio.run(main())
    finally:
        notify.close()


def test_prelaunched_process_without_path_in_environment():
    # containerd gives a launched plugin only NRI_PLUGIN_* and the socket on fd 3.
    async def main():
        ours, theirs = socket.socketpair()
        sim = RuntimeSimulator("/nonexistent/unused")
        await sim.attach(theirs)
        fd = ours.fileno()
        env = {
            "NRI_PLUGIN_SOCKET": "3",
            "NRI_PLUGIN_NAME": "launched",
            "NRI_PLUGIN_IDX": "90",
            "PYTHONPATH": os.pathsep.join(sys.path),
        }
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", CHILD, env=env, pass_fds=(3,), preexec_fn=lambda: os.dup2(fd, 3)
        )
        ours.close()
        s = await sim.accept(timeout=20)
        assert (s.name, s.idx) == ("launched", "90")
        pod = make_pod("p")
        assert await s.create_container(pod, make_container(pod, "c")) is not None
        s.drop("runtime shuts the plugin down")
        assert await asyncio.wait_for(proc.wait(), 10) == 0

    asyncio.run(main())


def test_periodic_work_runs_while_registered_and_sends_its_updates(sock_dir, caplog):
    """Periodic runs every interval only while registered, its updates reach the runtime
    (UpdateContainers), a run that raises is logged and the next one still comes."""
    import logging

    caplog.set_level(logging.ERROR, logger="nri_sla.nri.service")

    async def main():
        path = os.path.join(sock_dir, "nri.sock")
        runs: list[float] = []
        pod = make_pod("p")
        ctr = make_container(pod, "c")

        def tick():
            runs.append(asyncio.get_running_loop().time())
            if len(runs) == 2:
                raise RuntimeError("boom")
            update = pb.ContainerUpdate(container_id=ctr.id)
            update.linux.resources.cpu.cpus = f"0-{len(runs)}"
            return [update]

        stop = asyncio.Event()
        opts = ServiceOptions(
            socket_path=path,
            backoff_initial=0.05,
            backoff_max=0.1,
            handle_signals=False,
            environ={},
            stop_event=stop,
            periodic=[service.Periodic(0.05, tick, "tick")],
        )
        svc = asyncio.create_task(run_service(Plugin(), opts))
        await asyncio.sleep(0.2)
        assert runs == []  # not registered: nothing runs
        sim = await RuntimeSimulator(path, containers=[ctr]).start()
        s = await sim.accept(timeout=5)
        for _ in range(100):
            if len(s.unsolicited) >= 3:
                break
            await asyncio.sleep(0.02)
        assert len(s.unsolicited) >= 3 and len(runs) >= 4  # run 2 raised: no update
        assert sim.state.containers[ctr.id].linux.resources.cpu.cpus.startswith("0-")
        await sim.close()
        await asyncio.sleep(0.05)
        stopped_at = len(runs)
        await asyncio.sleep(0.2)
        assert len(runs) <= stopped_at + 1  # the runtime is gone: no more runs
        stop.set()
        await asyncio.wait_for(svc, 5)

    asyncio.run(main())
    assert any("periodic tick failed" in r.getMessage() for r in caplog.records)


def test_a_periodic_runs_again_updates_go_once_the_first_is_answered(sock_dir):
    """`again` sees what was sent once the runtime answered, and what it gives goes as a
    further UpdateContainers, until it gives nothing: the runtime ends with the value of
    the last one (a cpuset an answer changed while the first was on its way)."""

    async def main():
        path = os.path.join(sock_dir, "nri.sock")
        pod = make_pod("p")
        ctr = make_container(pod, "c")
        seen: list[list[str]] = []

        def tick():
            update = pb.ContainerUpdate(container_id=ctr.id)
            update.linux.resources.cpu.cpus = "0-3"
            return [] if seen else [update]

        def again(sent):
            seen.append([u.linux.resources.cpu.cpus for u in sent])
            if len(seen) > 1:
                return []
            change = pb.ContainerUpdate(container_id=ctr.id)
            change.linux.resources.cpu.cpus = "4-7"
            return [change]

        stop = asyncio.Event()
        opts = ServiceOptions(
            socket_path=path,
            backoff_initial=0.05,
            backoff_max=0.1,
            handle_signals=False,
            environ={},
            stop_event=stop,
            periodic=[service.Periodic(0.05, tick, "tick", again=again)],
        )
        svc = asyncio.create_task(run_service(Plugin(), opts))
        sim = await RuntimeSimulator(path, containers=[ctr]).start()
        s = await sim.accept(timeout=5)
        for _ in range(100):
            if len(seen) >= 2:
                break
            await asyncio.sleep(0.02)
        assert seen == [["0-3"], ["4-7"]]
        assert len(s.unsolicited) == 2
        assert sim.state.containers[ctr.id].linux.resources.cpu.cpus == "4-7"
        await sim.close()
        stop.set()
        await asyncio.wait_for(svc, 5)

    asyncio.run(main())


STEP_SECONDS = 0.01  # what one step holds the loop for (a batch of containers read back)


def test_a_periodic_run_in_steps_lets_requests_through_and_sends_every_steps_updates(sock_dir):
    """A run returning a generator holds the loop one step at a time: a CreateContainer
    sent while it runs is answered long before its last step, and the updates of its
    first and last steps reach the runtime together."""

    async def main():
        path = os.path.join(sock_dir, "nri.sock")
        pod = make_pod("p")
        first, last = make_container(pod, "first"), make_container(pod, "last")
        total = 100
        done: list[int] = []  # steps run, of every run
        began = asyncio.Event()

        def update(ctr, cpus):
            u = pb.ContainerUpdate(container_id=ctr.id)
            u.linux.resources.cpu.cpus = cpus
            return u

        def pass_in_steps():
            if done:  # one run is enough
                return
            for i in range(total):
                time.sleep(STEP_SECONDS)  # the loop is held, as by reading cgroups
                done.append(i)
                began.set()
                yield (
                    [update(first, "0-1")]
                    if i == 0
                    else [update(last, "0-2")]
                    if i == total - 1
                    else []
                )

        stop = asyncio.Event()
        opts = ServiceOptions(
            socket_path=path,
            handle_signals=False,
            environ={},
            stop_event=stop,
            periodic=[service.Periodic(0.05, pass_in_steps, "steps")],
        )
        svc = asyncio.create_task(run_service(Plugin(), opts))
        sim = await RuntimeSimulator(path, containers=[first, last]).start()
        s = await sim.accept(timeout=5)
        await asyncio.wait_for(began.wait(), 10)
        assert await s.create_container(pod, make_container(pod, "c")) is not None
        answered_after = len(done)
        assert answered_after < total // 2  # not after the whole run
        for _ in range(500):
            if s.unsolicited:
                break
            await asyncio.sleep(0.02)
        (request,) = s.unsolicited  # one UpdateContainers, once the last step ran
        assert len(done) == total
        assert [u.container_id for u in request.update] == [first.id, last.id]
        assert sim.state.containers[first.id].linux.resources.cpu.cpus == "0-1"
        assert sim.state.containers[last.id].linux.resources.cpu.cpus == "0-2"
        stop.set()
        await asyncio.wait_for(svc, 5)
        await sim.close()

    asyncio.run(main())


def test_a_periodic_run_in_steps_ends_cleanly_when_the_connection_drops(sock_dir, caplog):
    """The runtime goes away mid-run: the run is closed between two steps (GeneratorExit
    at its yield), no further step runs and nothing is logged as failed."""
    import logging

    caplog.set_level(logging.WARNING, logger="nri_sla.nri.service")

    async def main():
        path = os.path.join(sock_dir, "nri.sock")
        done: list[int] = []
        closed: list[int] = []
        began = asyncio.Event()

        def endless_steps():
            try:
                while True:
                    time.sleep(STEP_SECONDS)
                    done.append(len(done))
                    began.set()
                    yield []
            except GeneratorExit:
                closed.append(len(done))
                raise

        stop = asyncio.Event()
        opts = ServiceOptions(
            socket_path=path,
            backoff_initial=0.05,
            backoff_max=0.1,
            handle_signals=False,
            environ={},
            stop_event=stop,
            periodic=[service.Periodic(0.05, endless_steps, "endless")],
        )
        svc = asyncio.create_task(run_service(Plugin(), opts))
        sim = await RuntimeSimulator(path).start()
        await sim.accept(timeout=5)
        await asyncio.wait_for(began.wait(), 10)
        await sim.close()  # containerd restarts mid-run
        for _ in range(250):
            if closed:
                break
            await asyncio.sleep(0.02)
        assert closed == [len(done)]  # closed right after its last step, once
        await asyncio.sleep(0.2)
        assert closed == [len(done)]  # and no step after that
        stop.set()
        await asyncio.wait_for(svc, 5)

    asyncio.run(main())
    assert not [r for r in caplog.records if "failed" in r.getMessage()]


def test_periodic_interval_must_be_positive():
    with pytest.raises(PluginConfigError, match="interval must be"):
        service.Periodic(0, lambda: None, "x")


def test_an_unreachable_runtime_warns_once_per_streak_then_once_a_minute(caplog):
    import logging

    caplog.set_level(logging.DEBUG, logger="nri_sla.nri.service")
    unreachable = service._Unreachable()
    err = ConnectionError("cannot connect to NRI socket /x: No such file or directory")
    for now in (0.0, 1.0, 3.0, 59.0, 61.0, 70.0):
        unreachable.failed(err, 5.0, now)
    unreachable.reset()  # registered again: the next failure starts a new streak
    unreachable.failed(err, 0.5, 100.0)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        "NRI runtime not reachable: cannot connect to NRI socket /x: No such file or "
        "directory; retrying in 5.0s",
        "NRI runtime still not reachable after 5 attempts in 61s: cannot connect to NRI "
        "socket /x: No such file or directory; retrying in 5.0s",
        "NRI runtime not reachable: cannot connect to NRI socket /x: No such file or "
        "directory; retrying in 0.5s",
    ]
    assert sum(r.levelno == logging.DEBUG for r in caplog.records) == 4


def test_a_service_without_runtime_keeps_warning(sock_dir, caplog, monkeypatch):
    """The service's own loop, not only _Unreachable: a runtime that never comes gets a
    warning per interval (a minute; 0.3 s here) for as long as it stays away."""
    import logging

    caplog.set_level(logging.DEBUG, logger="nri_sla.nri.service")
    monkeypatch.setattr(service._Unreachable, "INTERVAL", 0.3)

    async def main():
        stop = asyncio.Event()
        opts = ServiceOptions(
            socket_path=os.path.join(sock_dir, "absent.sock"),
            backoff_initial=0.02,
            backoff_max=0.05,
            handle_signals=False,
            environ={},
            stop_event=stop,
        )
        svc = asyncio.create_task(run_service(Plugin(), opts))
        await asyncio.sleep(1.1)
        stop.set()
        await asyncio.wait_for(svc, 5)

    asyncio.run(main())
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings[0].startswith("NRI runtime not reachable: cannot connect to NRI socket")
    assert 3 <= len(warnings) <= 5, warnings
    assert all(w.startswith("NRI runtime still not reachable after ") for w in warnings[1:])
    assert sum(
        r.levelno == logging.DEBUG and "not reachable" in r.getMessage() for r in caplog.records
    ) > len(warnings)
