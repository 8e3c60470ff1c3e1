"""The plugin side of NRI: a Stub turns a plain Python object into an NRI plugin.

A plugin is any object with some of the handler methods of `PluginHandlers`; each may be
`def` or `async def`. The stub subscribes to the events the object has handlers for,
decodes requests, calls handlers, wraps their return values into the right response
messages and reports handler exceptions as error statuses on that call only (the
connection stays up).
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import logging
import re
import socket
from collections.abc import (
    Awaitable,
    Callable,
    Collection,
    Iterable,
    Mapping,
    Sequence,
)
from dataclasses import dataclass
from typing import Any, Protocol, TypeAlias, TypeVar

from google.protobuf.message import DecodeError, Message

from nri_plugin.nri import events as ev
from nri_plugin.nri.connection import Connection, Route
from nri_plugin.nri.core import PLUGIN_SERVICE, RUNTIME_SERVICE, Role
from nri_plugin.nri.errors import (
    Code,
    ConnectionClosed,
    NriError,
    PluginConfigError,
    RegistrationError,
    RpcError,
)
from nri_plugin.nri.levels import NriLevel, nri_level
from nri_plugin.nri.pb import nri_pb2 as pb
from nri_plugin.nri.ttrpc import embedded_field
from nri_plugin.nri.wire import Encoded, LazyMessages, read_fields

log = logging.getLogger("nri_sla.nri.stub")

NRI_VERSION = "v0.12.0"  # the NRI API version this package implements
DEFAULT_SOCKET = "/var/run/nri/nri.sock"
REGISTRATION_TIMEOUT = 5.0

_NAME = re.compile(r"^[A-Za-z0-9_.+-]+$")
_IDX = re.compile(r"^[0-9]{2}$")

_T = TypeVar("_T")
_M = TypeVar("_M", bound=Message)
MaybeAwaitable: TypeAlias = _T | Awaitable[_T]  # a handler may be `def` or `async def`


@dataclass(frozen=True, slots=True)
class SyncLimits:
    """Bounds on one Synchronize, all its more=true parts together, checked as each part
    arrives. containerd splits its state only when it exceeds 4 MiB, into parts of just
    under 4 MiB, so a real node sends a few parts and a few thousand objects; a runtime
    that keeps sending parts is refused instead of growing the plugin without end."""

    parts: int = 1024
    pods: int = 65_536
    containers: int = 65_536
    bytes: int = 64 << 20  # encoded; 10,000 CRI-shaped containers are ~27 MB

    def describe(self) -> str:
        return (
            f"{self.parts} parts, {self.pods} pods, {self.containers} containers, "
            f"{self.bytes} bytes"
        )


class _SyncParts:
    """The parts of one Synchronize so far. Once a bound is passed (or a part does not
    decode) every later part of the same Synchronize fails too: the handler must never
    see part of the runtime's state as if it were all of it. The pods and
    containers stay encoded (`LazyMessages`: decoded again on each pass of the handler),
    each decoded once here all the same, so that a malformed one is refused with its
    part, not found by the handler after the answer."""

    __slots__ = ("bytes", "containers", "failure", "limits", "more", "parts", "pods")

    def __init__(self, limits: SyncLimits) -> None:
        self.limits = limits
        self.pods: LazyMessages[pb.PodSandbox] = LazyMessages(pb.PodSandbox)
        self.containers: LazyMessages[pb.Container] = LazyMessages(pb.Container)
        self.parts = 0
        self.bytes = 0
        # Whether more parts follow the last one added; None: unknown (it did not decode).
        self.more: bool | None = False
        self.failure: RpcError | None = None

    def fail(self, error: RpcError) -> RpcError:
        if self.failure is None:  # logged once: later parts fail without a word
            log.warning("%s", error.message)
        self.failure = error
        # Nothing is kept for a refused state.
        self.pods, self.containers = LazyMessages(pb.PodSandbox), LazyMessages(pb.Container)
        return error

    def add(self, payload: Encoded) -> None:
        """Join one part; raises RpcError: InvalidArgument for a part that does not decode,
        ResourceExhausted past a bound."""
        self.more = None
        try:
            found = read_fields(payload)
            more = bool(found.varints.get(_MORE))
            if self.failure is not None:
                self.more = more
                raise RpcError(self.failure.code, self.failure.message, "Synchronize")
            pods = LazyMessages.of(pb.PodSandbox, payload, found, _PODS)
            containers = LazyMessages.of(pb.Container, payload, found, _CONTAINERS)
            for _ in itertools.chain(pods, containers):
                pass
        except DecodeError as exc:
            raise self.fail(_malformed(pb.SynchronizeRequest, exc, "Synchronize")) from None
        self.more = more
        self.parts += 1
        self.bytes += len(payload)
        limits = self.limits
        for what, have, most in (
            ("parts", self.parts, limits.parts),
            ("bytes", self.bytes, limits.bytes),
            ("pods", len(self.pods) + len(pods), limits.pods),
            ("containers", len(self.containers) + len(containers), limits.containers),
        ):
            if have > most:
                raise self.fail(
                    RpcError(
                        Code.RESOURCE_EXHAUSTED,
                        f"Synchronize refused: more than {most} {what} after {self.parts} "
                        f"parts; nri-sla holds at most {limits.describe()} of runtime state",
                        "Synchronize",
                    )
                )
        self.pods.extend(pods)
        self.containers.extend(containers)


_PODS, _CONTAINERS, _MORE = (
    pb.SynchronizeRequest.DESCRIPTOR.fields_by_name[name].number
    for name in ("pods", "containers", "more")
)


@dataclass(frozen=True, slots=True)
class CreateResult:
    """The answer of a create_container handler, its only return shape."""

    adjustment: pb.ContainerAdjustment | None = None  # None: the container as requested
    updates: Sequence[pb.ContainerUpdate] = ()  # changes to other, existing containers
    evictions: Sequence[pb.ContainerEviction] = ()  # containers the runtime should evict


class PluginHandlers(Protocol):
    """Every handler a plugin object may have, one per NRI event plus configure,
    synchronize and shutdown. A plugin implements any subset: the stub subscribes to the
    events of the handlers present (nri_plugin.nri.events.HANDLERS names them) and
    answers Configure, Synchronize and Shutdown itself when their handler is missing.

    A handler that raises fails that call only, with status Unknown and str(exc) as the
    message (raise RpcError to choose the code); validate_container_adjustment is the
    exception: raising rejects the adjustment, as the Go stub does. A StateChange (how
    NRI <= v0.11 runtimes send most events) runs only handlers whose answer carries
    nothing (events.NON_ADJUSTING_EVENTS).
    """

    def configure(
        self, config: str, runtime_name: str, runtime_version: str
    ) -> MaybeAwaitable[int | None]:
        """Return an event mask to subscribe with instead of the one derived from the
        handlers present (the stub clips it to what the runtime knows)."""

    def synchronize(
        self, pods: Collection[pb.PodSandbox], containers: Collection[pb.Container]
    ) -> MaybeAwaitable[Sequence[pb.ContainerUpdate] | None]:
        """Called once with the runtime's whole state (all chunks joined). `pods` and
        `containers` are decoded again, one message at a time, on each iteration
        (wire.LazyMessages): keep what is needed of one, not its message (a message
        keeps its whole parse)."""

    def shutdown(self) -> MaybeAwaitable[None]: ...

    def run_pod_sandbox(self, pod: pb.PodSandbox) -> MaybeAwaitable[None]: ...

    def stop_pod_sandbox(self, pod: pb.PodSandbox) -> MaybeAwaitable[None]: ...

    def remove_pod_sandbox(self, pod: pb.PodSandbox) -> MaybeAwaitable[None]: ...

    def update_pod_sandbox(
        self,
        pod: pb.PodSandbox,
        overhead: pb.LinuxResources | None,
        resources: pb.LinuxResources | None,
    ) -> MaybeAwaitable[None]:
        """overhead and resources are None when the event came as a StateChange."""

    def post_update_pod_sandbox(self, pod: pb.PodSandbox) -> MaybeAwaitable[None]: ...

    def create_container(
        self, pod: pb.PodSandbox, container: pb.Container
    ) -> MaybeAwaitable[CreateResult]: ...

    def post_create_container(
        self, pod: pb.PodSandbox, container: pb.Container
    ) -> MaybeAwaitable[None]: ...

    def start_container(
        self, pod: pb.PodSandbox, container: pb.Container
    ) -> MaybeAwaitable[None]: ...

    def post_start_container(
        self, pod: pb.PodSandbox, container: pb.Container
    ) -> MaybeAwaitable[None]: ...

    def update_container(
        self, pod: pb.PodSandbox, container: pb.Container, resources: pb.LinuxResources
    ) -> MaybeAwaitable[Sequence[pb.ContainerUpdate] | None]: ...

    def post_update_container(
        self, pod: pb.PodSandbox, container: pb.Container
    ) -> MaybeAwaitable[None]: ...

    def stop_container(
        self, pod: pb.PodSandbox, container: pb.Container
    ) -> MaybeAwaitable[Sequence[pb.ContainerUpdate] | None]: ...

    def remove_container(
        self, pod: pb.PodSandbox, container: pb.Container
    ) -> MaybeAwaitable[None]: ...

    def validate_container_adjustment(
        self, request: pb.ValidateContainerAdjustmentRequest
    ) -> MaybeAwaitable[None]:
        """Raise to reject (sent as reject=true, reason=str(exc))."""


def check_identity(name: str, idx: str) -> None:
    """Reject what the runtime would reject, before connecting."""
    if not name or not _NAME.match(name):
        raise PluginConfigError(
            f"plugin name {name!r} is invalid: use letters, digits and _.+- only"
        )
    if not _IDX.match(idx or ""):
        raise PluginConfigError(
            f"plugin index {idx!r} is invalid: exactly two digits, "
            "00-99 (plugins run in ascending index order)"
        )


# What plain (`def`) handlers return: never awaitable.
_PLAIN_ANSWERS = frozenset({type(None), CreateResult, list, tuple, int})


def map_as_dict(values: Mapping[str, str]) -> dict[str, str]:
    """A protobuf map field (annotations, labels) as a dict, key by key: protobuf's map
    iterates and looks up natively, but its items() is collections.abc's ItemsView, a
    generator in Python, which dict(m) goes through: ~2x slower per request."""
    return {key: values[key] for key in values}


def _maybe_await(result: Any, then: Callable[[Any], bytes]) -> bytes | Awaitable[bytes]:
    """Apply `then` now, or after awaiting when the handler was a coroutine."""
    # The answers of plain handlers are told apart without inspect's ABC check (every
    # call comes through here).
    if type(result) not in _PLAIN_ANSWERS and inspect.isawaitable(result):

        async def finish() -> bytes:
            return then(await result)

        return finish()
    return then(result)


def _decode(cls: type[Message], payload: Encoded, method: str) -> Any:
    try:
        return cls.FromString(payload)  # type: ignore[arg-type]  # any buffer: the stubs say bytes
    except DecodeError as exc:
        raise _malformed(cls, exc, method) from None


def _malformed(cls: type[Message], exc: DecodeError, method: str) -> RpcError:
    return RpcError(Code.INVALID_ARGUMENT, f"{method}: malformed {cls.DESCRIPTOR.name}: {exc}")


def _create_response(result: Any) -> bytes:
    """The CreateContainerResponse, encoded field by field as protobuf encodes it (adjust
    = 1, update = 2, evict = 3, in that order): each message is serialized once, instead
    of first being copied into a response message (which cost four times as much)."""
    if not isinstance(result, CreateResult):
        raise TypeError(f"create_container must return CreateResult, got {type(result).__name__}")
    adjustment, updates, evictions = result.adjustment, result.updates, result.evictions
    adjust = (
        b""
        if adjustment is None
        else embedded_field(0x0A, _of(pb.ContainerAdjustment, adjustment).SerializeToString())
    )
    if not updates and not evictions:  # nearly every create: one field or none
        return adjust
    return b"".join(
        [
            adjust,
            *[
                embedded_field(0x12, _of(pb.ContainerUpdate, u).SerializeToString())
                for u in updates
            ],
            *[
                embedded_field(0x1A, _of(pb.ContainerEviction, e).SerializeToString())
                for e in evictions
            ],
        ]
    )


def _of(cls: type[_M], message: object) -> _M:
    """`message`, which must be a `cls` (as a response message's field would insist)."""
    if type(message) is not cls:
        raise TypeError(
            f"create_container's CreateResult holds a {type(message).__name__} "
            f"where a {cls.__name__} belongs"
        )
    return message


def _updates(result: Any, method: str) -> Sequence[pb.ContainerUpdate]:
    if result is None:
        return ()
    if isinstance(result, pb.ContainerUpdate) or not isinstance(result, Iterable):
        raise TypeError(
            f"{method} must return list[ContainerUpdate] | None, got {type(result).__name__}"
        )
    return list(result)


_EMPTY = b""  # every "no content" response encodes to zero bytes


class Stub:
    """Serves `plugin`, an object with any subset of the PluginHandlers methods."""

    def __init__(
        self,
        plugin: object,
        *,
        name: str,
        idx: str,
        socket_path: str | None = None,
        sock: socket.socket | None = None,
        on_ready: Callable[[], Any] | None = None,
        registration_timeout: float = REGISTRATION_TIMEOUT,
        nri_version: str = NRI_VERSION,
        sync_limits: SyncLimits = SyncLimits(),
    ) -> None:
        check_identity(name, idx)
        if socket_path is not None and sock is not None:
            raise PluginConfigError("give socket_path or sock, not both")
        self.plugin = plugin
        self.name = name
        self.idx = idx
        # With a given socket this is only a label for messages.
        self.socket_path = socket_path or (
            f"fd {sock.fileno()}" if sock is not None else DEFAULT_SOCKET
        )
        self._sock = sock
        self.on_ready = on_ready
        self.registration_timeout = registration_timeout
        self.own_nri_version = nri_version
        self._registered = False
        self._stopping = False
        self._conn: Connection | None = None
        self._configured = asyncio.Event()
        self.runtime_name = ""
        self.runtime_version = ""
        self.nri_level = NriLevel("", "unknown")  # from Configure
        self.config = ""
        self.request_timeout_ms = 0
        self.events = 0  # the mask we subscribed with
        self.sync_limits = sync_limits
        self._sync = _SyncParts(sync_limits)
        self.routes: dict[tuple[str, str], Route] = self._build_routes()

    # -- public --------------------------------------------------------------
    @property
    def registered(self) -> bool:
        return self._registered

    @property
    def nri_version(self) -> str:
        """The runtime's NRI version: sent in Configure, else known from its release
        (nri_plugin.nri.levels); "" when neither."""
        return self.nri_level.version

    async def run(self) -> None:
        """Connect, register and serve until the connection ends. Returns None after
        stop(); raises ConnectionClosed when the runtime goes away, RegistrationError
        when registration fails."""
        loop = asyncio.get_running_loop()
        try:
            if self._sock is not None:
                _, conn = await loop.create_unix_connection(self._new_connection, sock=self._sock)
            else:
                _, conn = await loop.create_unix_connection(
                    self._new_connection, path=self.socket_path
                )
        except OSError as exc:
            raise ConnectionClosed(
                f"cannot connect to NRI socket {self.socket_path}: {exc.strerror or exc}"
            ) from exc
        self._conn = conn
        self._configured = asyncio.Event()
        self._sync = _SyncParts(self.sync_limits)  # parts never carry over connections
        try:
            if self._stopping:  # stop() came while we were connecting
                return
            try:
                await self._register(conn)
                await self._wait_configured(conn)
            except RegistrationError:
                if self._stopping:
                    return
                raise
            self._registered = True
            log.info(
                "registered as %s-%s with %s %s (NRI %s)",
                self.idx,
                self.name,
                self.runtime_name or "runtime",
                self.runtime_version,
                self.nri_level.describe(),
            )
            if self.on_ready is not None:
                done = self.on_ready()
                if inspect.isawaitable(done):
                    await done
            await conn.wait_closed()
        finally:
            self._registered = False
            conn.close()
        if not self._stopping:
            reason = conn.close_reason
            if isinstance(reason, NriError):  # we ended it: protocol error, exhaustion
                raise ConnectionClosed(f"NRI connection ended: {reason}") from reason
            why = f": {reason}" if reason else ""
            raise ConnectionClosed(f"runtime closed the NRI connection{why}")

    def stop(self) -> None:
        """End run() cleanly (it returns None)."""
        self._stopping = True
        if self._conn is not None:
            self._conn.close()

    async def update_containers(
        self,
        updates: Iterable[pb.ContainerUpdate],
        evictions: Iterable[pb.ContainerEviction] = (),
        timeout: float | None = 5.0,
    ) -> list[pb.ContainerUpdate]:
        """Runtime/UpdateContainers: unsolicited updates; returns the failed ones."""
        if self._conn is None or not self._registered:
            raise ConnectionClosed("UpdateContainers: plugin is not registered")
        req = pb.UpdateContainersRequest(update=updates, evict=evictions)
        payload = await self._conn.call(
            RUNTIME_SERVICE, "UpdateContainers", req.SerializeToString(), timeout
        )
        return list(_decode(pb.UpdateContainersResponse, payload, "UpdateContainers").failed)

    # -- connection ----------------------------------------------------------
    def _new_connection(self) -> Connection:
        return Connection(Role.PLUGIN, self.routes)

    def registration_request(self) -> pb.RegisterPluginRequest:
        return pb.RegisterPluginRequest(
            plugin_name=self.name, plugin_idx=self.idx, NRI_version=self.own_nri_version
        )

    async def _wait_configured(self, conn: Connection) -> None:
        # containerd answers RegisterPlugin first and sends Configure right after (see
        # the golden recordings); like the reference stub, we are only ready once
        # configured, so on_ready sees runtime_name/nri_level filled in.
        closed = asyncio.ensure_future(conn.wait_closed())
        configured = asyncio.ensure_future(self._configured.wait())
        try:
            await asyncio.wait(
                {closed, configured},
                timeout=self.registration_timeout,
                return_when=asyncio.FIRST_COMPLETED,
            )
        finally:
            closed.cancel()
            configured.cancel()
        if not self._configured.is_set():
            why = "closed the connection" if conn.is_closed else "sent no Configure"
            raise RegistrationError(
                f"runtime {why} within {self.registration_timeout:g}s "
                f"of registering {self.idx}-{self.name}"
            )

    async def _register(self, conn: Connection) -> None:
        req = self.registration_request()
        try:
            await conn.call(
                RUNTIME_SERVICE,
                "RegisterPlugin",
                req.SerializeToString(),
                self.registration_timeout,
            )
        except RpcError as exc:
            raise RegistrationError(f"RegisterPlugin {self.idx}-{self.name} failed: {exc}") from exc
        except ConnectionClosed as exc:
            raise RegistrationError(
                f"runtime closed the connection during RegisterPlugin of {self.idx}-{self.name}"
            ) from exc

    # -- routes --------------------------------------------------------------
    def _handler(self, name: str) -> Callable[..., Any] | None:
        handler = getattr(self.plugin, name, None)
        return handler if callable(handler) else None

    def _build_routes(self) -> dict[tuple[str, str], Route]:
        routes: dict[tuple[str, str], Route] = {
            (PLUGIN_SERVICE, "Configure"): self._configure,
            (PLUGIN_SERVICE, "Synchronize"): self._synchronize,
            (PLUGIN_SERVICE, "Shutdown"): self._shutdown,
            (PLUGIN_SERVICE, "StateChange"): self._state_change,
        }
        for event, method in ev.RPCS.items():
            routes[(PLUGIN_SERVICE, method)] = self._event_route(event, method)
        return routes

    def _configure(self, payload: Encoded) -> bytes | Awaitable[bytes]:
        req = _decode(pb.ConfigureRequest, payload, "Configure")
        self.config = req.config
        self.runtime_name = req.runtime_name
        self.runtime_version = req.runtime_version
        self.nri_level = nri_level(req.NRI_version, req.runtime_name, req.runtime_version)
        self.request_timeout_ms = req.request_timeout
        handler = self._handler("configure")
        result = (
            None if handler is None else handler(req.config, req.runtime_name, req.runtime_version)
        )

        def answer(mask: Any) -> bytes:
            wanted = (
                mask
                if isinstance(mask, int) and not isinstance(mask, bool)
                else ev.plugin_mask(self.plugin)
            )
            # A bit the runtime does not know makes it drop us: clip to its version.
            self.events = wanted & ev.known_mask(self.nri_level.version)
            self._configured.set()
            return pb.ConfigureResponse(events=self.events).SerializeToString()

        return _maybe_await(result, answer)

    def _synchronize(self, payload: Encoded) -> bytes | Awaitable[bytes]:
        parts = self._sync
        try:
            parts.add(payload)
        finally:
            if parts.more is False:  # the last part: the next Synchronize starts afresh
                self._sync = _SyncParts(self.sync_limits)
        # (A part that does not decode: which part was last is unknown, so every later
        # part fails too.)
        if parts.more:
            return pb.SynchronizeResponse(more=True).SerializeToString()
        handler = self._handler("synchronize")
        if handler is None:
            return _EMPTY
        return _maybe_await(
            handler(parts.pods, parts.containers),
            lambda r: pb.SynchronizeResponse(update=_updates(r, "synchronize")).SerializeToString(),
        )

    def _shutdown(self, payload: Encoded) -> bytes | Awaitable[bytes]:
        handler = self._handler("shutdown")
        if handler is None:
            return _EMPTY
        return _maybe_await(handler(), lambda _: _EMPTY)

    def _state_change(self, payload: Encoded) -> bytes | Awaitable[bytes]:
        req = _decode(pb.StateChangeEvent, payload, "StateChange")
        name = ev.HANDLERS.get(req.event)
        if name is None:
            return _EMPTY  # an event newer than this stub: nothing runs (as in the Go stub)
        if req.event not in ev.NON_ADJUSTING_EVENTS:
            # Its answer could not carry the adjustment: running create_container here
            # would reserve GPUs and CPUs for a container the runtime never adjusts.
            raise RpcError(
                Code.INVALID_ARGUMENT,
                f"StateChange cannot carry {ev.RPCS[req.event]} (event "
                f"{req.event}): it adjusts containers and has its own RPC; "
                "not run",
                "StateChange",
            )
        handler = self._handler(name)
        if handler is None:
            return _EMPTY
        if req.event == ev.UPDATE_POD_SANDBOX:
            result = handler(req.pod, None, None)
        elif req.event in ev.POD_EVENTS:
            result = handler(req.pod)
        else:
            result = handler(req.pod, req.container)
        return _maybe_await(result, lambda _: _EMPTY)

    def _event_route(self, event: int, method: str) -> Route:
        handler = self._handler(ev.HANDLERS[event])
        req_cls = getattr(pb, method + "Request")

        if handler is None:
            empty = (
                pb.ValidateContainerAdjustmentResponse().SerializeToString()
                if event == ev.VALIDATE_CONTAINER_ADJUSTMENT
                else _EMPTY
            )

            def no_handler(payload: Encoded) -> bytes:
                _decode(req_cls, payload, method)
                return empty

            return no_handler

        if event == ev.CREATE_CONTAINER:

            def create(payload: Encoded) -> bytes | Awaitable[bytes]:
                req = _decode(req_cls, payload, method)
                result = handler(req.pod, req.container)
                if type(result) is CreateResult:  # a plain handler's answer: encoded now
                    return _create_response(result)
                return _maybe_await(result, _create_response)

            return create
        if event in (ev.UPDATE_CONTAINER, ev.STOP_CONTAINER):
            resp_cls = getattr(pb, method + "Response")
            hname = ev.HANDLERS[event]

            def updating(payload: Encoded) -> bytes | Awaitable[bytes]:
                req = _decode(req_cls, payload, method)
                if event == ev.UPDATE_CONTAINER:
                    result = handler(req.pod, req.container, req.linux_resources)
                else:
                    result = handler(req.pod, req.container)
                return _maybe_await(
                    result, lambda r: resp_cls(update=_updates(r, hname)).SerializeToString()
                )

            return updating
        if event == ev.VALIDATE_CONTAINER_ADJUSTMENT:
            return self._validate_route(handler, req_cls, method)
        if event == ev.UPDATE_POD_SANDBOX:

            def update_pod(payload: Encoded) -> bytes | Awaitable[bytes]:
                req = _decode(req_cls, payload, method)
                return _maybe_await(
                    handler(req.pod, req.overhead_linux_resources, req.linux_resources),
                    lambda _: _EMPTY,
                )

            return update_pod
        pod_only = event in ev.POD_EVENTS

        def notify(payload: Encoded) -> bytes | Awaitable[bytes]:
            req = _decode(req_cls, payload, method)
            result = handler(req.pod) if pod_only else handler(req.pod, req.container)
            return _maybe_await(result, lambda _: _EMPTY)

        return notify

    @staticmethod
    def _validate_route(handler: Callable[..., Any], req_cls: type[Message], method: str) -> Route:
        # As in the reference stub, a raising validator rejects the adjustment through
        # the response (reject + reason) rather than failing the call.
        def reject(exc: Exception) -> bytes:
            return pb.ValidateContainerAdjustmentResponse(
                reject=True, reason=str(exc) or type(exc).__name__
            ).SerializeToString()

        def validate(payload: Encoded) -> bytes | Awaitable[bytes]:
            req = _decode(req_cls, payload, method)
            try:
                result = handler(req)
            except Exception as exc:
                return reject(exc)
            if inspect.isawaitable(result):

                async def finish() -> bytes:
                    try:
                        await result
                    except Exception as exc:
                        return reject(exc)
                    return _EMPTY

                return finish()
            return _EMPTY

        return validate
