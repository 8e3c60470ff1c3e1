"""A runtime-side NRI simulator (the part of containerd that talks to plugins).

Used by tests, benchmarks and `nri-sla demo`. It listens on a unix socket, accepts
plugins, serves Runtime/RegisterPlugin and UpdateContainers, configures and
synchronizes each plugin and lets the caller send any event with a deadline. It follows
containerd's habits: Configure goes out before the RegisterPlugin reply (configurable),
events the plugin did not subscribe to are not sent, a subscription bit the runtime's
NRI version does not know drops the plugin, a missed deadline drops the plugin, outgoing
messages are cut into 4,096-byte mux frames, Synchronize is chunked (more=true) when the
state exceeds `sync_chunk_bytes`.

Modes: "v0.12" (containerd 2.3: dedicated RPC per event), "v0.11" (CRI-O 1.36: most
events as StateChange, no NRI version in Configure, events 1-14 known) and "v0.8"
(containerd 1.7: as v0.11, but events 12-14 unknown).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from nri_plugin.nri import events as ev
from nri_plugin.nri.connection import Connection, Route
from nri_plugin.nri.core import Role
from nri_plugin.nri.errors import Code, ConnectionClosed, NriError, PluginConfigError, RpcError
from nri_plugin.nri.pb import nri_pb2 as pb
from nri_plugin.nri.stub import PLUGIN_SERVICE, RUNTIME_SERVICE
from nri_plugin.nri.wire import Encoded
from nri_plugin.simulated.cdi import CdiRegistry
from nri_plugin.simulated.ocispec import (
    OciSpec,
    apply_adjustment,
    spec_from_request,
    update_resources,
    write_container,
)
from nri_plugin.simulated.syncgate import SyncGate


@dataclass(frozen=True)
class SimulatedNri:
    """One runtime's NRI as the simulator plays it."""

    sent_version: str  # what its Configure carries (NRI before v0.12 sends nothing)
    speaks: str  # the NRI version it vendors: the events it knows
    runtime_name: str
    runtime_version: str
    state_change: bool  # the events without an answer go as StateChange (NRI < v0.12)


MODES = {
    "v0.12": SimulatedNri("v0.12.0", "v0.12.0", "containerd", "2.3.4", state_change=False),
    "v0.11": SimulatedNri("", "v0.11.0", "cri-o", "1.36.3", state_change=True),
    "v0.8": SimulatedNri("", "v0.8.0", "containerd", "1.7.34", state_change=True),
}
NAMESPACE_METADATA = (("containerd-namespace-ttrpc", "k8s.io"),)
DEFAULT_ENV = ("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin",)  # an image's


class PluginCallError(RpcError):
    """The plugin answered an event with an error status (or missed the deadline)."""


class PluginDropped(NriError):
    """The simulator dropped the plugin (bad subscription, missed deadline, closed)."""


@dataclass
class SimulatorOptions:
    mode: str = "v0.12"
    runtime_name: str = ""  # default: by mode (MODES)
    runtime_version: str = ""  # default: by mode
    config: str = ""
    registration_timeout: float = 5.0
    request_timeout: float = 2.0
    # Split Synchronize when the encoded state exceeds this many bytes (containerd: just
    # under the 4 MiB message limit).
    sync_chunk_bytes: int = 4 * 1024 * 1024 - 64 * 1024
    configure_before_register_reply: bool = True
    drop_on_timeout: bool = True
    max_send_payload: int = 4096

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise PluginConfigError(f"simulator mode {self.mode!r}: allowed {sorted(MODES)}")
        self.runtime_name = self.runtime_name or MODES[self.mode].runtime_name
        self.runtime_version = self.runtime_version or MODES[self.mode].runtime_version

    @property
    def nri(self) -> SimulatedNri:
        return MODES[self.mode]


@dataclass
class RuntimeState:
    pods: dict[str, pb.PodSandbox] = field(default_factory=dict)
    containers: dict[str, pb.Container] = field(default_factory=dict)
    specs: dict[str, OciSpec] = field(default_factory=dict)  # of the containers created here

    def update(self, container_id: str, resources: pb.LinuxResources) -> None:
        """A ContainerUpdate (a plugin's, or the kubelet's resize) applied to the spec
        and to the stored container."""
        stored = self.containers.get(container_id)
        if stored is not None:
            update_resources(stored.linux.resources, resources)
        spec = self.specs.get(container_id)
        if spec is not None:
            update_resources(spec.resources, resources)

    def forget(self, container_id: str) -> None:
        self.containers.pop(container_id, None)
        self.specs.pop(container_id, None)


def chunk_state(
    pods: list[pb.PodSandbox], containers: list[pb.Container], limit: int
) -> list[pb.SynchronizeRequest]:
    """Split the state into SynchronizeRequests of about `limit` encoded bytes each;
    all but the last carry more=true. Pods go first so that a plugin sees a container's
    pod no later than the container."""
    chunks: list[pb.SynchronizeRequest] = []
    cur = pb.SynchronizeRequest()
    size = 0
    for kind, items in (("pods", pods), ("containers", containers)):
        for item in items:
            n = item.ByteSize() + 6
            if size and size + n > limit:
                cur.more = True
                chunks.append(cur)
                cur, size = pb.SynchronizeRequest(), 0
            getattr(cur, kind).append(item)
            size += n
    chunks.append(cur)
    return chunks


def _embed(tag: int, data: bytes) -> bytes:
    """A length-delimited field, as protobuf encodes an embedded message."""
    size = len(data)
    head = bytearray((tag,))
    while size > 0x7F:
        head.append((size & 0x7F) | 0x80)
        size >>= 7
    head.append(size)
    return bytes(head) + data


def build_spec(ctr: pb.Container, cdi: CdiRegistry | None) -> tuple[OciSpec, pb.Container]:
    """containerd's CreateContainer up to its NRI call: the spec built from the request
    (CDI devices injected; InvalidInput when one cannot be resolved) and the container as
    the plugins are shown it."""
    spec = spec_from_request(ctr, cdi)
    shown = pb.Container()
    shown.CopyFrom(ctr)
    write_container(spec, shown)
    return spec, shown


def adjust_container(
    stored: pb.Container, spec: OciSpec, adjust: pb.ContainerAdjustment, cdi: CdiRegistry | None
) -> None:
    """An adjustment applied to the spec, and the runtime's copy of the container (what a
    later Synchronize reports) rewritten from it."""
    apply_adjustment(spec, adjust, cdi)
    write_container(spec, stored)


class PluginSession:
    """One connected plugin as the runtime sees it."""

    def __init__(self, sim: RuntimeSimulator) -> None:
        self.sim = sim
        self.opts = sim.options
        self.name = ""
        self.idx = ""
        self.plugin_nri_version = ""
        self.events = 0
        self.registered = asyncio.Event()
        self.ready = asyncio.Event()  # configured and synchronized
        self.sync_updates: list[pb.ContainerUpdate] = []
        self.unsolicited: list[pb.UpdateContainersRequest] = []  # plugin-initiated, in order
        self._unsolicited_new: asyncio.Queue[pb.UpdateContainersRequest] = asyncio.Queue()
        self.drop_reason = ""
        self.error: BaseException | None = None
        routes: dict[tuple[str, str], Route] = {
            (RUNTIME_SERVICE, "RegisterPlugin"): self._register,
            (RUNTIME_SERVICE, "UpdateContainers"): self._update_containers,
        }
        self.conn = Connection(Role.RUNTIME, routes, max_send_payload=self.opts.max_send_payload)
        self._setup: asyncio.Task[None] | None = None

    # -- runtime service -----------------------------------------------------
    def _register(self, payload: Encoded) -> bytes | Any:
        req = pb.RegisterPluginRequest.FromString(payload)  # type: ignore[arg-type]  # any buffer
        self.name, self.idx = req.plugin_name, req.plugin_idx
        self.plugin_nri_version = req.NRI_version
        self.registered.set()
        if self.opts.configure_before_register_reply:

            async def configure_first() -> bytes:
                try:
                    await self._configure()
                except Exception as exc:
                    self._setup_failed(exc)
                    raise
                self._start_sync()
                return b""

            return configure_first()
        self._start_sync(configure=True)
        return b""

    def _start_sync(self, configure: bool = False) -> None:
        async def setup() -> None:
            try:
                if configure:
                    await self._configure()
                await self._synchronize_initial()
                self.ready.set()
            except Exception as exc:
                self._setup_failed(exc)

        self._setup = asyncio.get_running_loop().create_task(setup())

    def _setup_failed(self, exc: Exception) -> None:
        # containerd drops a plugin whose Configure or Synchronize fails; accept()
        # reports the reason.
        self.error = exc
        if not self.drop_reason:
            self.drop(f"set-up failed: {exc}")
        self.ready.set()

    def _update_containers(self, payload: Encoded) -> bytes:
        req = pb.UpdateContainersRequest.FromString(payload)  # type: ignore[arg-type]  # any buffer
        self.unsolicited.append(req)
        self._unsolicited_new.put_nowait(req)
        known = self.sim.state.containers
        failed = [u for u in req.update if u.container_id not in known]
        self.apply_updates(u for u in req.update if u.container_id in known)
        return pb.UpdateContainersResponse(failed=failed).SerializeToString()

    async def next_update_containers(self, timeout: float = 5.0) -> pb.UpdateContainersRequest:
        """The next plugin-initiated UpdateContainers this session has not handed out
        yet (received already, or waited for); TimeoutError when none comes."""
        return await asyncio.wait_for(self._unsolicited_new.get(), timeout)

    # -- plugin service calls ------------------------------------------------
    async def _configure(self) -> None:
        req = pb.ConfigureRequest(
            config=self.opts.config,
            runtime_name=self.opts.runtime_name,
            runtime_version=self.opts.runtime_version,
            registration_timeout=int(self.opts.registration_timeout * 1000),
            request_timeout=int(self.opts.request_timeout * 1000),
            NRI_version=self.opts.nri.sent_version,
        )
        resp = await self.call("Configure", req, pb.ConfigureResponse)
        known = ev.known_mask(self.opts.nri.speaks)
        if resp.events & ~known:
            self.drop(
                f"plugin subscribed to unknown events 0x{resp.events & ~known:x} "
                f"(runtime knows 0x{known:x})"
            )
            raise PluginDropped(self.drop_reason)
        self.events = resp.events or known

    async def _synchronize_initial(self) -> None:
        state = self.sim.state
        async with self.sim.sync_gate.sync():  # no CRI operation in flight meanwhile
            self.sync_updates = await self.synchronize(
                list(state.pods.values()), list(state.containers.values())
            )
            self.apply_updates(self.sync_updates)
            self.ready.set()  # joins sim.plugins() before any operation can go on

    async def synchronize(
        self, pods: list[pb.PodSandbox], containers: list[pb.Container]
    ) -> list[pb.ContainerUpdate]:
        updates: list[pb.ContainerUpdate] = []
        # One request timeout for all the parts together, as containerd (1.7 and 2.3)
        # sets one context deadline before it sends the first.
        deadline = asyncio.get_running_loop().time() + self.opts.request_timeout
        for chunk in chunk_state(pods, containers, self.opts.sync_chunk_bytes):
            left = max(deadline - asyncio.get_running_loop().time(), 0.001)
            resp = await self.call("Synchronize", chunk, pb.SynchronizeResponse, left)
            if chunk.more and (not resp.more or len(resp.update)):
                self.drop("plugin did not acknowledge a Synchronize chunk with more=true")
                raise PluginDropped(self.drop_reason)
            updates.extend(resp.update)
        return updates

    async def call(
        self, method: str, request: Any, response_cls: Any = None, timeout: float | None = None
    ) -> Any:
        """Call Plugin/<method> with a message (or its encoded bytes); return the decoded
        response (or the raw payload when response_cls is None)."""
        if timeout is None:
            timeout = self.opts.request_timeout
        payload = request if isinstance(request, bytes) else request.SerializeToString()
        # containerd tags event calls with the containerd namespace (see the recordings).
        meta = () if method in ("Configure", "Synchronize") else NAMESPACE_METADATA
        try:
            answer = await self.conn.call(PLUGIN_SERVICE, method, payload, timeout, meta)
        except RpcError as exc:
            if exc.code == Code.DEADLINE_EXCEEDED and self.opts.drop_on_timeout:
                self.drop(f"{method}: plugin missed the {timeout:g}s deadline")
            raise PluginCallError(exc.code, exc.message, method) from None
        except ConnectionClosed as exc:
            raise PluginDropped(f"{method}: {exc}") from exc
        return answer if response_cls is None else response_cls.FromString(answer)

    def subscribed(self, event: int) -> bool:
        return bool(self.events & ev.bit(event))

    async def event(
        self,
        event: int,
        pod: pb.PodSandbox,
        container: pb.Container | None = None,
        *,
        timeout: float | None = None,
        **extra: Any,
    ) -> Any:
        """Deliver one event as the runtime would; returns the response message, or None
        when the plugin is not subscribed or the event went as StateChange."""
        if not self.subscribed(event):
            return None
        if self.opts.nri.state_change and (
            event in ev.STATE_CHANGE_EVENTS or event == ev.POST_UPDATE_POD_SANDBOX
        ):
            req = pb.StateChangeEvent(event=pb.Event.ValueType(event), pod=pod, container=container)
            await self.call("StateChange", req, pb.Empty, timeout)
            return None
        method = ev.RPCS[event]
        # Every event request starts with pod = 1 (and container = 2): encode those by
        # concatenation instead of deep-copying both messages into a new request.
        payload = _embed(0x0A, pod.SerializeToString())
        if event not in ev.POD_EVENTS and container is not None:
            payload += _embed(0x12, container.SerializeToString())
        if extra:
            payload += getattr(pb, method + "Request")(**extra).SerializeToString()
        return await self.call(method, payload, getattr(pb, method + "Response"), timeout)

    # Named helpers for the common life cycle.
    async def run_pod_sandbox(self, pod: pb.PodSandbox, **kw: Any) -> Any:
        self.sim.state.pods[pod.id] = pod
        return await self.event(ev.RUN_POD_SANDBOX, pod, **kw)

    async def create_container(
        self, pod: pb.PodSandbox, ctr: pb.Container, **kw: Any
    ) -> pb.CreateContainerResponse | None:
        """CreateContainer as containerd runs it (ocispec.py): the spec built, CDI devices
        injected, the plugin shown the result, its adjustment applied to the spec and the
        runtime's copy of the container (what a later Synchronize reports)."""
        spec, shown = build_spec(ctr, self.sim.cdi)
        stored = pb.Container()
        stored.CopyFrom(shown)
        self.sim.state.containers[ctr.id] = stored
        self.sim.state.specs[ctr.id] = spec
        try:
            resp = await self.event(ev.CREATE_CONTAINER, pod, shown, **kw)
        except PluginCallError:
            # containerd fails the creation: the container never exists
            self.sim.state.containers.pop(ctr.id, None)
            self.sim.state.specs.pop(ctr.id, None)
            raise
        if resp is not None:
            adjust_container(stored, spec, resp.adjust, self.sim.cdi)
            self.apply_updates(resp.update)
        return resp

    async def start_container(self, pod: pb.PodSandbox, ctr: pb.Container, **kw: Any) -> Any:
        self._set_state(ctr, pb.CONTAINER_RUNNING)
        return await self.event(ev.START_CONTAINER, pod, ctr, **kw)

    async def update_container(
        self, pod: pb.PodSandbox, ctr: pb.Container, resources: pb.LinuxResources, **kw: Any
    ) -> Any:
        """UpdateContainer (a kubelet resize); when the plugin accepts it, the stored spec
        gets the new resources, then the plugin's updates (its own and other
        containers'), as containerd applies them."""
        resp = await self.event(ev.UPDATE_CONTAINER, pod, ctr, linux_resources=resources, **kw)
        self.sim.state.update(ctr.id, resources)
        if resp is not None:
            self.apply_updates(resp.update)
        return resp

    async def stop_container(self, pod: pb.PodSandbox, ctr: pb.Container, **kw: Any) -> Any:
        self._set_state(ctr, pb.CONTAINER_STOPPED)
        resp = await self.event(ev.STOP_CONTAINER, pod, ctr, **kw)
        if resp is not None:
            self.apply_updates(resp.update)
        return resp

    def apply_updates(self, updates: Iterable[pb.ContainerUpdate]) -> None:
        """Updates of other containers a plugin asked for, kept in their stored specs."""
        for update in updates:
            self.sim.state.update(update.container_id, update.linux.resources)

    def _set_state(self, ctr: pb.Container, state: pb.ContainerState.ValueType) -> None:
        stored = self.sim.state.containers.get(ctr.id)
        if stored is not None:
            stored.state = state

    async def remove_container(self, pod: pb.PodSandbox, ctr: pb.Container, **kw: Any) -> Any:
        self.sim.state.forget(ctr.id)
        return await self.event(ev.REMOVE_CONTAINER, pod, ctr, **kw)

    async def remove_pod_sandbox(self, pod: pb.PodSandbox, **kw: Any) -> Any:
        self.sim.state.pods.pop(pod.id, None)
        return await self.event(ev.REMOVE_POD_SANDBOX, pod, **kw)

    async def container_life_cycle(
        self, pod: pb.PodSandbox, ctr: pb.Container
    ) -> pb.CreateContainerResponse | None:
        """RunPodSandbox ... RemovePodSandbox for one pod with one container, in
        containerd's order; returns the CreateContainer response."""
        await self.run_pod_sandbox(pod)
        created = await self.create_container(pod, ctr)
        await self.event(ev.POST_CREATE_CONTAINER, pod, ctr)
        await self.start_container(pod, ctr)
        await self.event(ev.POST_START_CONTAINER, pod, ctr)
        await self.stop_container(pod, ctr)
        await self.remove_container(pod, ctr)
        await self.event(ev.STOP_POD_SANDBOX, pod)
        await self.remove_pod_sandbox(pod)
        return created

    async def shutdown(self) -> None:
        await self.call("Shutdown", pb.Empty(), pb.Empty)

    # -- life cycle ----------------------------------------------------------
    def drop(self, reason: str) -> None:
        self.drop_reason = reason
        self.conn.close()

    async def wait_closed(self) -> None:
        await self.conn.wait_closed()


class RuntimeSimulator:
    def __init__(
        self,
        socket_path: str,
        options: SimulatorOptions | None = None,
        *,
        pods: Iterable[pb.PodSandbox] = (),
        containers: Iterable[pb.Container] = (),
        specs: Mapping[str, OciSpec] | None = None,
        cdi: CdiRegistry | None = None,
    ) -> None:
        """`pods`, `containers` and their `specs`: what this runtime instance already runs
        (a restarted containerd's state); `cdi`: the specs of its CDI directories (None:
        CDI names stay unresolved references, for tests that need no CDI spec)."""
        self.socket_path = socket_path
        self.options = options or SimulatorOptions()
        self.state = RuntimeState(
            {p.id: p for p in pods}, {c.id: c for c in containers}, dict(specs or {})
        )
        self.cdi = cdi
        self.sessions: list[PluginSession] = []
        self._accepted: asyncio.Queue[PluginSession] = asyncio.Queue()
        self._server: asyncio.AbstractServer | None = None
        self._watchdogs: set[asyncio.Task[None]] = set()
        self.sync_gate = SyncGate()
        self.closed = False  # close() ran: this runtime instance is gone

    def plugins(self) -> list[PluginSession]:
        """The plugins events go to now: registered, synchronized and still connected,
        in index order (containerd's r.plugins)."""
        ready = [
            s
            for s in self.sessions
            if s.ready.is_set() and s.error is None and not s.conn.is_closed
        ]
        return sorted(ready, key=lambda s: s.idx)

    async def start(self) -> RuntimeSimulator:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket_path)
        loop = asyncio.get_running_loop()
        self._server = await loop.create_unix_server(self._new_session, self.socket_path)
        return self

    async def attach(self, sock: socket.socket) -> None:
        """Serve a plugin on an already connected socket (how containerd talks to a
        plugin it launched itself, handing it the other end as fd 3)."""
        loop = asyncio.get_running_loop()
        await loop.connect_accepted_socket(self._new_session, sock)

    def _new_session(self) -> Connection:
        session = PluginSession(self)
        self.sessions.append(session)
        task = asyncio.get_running_loop().create_task(self._watch(session))
        self._watchdogs.add(task)
        task.add_done_callback(self._watchdogs.discard)
        return session.conn

    async def _watch(self, session: PluginSession) -> None:
        try:
            await asyncio.wait_for(session.registered.wait(), self.options.registration_timeout)
        except TimeoutError:
            session.drop("plugin did not register within the registration timeout")
            return
        await session.ready.wait()
        await self._accepted.put(session)

    async def accept(self, timeout: float = 10.0) -> PluginSession:
        """Wait for the next plugin to be registered, configured and synchronized.
        Raises PluginDropped when its set-up failed (bad subscription, missed deadline,
        closed connection) and TimeoutError when no plugin showed up in time."""
        session = await asyncio.wait_for(self._accepted.get(), timeout)
        if session.error is not None:
            reason = session.drop_reason or str(session.error)
            raise PluginDropped(
                f"plugin {session.idx}-{session.name} was dropped during set-up: {reason}"
            ) from session.error
        return session

    async def close(self) -> None:
        """Stop listening and drop every plugin (like a containerd restart)."""
        self.closed = True
        if self._server is not None:
            self._server.close()
        for session in self.sessions:
            session.conn.close()
        for task in list(self._watchdogs):
            task.cancel()
        if self._server is not None:
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
            self._server = None
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket_path)

    async def __aenter__(self) -> RuntimeSimulator:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


# -- realistic messages --------------------------------------------------------------


def _id(seed: str) -> str:
    return hashlib.sha256(seed.encode()).hexdigest()


def make_pod(
    name: str,
    *,
    namespace: str = "default",
    uid: str | None = None,
    annotations: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    qos: str = "burstable",
    cgroup_driver: str = "cgroupfs",
) -> pb.PodSandbox:
    """A PodSandbox as containerd's CRI plugin describes a Kubernetes pod."""
    uid = (
        uid
        or _id(f"uid/{namespace}/{name}")[:8]
        + "-0000-4000-8000-"
        + _id(f"uid2/{namespace}/{name}")[:12]
    )
    pod_id = _id(f"pod/{namespace}/{name}")
    if cgroup_driver == "systemd":
        parent = f"kubepods-{qos}-pod{uid.replace('-', '_')}.slice"
        cgroups_path = f"{parent}:cri-containerd:{pod_id}"
    else:
        parent = f"/kubepods/{qos}/pod{uid}"
        cgroups_path = f"{parent}/{pod_id}"
    ann = {
        "io.kubernetes.cri.container-type": "sandbox",
        "io.kubernetes.cri.sandbox-id": pod_id,
        "io.kubernetes.cri.sandbox-name": name,
        "io.kubernetes.cri.sandbox-namespace": namespace,
        "io.kubernetes.cri.sandbox-uid": uid,
        "io.kubernetes.cri.podsandbox.image-name": "registry.k8s.io/pause:3.10",
    }
    ann.update(annotations or {})
    lab = {
        "io.kubernetes.pod.name": name,
        "io.kubernetes.pod.namespace": namespace,
        "io.kubernetes.pod.uid": uid,
        "io.cri-containerd.kind": "sandbox",
    }
    lab.update(labels or {})
    return pb.PodSandbox(
        id=pod_id,
        name=name,
        uid=uid,
        namespace=namespace,
        labels=lab,
        annotations=ann,
        runtime_handler="runc",
        linux=pb.LinuxPodSandbox(
            cgroup_parent=parent,
            cgroups_path=cgroups_path,
            namespaces=[pb.LinuxNamespace(type=t) for t in ("pid", "ipc", "uts", "network")],
            resources=pb.LinuxResources(cpu=pb.LinuxCPU(shares=pb.OptionalUInt64(value=2))),
        ),
        pid=4242,
    )


def make_resources(
    *,
    cpu_shares: int | None = None,
    cpu_quota: int | None = None,
    cpu_period: int | None = None,
    cpus: str = "",
    mems: str = "",
    memory_limit: int | None = None,
) -> pb.LinuxResources:
    cpu = pb.LinuxCPU(cpus=cpus, mems=mems)
    if cpu_shares is not None:
        cpu.shares.value = cpu_shares
    if cpu_quota is not None:
        cpu.quota.value = cpu_quota
    if cpu_period is not None:
        cpu.period.value = cpu_period
    mem = pb.LinuxMemory()
    if memory_limit is not None:
        mem.limit.value = memory_limit
    return pb.LinuxResources(cpu=cpu, memory=mem)


def make_container(
    pod: pb.PodSandbox,
    name: str,
    *,
    annotations: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    resources: pb.LinuxResources | None = None,
    env: Iterable[str] = DEFAULT_ENV,
    args: Iterable[str] = ("/bin/sh", "-c", "sleep infinity"),
    state: pb.ContainerState.ValueType = pb.CONTAINER_CREATED,
    image: str = "docker.io/library/busybox:latest",
    cdi_devices: Iterable[str] = (),
    devices: Iterable[pb.LinuxDevice] = (),
    mounts: Iterable[pb.Mount] = (),
) -> pb.Container:
    """A Container as containerd describes it at CreateContainer (golden-like size).
    `resources`: what the kubelet set (default: a 100m CPU request, no limits);
    `cdi_devices`, `devices`, `mounts` (after the usual ones): what a device plugin's
    Allocate answered (kubelet.py)."""
    cid = _id(f"ctr/{pod.id}/{name}")
    parent = pod.linux.cgroup_parent
    if parent.endswith(".slice"):
        cgroups_path = f"{parent}:cri-containerd:{cid}"
    else:
        cgroups_path = f"{parent}/{cid}"
    ann = {
        "io.kubernetes.cri.container-type": "container",
        "io.kubernetes.cri.container-name": name,
        "io.kubernetes.cri.image-name": image,
        "io.kubernetes.cri.sandbox-id": pod.id,
        "io.kubernetes.cri.sandbox-name": pod.name,
        "io.kubernetes.cri.sandbox-namespace": pod.namespace,
        "io.kubernetes.cri.sandbox-uid": pod.uid,
    }
    ann.update(annotations or {})
    lab = {
        "io.kubernetes.container.name": name,
        "io.kubernetes.pod.name": pod.name,
        "io.kubernetes.pod.namespace": pod.namespace,
        "io.kubernetes.pod.uid": pod.uid,
        "io.cri-containerd.kind": "container",
    }
    lab.update(labels or {})
    sandbox_dir = f"/var/lib/containerd/io.containerd.grpc.v1.cri/sandboxes/{pod.id}"
    extra_mounts = list(mounts)
    mounts = [
        pb.Mount(
            destination="/proc", type="proc", source="proc", options=["nosuid", "noexec", "nodev"]
        ),
        pb.Mount(
            destination="/dev",
            type="tmpfs",
            source="tmpfs",
            options=["nosuid", "strictatime", "mode=755", "size=65536k"],
        ),
        pb.Mount(
            destination="/sys/fs/cgroup",
            type="cgroup",
            source="cgroup",
            options=["nosuid", "noexec", "nodev", "relatime", "ro"],
        ),
    ]
    mounts += [
        pb.Mount(
            destination=f"/etc/{f}",
            type="bind",
            source=f"{sandbox_dir}/{f}",
            options=["rbind", "rprivate", "rw"],
        )
        for f in ("hostname", "hosts", "resolv.conf")
    ]
    mounts += extra_mounts
    ns = [
        pb.LinuxNamespace(type=t, path=f"/proc/{pod.pid}/ns/{t[:3]}")
        for t in ("pid", "ipc", "uts", "network")
    ] + [pb.LinuxNamespace(type="mount")]
    return pb.Container(
        id=cid,
        pod_sandbox_id=pod.id,
        name=name,
        state=state,
        labels=lab,
        annotations=ann,
        args=list(args),
        env=[*env, f"HOSTNAME={pod.name}"],
        mounts=mounts,
        # No `hooks`: containerd sends none for a spec without OCI hooks (FromOCIHooks).
        linux=pb.LinuxContainer(
            namespaces=ns,
            cgroups_path=cgroups_path,
            devices=devices,
            resources=resources or make_resources(cpu_shares=102),
        ),
        CDI_devices=[pb.CDIDevice(name=name) for name in cdi_devices],
    )
