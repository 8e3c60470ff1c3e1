"""CRI operations as containerd runs them around its NRI plugins, for fault and load tests.

A PluginSession (runtime.py) talks to one plugin; `Cri` is the runtime's side of a pod's
life across every connected plugin, with the rules of containerd's NRI adaptation
(vendor/github.com/containerd/nri/pkg/adaptation in containerd 1.7.34 and 2.3.4):

* each operation holds the plugin-sync gate (syncgate.py) for its whole length, and the
  relays to plugins go one request at a time (the adaptation's lock), in index order;
* a plugin that misses the request timeout (2 s by default) or whose connection is closed
  is dropped ("closing plugin ..., failed to handle CreateContainer request": isFatalError
  closes its connection) and the request goes on as if the plugin were not there: the
  container is created, or started, without that plugin's answer;
* any other error status fails the operation: CreateContainer leaves no container;
  a failed StartContainer leaves the container exited, and the plugins get StopContainer
  for it (container_start.go's deferred nri.StopContainer);
* an operation still in flight when its runtime instance dies (RuntimeSimulator.close)
  commits nothing and raises RuntimeGone (the kubelet retries on the next instance).

One Cri per RuntimeSimulator: its lock is that runtime's.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from nri_plugin.nri import events as ev
from nri_plugin.nri.errors import Code
from nri_plugin.nri.pb import nri_pb2 as pb
from nri_plugin.simulated.runtime import (
    PluginCallError,
    PluginDropped,
    PluginSession,
    RuntimeSimulator,
    adjust_container,
    build_spec,
)


class RuntimeGone(Exception):
    """The runtime instance died while the operation was in flight; nothing committed."""


class Cri:
    def __init__(self, sim: RuntimeSimulator) -> None:
        self.sim = sim
        self._lock = asyncio.Lock()
        # Containers created while no plugin answered their CreateContainer.
        self.unadjusted: set[str] = set()
        self.dropped: list[str] = []  # why plugins were dropped, in order

    async def run_pod(self, pod: pb.PodSandbox) -> None:
        async with self.sim.sync_gate.operation():
            await self._relay(ev.RUN_POD_SANDBOX, pod)
            self.sim.state.pods[pod.id] = pod

    async def create_container(self, pod: pb.PodSandbox, ctr: pb.Container) -> pb.Container:
        """The container as the runtime keeps it (adjusted by the plugins that answered);
        its spec is then in sim.state.specs. `ctr` is the CRI request (what the kubelet
        and its device plugins asked for). Raises InvalidInput when a CDI device cannot be
        resolved (before any plugin hears of it) and PluginCallError when a plugin
        refused the container (no container then)."""
        async with self.sim.sync_gate.operation():
            spec, shown = build_spec(ctr, self.sim.cdi)
            stored = pb.Container()
            stored.CopyFrom(shown)
            answered = False
            for session, resp in await self._relay(ev.CREATE_CONTAINER, pod, shown):
                answered = True
                if resp is not None:
                    adjust_container(stored, spec, resp.adjust, self.sim.cdi)
                    session.apply_updates(resp.update)
            self._alive()
            self.sim.state.containers[ctr.id] = stored
            self.sim.state.specs[ctr.id] = spec
            if not answered:
                self.unadjusted.add(ctr.id)
            await self._relay(ev.POST_CREATE_CONTAINER, pod, stored)
            return stored

    async def start_container(self, pod: pb.PodSandbox, ctr: pb.Container) -> None:
        async with self.sim.sync_gate.operation():
            self._set_state(ctr.id, pb.CONTAINER_RUNNING)
            try:
                await self._relay(ev.START_CONTAINER, pod, ctr)
            except PluginCallError:
                self._set_state(ctr.id, pb.CONTAINER_STOPPED)
                with contextlib.suppress(PluginCallError):
                    await self._relay(ev.STOP_CONTAINER, pod, ctr)
                raise
            await self._relay(ev.POST_START_CONTAINER, pod, ctr)

    async def stop_container(self, pod: pb.PodSandbox, ctr: pb.Container) -> None:
        async with self.sim.sync_gate.operation():
            self._set_state(ctr.id, pb.CONTAINER_STOPPED)
            for session, resp in await self._relay(ev.STOP_CONTAINER, pod, ctr):
                if resp is not None:
                    session.apply_updates(resp.update)

    async def remove_container(self, pod: pb.PodSandbox, ctr: pb.Container) -> None:
        async with self.sim.sync_gate.operation():
            await self._relay(ev.REMOVE_CONTAINER, pod, ctr)
            self._alive()
            self.sim.state.forget(ctr.id)

    async def remove_pod(self, pod: pb.PodSandbox) -> None:
        async with self.sim.sync_gate.operation():
            await self._relay(ev.STOP_POD_SANDBOX, pod)
            await self._relay(ev.REMOVE_POD_SANDBOX, pod)
            self._alive()
            self.sim.state.pods.pop(pod.id, None)

    # -- helpers -------------------------------------------------------------------------
    async def _relay(
        self, event: int, pod: pb.PodSandbox, ctr: pb.Container | None = None
    ) -> list[tuple[PluginSession, Any]]:
        """The event to every plugin in turn; (plugin, response) of those that answered.
        Fatal errors drop the plugin; an error status raises PluginCallError."""
        self._alive()
        answers = []
        async with self._lock:
            for session in self.sim.plugins():
                try:
                    resp = await session.event(event, pod, ctr)
                except PluginDropped as exc:
                    self.dropped.append(f"{session.idx}-{session.name}: {exc}")
                    continue
                except PluginCallError as exc:
                    if exc.code != Code.DEADLINE_EXCEEDED:
                        raise
                    if not session.conn.is_closed:
                        session.drop(f"{exc.method}: plugin missed the deadline")
                    self.dropped.append(f"{session.idx}-{session.name}: {session.drop_reason}")
                    continue
                answers.append((session, resp))
        self._alive()
        return answers

    def _alive(self) -> None:
        if self.sim.closed:
            raise RuntimeGone("the runtime went away during the operation")

    def _set_state(self, container_id: str, state: pb.ContainerState.ValueType) -> None:
        stored = self.sim.state.containers.get(container_id)
        if stored is not None:
            stored.state = state
