"""The long-running plugin service: connect, register, serve, reconnect, notify systemd.

Two ways in:
* external (systemd unit, DaemonSet): dial `options.socket_path`; when the runtime
  restarts or drops us, dial again with capped exponential backoff;
* pre-launched by containerd from /opt/nri/plugins: the environment holds only
  NRI_PLUGIN_NAME, NRI_PLUGIN_IDX and NRI_PLUGIN_SOCKET=3 (a connected socket, no PATH).
  When that connection ends we exit: containerd launches us again.

SIGTERM/SIGINT end the service cleanly; SIGHUP calls `ServiceOptions.on_reload` (the
embedding code reads its configuration again) and never ends it. With NOTIFY_SOCKET set,
systemd hears READY=1 after registration, WATCHDOG=1 every WATCHDOG_USEC/2 and STOPPING=1
at the end.

`ServiceOptions.periodic`: work the plugin does on its own schedule (the drift watch, GPU
rescans), run on the event loop while registered, at once or in steps with requests
served between them; the container updates it returns go to the runtime as a
plugin-initiated UpdateContainers (`send_updates`, which a plugin uses for its own too).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from nri_plugin.nri.errors import ConnectionClosed, NriError, PluginConfigError
from nri_plugin.nri.stub import DEFAULT_SOCKET, REGISTRATION_TIMEOUT, Stub, check_identity

log = logging.getLogger("nri_sla.nri.service")

# Connection states reported through ServiceOptions.on_state.
CONNECTING = "connecting"
REGISTERED = "registered"
DISCONNECTED = "disconnected"
STOPPED = "stopped"


@dataclass(frozen=True)
class Periodic:
    """Work run every `interval` seconds on the service's loop while registered (the
    first run one interval after registration). `run` returns container updates (or
    None), or a generator of steps, each yielding its updates: the loop answers the
    runtime's requests between two steps, so a long run (a pass over thousands of
    containers) holds it for one step at a time, not for the whole run. The updates, of
    all steps together, go to the runtime with one UpdateContainers. An exception is
    logged and the next run comes as planned; a run in steps whose connection ends is
    closed between two steps (GeneratorExit at its `yield`)."""

    interval: float
    # -> list[pb.ContainerUpdate] | None, or a generator of such lists (one per step)
    run: Callable[[], Sequence[Any] | Generator[Sequence[Any], None, None] | None]
    name: str = ""  # for the log
    # -> what to send once more after the runtime answered (send_updates' `again`)
    again: Callable[[list[Any]], list[Any]] | None = None

    def __post_init__(self) -> None:
        if not (isinstance(self.interval, int | float) and self.interval > 0):
            raise PluginConfigError(
                f"periodic {self.name or self.run!r}: interval must be "
                f"a number of seconds above 0, got {self.interval!r}"
            )


async def _every(job: Periodic, stub: Stub) -> None:
    """`job` every interval for as long as `stub`'s connection lasts (cancelled then)."""
    name = job.name or getattr(job.run, "__qualname__", repr(job.run))
    while True:
        await asyncio.sleep(job.interval)
        if not stub.registered:
            continue
        try:
            await send_updates(stub, await _run_steps(job.run()), name, job.again)
        except ConnectionClosed:
            return  # the service reconnects; a new stub gets new runs
        except Exception:  # one bad run must not end the others or the service
            log.exception("periodic %s failed", name)


async def send_updates(
    stub: Stub,
    updates: Sequence[Any],
    name: str,
    again: Callable[[list[Any]], list[Any]] | None = None,
) -> None:
    """`updates` (none: nothing is sent) to the runtime as one plugin-initiated
    UpdateContainers; those it did not apply, or the call's failure, logged as `name`'s.
    Once the runtime answered, `again(sent)` gives what to send once more, the same way
    (values that changed while the request was on its way: a runtime may apply it after
    an answer the plugin gave meanwhile), until it gives nothing. Raises ConnectionClosed
    when the connection is gone."""
    pending = list(updates)
    while pending:
        try:
            failed = await stub.update_containers(pending)
        except ConnectionClosed:
            raise
        except NriError as exc:  # containerd answers an error when any update failed
            log.warning("%s: UpdateContainers of %d containers failed: %s", name, len(pending), exc)
        else:
            if failed:
                log.warning(
                    "%s: the runtime did not apply %d of %d container updates",
                    name,
                    len(failed),
                    len(pending),
                )
        pending = again(pending) if again is not None else []


async def _run_steps(
    result: Sequence[Any] | Generator[Sequence[Any], None, None] | None,
) -> list[Any]:
    """A Periodic run's updates: its result, or every step's, with the loop given back
    after each step (requests that came meanwhile are answered then). Cancelled (the
    connection ended) or failed, a run in steps is closed there: the steps not yet run
    never run."""
    if not isinstance(result, Generator):
        return list(result or ())
    updates: list[Any] = []
    try:
        for step in result:
            updates.extend(step)
            await asyncio.sleep(0)
    finally:
        result.close()
    return updates


@dataclass
class ServiceOptions:
    socket_path: str = DEFAULT_SOCKET
    name: str = "nri-sla"
    idx: str = "50"
    backoff_initial: float = 0.5
    # The most a reconnect waits: each second without a plugin is a second of pods
    # created unenforced, and a failed connect to a unix socket costs one system call.
    backoff_max: float = 5.0
    registration_timeout: float = REGISTRATION_TIMEOUT
    handle_signals: bool = True
    # Called with CONNECTING / REGISTERED / DISCONNECTED / STOPPED.
    on_state: Callable[[str], Any] | None = None
    # Called with the running total each time we register again after losing the runtime.
    on_reconnect: Callable[[int], Any] | None = None
    # Called with the Stub once registered (e.g. to keep it for update_containers).
    on_ready: Callable[[Stub], Any] | None = None
    # Where NRI_PLUGIN_* and NOTIFY_SOCKET/WATCHDOG_* are read; default os.environ.
    environ: Mapping[str, str] | None = None
    # Set it to stop the service from outside (tests, embedding).
    stop_event: asyncio.Event | None = field(default=None, repr=False)
    # Work run while registered (Periodic), e.g. rescans whose changes go to the runtime.
    periodic: Sequence[Periodic] = ()
    # Called on SIGHUP, on the loop (with handle_signals); SIGHUP is ignored without it.
    on_reload: Callable[[], Any] | None = None

    def __post_init__(self) -> None:
        if not 0 < self.backoff_initial <= self.backoff_max:
            raise PluginConfigError(
                f"backoff: need 0 < backoff_initial ({self.backoff_initial}) <= "
                f"backoff_max ({self.backoff_max})"
            )


class SystemdNotifier:
    """sd_notify(3) without libsystemd: datagrams to $NOTIFY_SOCKET."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        addr = environ.get("NOTIFY_SOCKET", "")
        self.address = "\0" + addr[1:] if addr.startswith("@") else addr
        usec = environ.get("WATCHDOG_USEC", "")
        pid = environ.get("WATCHDOG_PID", "")
        self.watchdog_interval: float | None = None
        if usec.isdigit() and int(usec) > 0 and (not pid or pid == str(os.getpid())):
            self.watchdog_interval = int(usec) / 2e6

    @property
    def enabled(self) -> bool:
        return bool(self.address)

    def notify(self, *lines: str) -> None:
        if not self.address:
            return
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            try:
                sock.sendto("\n".join(lines).encode(), self.address)
            except OSError as exc:  # systemd gone or socket path wrong: not fatal
                log.debug("sd_notify to %s failed: %s", self.address, exc)

    async def watchdog(self) -> None:
        if self.watchdog_interval is None:
            return
        while True:
            self.notify("WATCHDOG=1")
            await asyncio.sleep(self.watchdog_interval)


def _prelaunched(environ: Mapping[str, str]) -> tuple[socket.socket, str, str] | None:
    value = environ.get("NRI_PLUGIN_SOCKET")
    if not value:
        return None
    if not value.isdigit():
        raise PluginConfigError(
            f"NRI_PLUGIN_SOCKET={value!r}: expected a file descriptor number (containerd passes 3)"
        )
    name = environ.get("NRI_PLUGIN_NAME", "")
    idx = environ.get("NRI_PLUGIN_IDX", "")
    check_identity(name, idx)
    try:
        sock = socket.socket(fileno=int(value))
    except OSError as exc:
        raise PluginConfigError(
            f"NRI_PLUGIN_SOCKET={value}: not an open socket ({exc.strerror or exc})"
        ) from exc
    return sock, name, idx


class _Unreachable:
    """Attempts that found no runtime to register with (the socket missing or refusing,
    registration failing): the first of a streak and then one a minute are warnings with
    the count, the others debug lines, so that a node whose containerd stays down says
    so without a line every few seconds."""

    INTERVAL = 60.0  # s between warnings while the runtime stays unreachable

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.since: float | None = None
        self.attempts = 0
        self.warned = 0.0

    def failed(self, exc: BaseException, delay: float, now: float) -> None:
        self.attempts += 1
        if self.since is None:
            self.since = self.warned = now
            log.warning("NRI runtime not reachable: %s; retrying in %.1fs", exc, delay)
        elif now - self.warned >= self.INTERVAL:
            self.warned = now
            log.warning(
                "NRI runtime still not reachable after %d attempts in %.0fs: %s; retrying in %.1fs",
                self.attempts,
                now - self.since,
                exc,
                delay,
            )
        else:
            log.debug(
                "NRI runtime not reachable (attempt %d): %s; retrying in %.1fs",
                self.attempts,
                exc,
                delay,
            )


def _call(callback: Callable[..., Any] | None, *args: Any) -> None:
    if callback is None:
        return
    try:
        callback(*args)
    except Exception:  # a metrics callback must never take the service down
        log.exception("service callback %r failed", callback)


def _install_signal_handlers(
    loop: asyncio.AbstractEventLoop, stop: asyncio.Event, on_reload: Callable[[], Any] | None
) -> list[int]:
    """SIGTERM and SIGINT set `stop`, SIGHUP calls `on_reload`; returns the signals
    handled (none off the main thread, where the embedding code handles signals)."""
    handlers = {
        signal.SIGTERM: stop.set,
        signal.SIGINT: stop.set,
        signal.SIGHUP: lambda: _call(on_reload),
    }
    installed: list[int] = []
    for sig, handler in handlers.items():
        try:
            loop.add_signal_handler(sig, handler)
            installed.append(sig)
        except (NotImplementedError, RuntimeError, ValueError):
            pass  # not the main thread: the embedding code handles signals
    return installed


class _Backoff:
    """The wait before the next connection attempt: doubled after each, at most
    `maximum`, back to `initial` once a connection had registered; the attempts that
    found no runtime are reported by _Unreachable."""

    def __init__(self, initial: float, maximum: float) -> None:
        self.initial = initial
        self.maximum = maximum
        self.delay = initial
        self.unreachable = _Unreachable()

    def lost(self, exc: NriError, registered: bool, now: float) -> None:
        """A connection ended by `exc`; `registered`: it had registered."""
        if registered:
            self.delay = self.initial
            self.unreachable.reset()
            log.warning("NRI connection lost: %s; retrying in %.1fs", exc, self.delay)
        else:
            self.unreachable.failed(exc, self.delay, now)

    def next_delay(self) -> float:
        delay = self.delay
        self.delay = min(delay * 2, self.maximum)
        return delay


class _Connections:
    """One connection to the runtime after another, a Stub each (on the pre-launched
    socket, or dialling `socket_path`): the state callbacks and systemd status of each,
    its periodic jobs, and the registrations counted across them."""

    def __init__(
        self,
        plugin: object,
        opts: ServiceOptions,
        notifier: SystemdNotifier,
        prelaunched: tuple[socket.socket, str, str] | None,
    ) -> None:
        self.plugin = plugin
        self.opts = opts
        self.notifier = notifier
        self.prelaunched = prelaunched
        self.reconnects = 0
        self.ever_registered = False
        self.registered_now = False  # the last connection registered

    def _stub(self) -> Stub:
        timeout = self.opts.registration_timeout
        if self.prelaunched is not None:
            sock, name, idx = self.prelaunched
            return Stub(self.plugin, name=name, idx=idx, sock=sock, registration_timeout=timeout)
        return Stub(
            self.plugin,
            name=self.opts.name,
            idx=self.opts.idx,
            socket_path=self.opts.socket_path,
            registration_timeout=timeout,
        )

    def _ready(self, stub: Stub, jobs: list[asyncio.Task[None]]) -> None:
        if self.ever_registered:
            self.reconnects += 1
            _call(self.opts.on_reconnect, self.reconnects)
        self.registered_now = self.ever_registered = True
        _call(self.opts.on_state, REGISTERED)
        self.notifier.notify(
            "READY=1", f"STATUS=registered with {stub.runtime_name} {stub.runtime_version}".rstrip()
        )
        _call(self.opts.on_ready, stub)
        loop = asyncio.get_running_loop()
        jobs.extend(loop.create_task(_every(job, stub)) for job in self.opts.periodic)

    async def serve_one(self, stop: asyncio.Event) -> NriError | None:
        """One connection, served until it ends or `stop` is set: the NriError that
        ended it; None when stopped, or when the stub returned on its own."""
        _call(self.opts.on_state, CONNECTING)
        self.notifier.notify("STATUS=connecting to the NRI runtime")
        self.registered_now = False
        jobs: list[asyncio.Task[None]] = []  # the periodic runs of this connection
        stub = self._stub()
        stub.on_ready = lambda: self._ready(stub, jobs)
        loop = asyncio.get_running_loop()
        run = loop.create_task(stub.run())
        stopper = loop.create_task(stop.wait())
        await asyncio.wait({run, stopper}, return_when=asyncio.FIRST_COMPLETED)
        stopper.cancel()
        for job in jobs:  # they served that connection only
            job.cancel()
        if stop.is_set():
            stub.stop()
            with contextlib.suppress(NriError, asyncio.CancelledError):
                await asyncio.wait_for(run, 2.0)
            return None
        try:
            run.result()
        except NriError as exc:
            _call(self.opts.on_state, DISCONNECTED)
            self.notifier.notify(f"STATUS=disconnected: {exc}")
            return exc
        return None  # returned without stop(): treat as done


async def run_service(plugin: object, options: ServiceOptions | None = None) -> None:
    """Serve `plugin` until SIGTERM/SIGINT (or options.stop_event); returns None."""
    opts = options or ServiceOptions()
    environ = os.environ if opts.environ is None else opts.environ
    prelaunched = _prelaunched(environ)
    if prelaunched is None:
        check_identity(opts.name, opts.idx)
    notifier = SystemdNotifier(environ)
    stop = opts.stop_event or asyncio.Event()
    loop = asyncio.get_running_loop()
    installed = _install_signal_handlers(loop, stop, opts.on_reload) if opts.handle_signals else []
    watchdog = loop.create_task(notifier.watchdog())
    connections = _Connections(plugin, opts, notifier, prelaunched)
    backoff = _Backoff(opts.backoff_initial, opts.backoff_max)
    try:
        while not stop.is_set():
            ended = await connections.serve_one(stop)
            if ended is None:
                break
            if prelaunched is not None:
                log.info(
                    "pre-launched connection ended (%s); exiting so that the "
                    "runtime can launch us again",
                    ended,
                )
                break
            backoff.lost(ended, connections.registered_now, loop.time())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), backoff.next_delay())
    finally:
        watchdog.cancel()
        for sig in installed:
            loop.remove_signal_handler(sig)
        _call(opts.on_state, STOPPED)
        notifier.notify("STOPPING=1", "STATUS=stopped")


def serve(plugin: object, options: ServiceOptions | None = None) -> None:
    """run_service on uvloop's event loop when it is installed (the pyproject dependency:
    its libuv transports cut the transport's share of each NRI call), else asyncio's."""
    try:
        import uvloop
    except ImportError:  # a distribution without the wheel: asyncio does the same job
        log.info("event loop: asyncio (uvloop not installed)")
        asyncio.run(run_service(plugin, options))
        return
    log.info("event loop: uvloop %s", uvloop.__version__)
    uvloop.run(run_service(plugin, options))
