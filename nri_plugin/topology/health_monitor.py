"""GpuHealthMonitor: each GPU's health from NVML (lost GPUs, XID errors) and the inventory.

Pure state plus one polling step: `poll(timeout_ms)` waits at most that long for NVML
events, reads what came and says what changed; the NRI plugin calls it with 0 from its
Periodic, the device plugin from its own thread with a real timeout. `health()` maps each
GPU's identity (Gpu.identity: its PCI bus id, else its UUID) to its GpuHealth.

A GPU is as healthy as the worst of: what the last inventory read said of it (`track`:
unknown when NVML could not read it, unhealthy when lost), what events said since this
process started (a critical XID: unhealthy until the process restarts, because such a
GPU needs a reset the process does not see), and whether a probe found it lost (until an
inventory read finds it healthy again: a GPU back on the bus after a reset or a driver
reload answers NVML again, and is offered again). Each change is logged once.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from nri_plugin.ops.logsetup import log_event
from nri_plugin.topology.gpu_health import GPU_HEALTHY, GpuHealth, unhealthy
from nri_plugin.topology.gpus import Gpu, GpuInventory, normalize_bus_id
from nri_plugin.topology.nvml_gpus import (
    NVML_ERROR_GPU_IS_LOST,
    NVML_ERROR_NOT_SUPPORTED,
    error_code,
    health_of_error,
    import_pynvml,
)
from nri_plugin.value import replace

log = logging.getLogger("nri_sla.topology.health")

NVML_ERROR_TIMEOUT = 10  # nvmlEventSetWait: no event within the timeout
XID_CRITICAL_ERROR = 0x8  # nvmlEventTypeXidCriticalError
NO_INSTANCE = 0xFFFFFFFF  # an event's GPU/compute instance id when not about a MIG device

# XIDs that report a fault of the application running on the GPU, not of the GPU: the
# driver cleans up and the next process can use the GPU, so they leave it healthy (the
# NVIDIA device plugins skip the same ones). From NVIDIA's XID catalogue:
APPLICATION_XIDS = frozenset(
    {
        13,  # graphics engine exception: a kernel faulted (bad address, illegal instruction)
        31,  # GPU memory page fault: the application touched memory it does not own
        43,  # GPU stopped processing: the application's channel was torn down after a fault
        45,  # preemptive cleanup: channels ended because of an earlier error or a kill
        68,  # video processor exception: an NVDEC/NVENC job of the application failed
        109,  # context switch timeout: an application's context did not yield in time
    }
)
MAX_EVENTS = 64  # read per poll at most, so one poll's time stays bounded


@dataclass(frozen=True, slots=True)
class HealthChange:
    """What one step changed: (GPU identity, health before or None when new, after)."""

    changed: tuple[tuple[str, GpuHealth | None, GpuHealth], ...] = ()

    def __bool__(self) -> bool:
        return bool(self.changed)


NO_CHANGE = HealthChange()


class _Session:
    """NVML initialised, an XID event set and each GPU's handle by identity."""

    def __init__(self, nvml: Any) -> None:
        self.nvml = nvml
        self.handles: dict[str, Any] = {}
        self.lost: dict[str, GpuHealth] = {}  # GPUs found lost while the session opened
        self.no_events: list[str] = []  # GPUs that cannot report XIDs (NOT_SUPPORTED)
        nvml.nvmlInit()
        try:
            self.events = nvml.nvmlEventSetCreate()
        except Exception:
            nvml.nvmlShutdown()
            raise
        try:
            self._register(nvml.nvmlDeviceGetCount())
        except Exception:
            self.close()
            raise

    def _register(self, count: int) -> None:
        nvml = self.nvml
        for i in range(count):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(i)
                identity = _identity(nvml, handle)
            except nvml.NVMLError:
                continue  # NVML cannot say which GPU it is: the inventory read marks it
            self.handles[identity] = handle
            try:
                nvml.nvmlDeviceRegisterEvents(handle, XID_CRITICAL_ERROR, self.events)
            except nvml.NVMLError as exc:
                if error_code(exc) == NVML_ERROR_NOT_SUPPORTED:
                    self.no_events.append(identity)
                elif error_code(exc) == NVML_ERROR_GPU_IS_LOST:
                    self.lost[identity] = health_of_error(exc)

    def close(self) -> None:
        try:
            self.nvml.nvmlEventSetFree(self.events)
        finally:
            self.nvml.nvmlShutdown()


def _identity(nvml: Any, handle: Any) -> str:
    """The Gpu.identity of the GPU behind an NVML handle (its PCI bus id)."""
    bus = nvml.nvmlDeviceGetPciInfo(handle).busId
    text = bus.decode() if isinstance(bus, bytes) else str(bus)
    return normalize_bus_id(text) or text


class GpuHealthMonitor:
    """Each GPU's health; thread-safe (the device plugin reads it while it polls)."""

    def __init__(
        self,
        nvml: Any = None,
        *,
        load: Callable[[], Any] = import_pynvml,
        ignored_xids: frozenset[int] = APPLICATION_XIDS,
    ) -> None:
        self._nvml = nvml  # None: `load` imports pynvml at the first poll
        self._load = load
        self.ignored_xids = ignored_xids
        self._lock = threading.Lock()
        self._tracked: dict[str, Gpu] = {}  # identity -> the last inventory read's GPU
        self._events: dict[str, GpuHealth] = {}  # identity -> unhealthy, for good (XIDs)
        self._lost: dict[str, GpuHealth] = {}  # identity -> lost, until read healthy
        self._session: _Session | None = None
        self._nvml_problem = ""  # why NVML cannot be watched now (logged once)
        self._closed = threading.Event()  # ends a wait without NVML (close())

    # --- reading ----------------------------------------------------------------------

    def health(self) -> Mapping[str, GpuHealth]:
        """Each tracked GPU's identity (Gpu.identity) -> its health now."""
        with self._lock:
            return self._health()

    def health_of(self, gpu: Gpu) -> GpuHealth:
        with self._lock:
            return gpu.health.worst(self._marks(gpu.identity))

    def apply(self, inventory: GpuInventory) -> GpuInventory:
        """`inventory` with each GPU's health what this monitor knows of it."""
        with self._lock:
            gpus = tuple(
                replace(g, health=h)
                if (h := g.health.worst(self._marks(g.identity))) != g.health
                else g
                for g in inventory.gpus
            )
        return GpuInventory(gpus, inventory.source, inventory.degraded_reason)

    # --- steps ------------------------------------------------------------------------

    def track(self, inventory: GpuInventory) -> HealthChange:
        """A new inventory read: the GPUs to watch and what the read says of them. When
        the GPUs changed, the NVML session is opened again at the next poll (handles and
        event registrations follow the new set)."""
        with self._lock:
            before = self._health()
            tracked = {g.identity: g for g in inventory.gpus}
            recovered = [k for k, g in tracked.items() if g.health.healthy and k in self._lost]
            for key in recovered:
                del self._lost[key]
            if tracked.keys() != self._tracked.keys() or recovered:
                self._close()  # a recovered GPU's old handle may still answer lost
            self._tracked = tracked
            return self._changes(before)

    def poll(self, timeout_ms: int = 0) -> HealthChange:
        """Wait up to `timeout_ms` for NVML events, read those that came (MAX_EVENTS at
        most) and probe each GPU for being lost. NVML unavailable: nothing changes (the
        inventory read says what it can; logged once). No GPU tracked: NVML is not even
        loaded (a node without GPUs imports no pynvml, ~25 ms on the plugin's loop).
        Either way the wait asked for still passes, so that a caller polling in a loop
        (the device plugin's thread) sleeps instead of spinning."""
        with self._lock:
            before = self._health()
            session = self._open() if self._tracked else None
            if session is not None:
                self._probe(session)
                self._drain(session, max(0, int(timeout_ms)))
                return self._changes(before)
        if timeout_ms > 0:
            self._closed.wait(timeout_ms / 1000)
        return NO_CHANGE

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            self._close()

    # --- internals (under the lock) ---------------------------------------------------

    def _marks(self, key: str) -> GpuHealth:
        return self._events.get(key, GPU_HEALTHY).worst(self._lost.get(key, GPU_HEALTHY))

    def _health(self) -> dict[str, GpuHealth]:
        return {k: g.health.worst(self._marks(k)) for k, g in self._tracked.items()}

    def _changes(self, before: Mapping[str, GpuHealth]) -> HealthChange:
        changed = []
        for key, now in self._health().items():
            was = before.get(key)
            if was == now or (was is None and now.healthy):
                continue  # a GPU first seen healthy is no news
            changed.append((key, was, now))
            gpu = self._tracked[key]
            log_event(
                log,
                logging.INFO if now.healthy else logging.WARNING,
                "GPU health changed",
                gpu=gpu.ref,
                index=gpu.index,
                health=now.state,
                reason=now.reason,
                was=was.state if was else "new",
            )
        return HealthChange(tuple(changed))

    def _open(self) -> _Session | None:
        if self._session is not None:
            return self._session
        try:
            nvml = self._nvml if self._nvml is not None else self._load()
            self._nvml = nvml
            self._session = _Session(nvml)
        except Exception as exc:  # NVMLError, OSError, ImportError: no NVML to watch
            problem = f"{type(exc).__name__}: {exc}"
            if problem != self._nvml_problem:
                log_event(log, logging.WARNING, "GPU health: NVML cannot be watched", error=problem)
            self._nvml_problem = problem
            return None
        self._nvml_problem = ""
        for key in self._session.no_events:
            log_event(log, logging.INFO, "GPU health: no XID events for this GPU", gpu=key)
        for key, health in self._session.lost.items():
            self._lost.setdefault(key, health)
        return self._session

    def _close(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            try:
                session.close()
            except Exception as exc:  # a failing NVML cleanup must not stop the watch
                log.debug("GPU health: closing the NVML session: %s", exc)

    def _mark(self, key: str, health: GpuHealth) -> None:
        """Unhealthy for good (a critical XID); the first reason stays."""
        if key not in self._events:
            self._events[key] = health

    def _probe(self, session: _Session) -> None:
        """A lost GPU answers GPU_IS_LOST to any call that reaches it."""
        for key, handle in session.handles.items():
            try:
                session.nvml.nvmlDeviceGetMemoryInfo(handle)
            except session.nvml.NVMLError as exc:
                if error_code(exc) == NVML_ERROR_GPU_IS_LOST:
                    self._lost.setdefault(key, health_of_error(exc))

    def _drain(self, session: _Session, timeout_ms: int) -> None:
        nvml = session.nvml
        for n in range(MAX_EVENTS):
            try:
                event = nvml.nvmlEventSetWait_v2(session.events, timeout_ms if n == 0 else 0)
            except nvml.NVMLError as exc:
                if error_code(exc) != NVML_ERROR_TIMEOUT:
                    # the set is broken (driver trouble): a new one at the next poll
                    log_event(
                        log,
                        logging.WARNING,
                        "GPU health: waiting for NVML events failed",
                        error=f"{type(exc).__name__}: {exc}",
                    )
                    self._close()
                return
            self._event(session, event)

    def _event(self, session: _Session, event: Any) -> None:
        if not int(event.eventType) & XID_CRITICAL_ERROR:
            return
        xid = int(event.eventData)
        try:
            key = _identity(session.nvml, event.device)
        except session.nvml.NVMLError as exc:
            log_event(
                log,
                logging.WARNING,
                "GPU health: XID on a GPU NVML cannot name",
                xid=xid,
                error=str(exc),
            )
            return
        instance = ""
        if int(event.gpuInstanceId) != NO_INSTANCE:
            instance = (
                f" on MIG GPU instance {int(event.gpuInstanceId)} compute instance "
                f"{int(event.computeInstanceId)}"
            )
        if xid in self.ignored_xids:
            log_event(
                log,
                logging.INFO,
                "GPU application error (XID); GPU stays healthy",
                gpu=key,
                xid=xid,
            )
            return
        self._mark(key, unhealthy(f"XID {xid}{instance}"))
