"""The plugin service assembled (what `nri-sla run` runs once its arguments are checked):
the SLA plugin and the service options that wire it to its metrics and its periodic work
(`build_service`, which the tests use too), the metrics (Prometheus series only when a
metrics address is set: `service_metrics`) and the HTTP listeners (`start_listeners`), the
status socket, the SIGHUP reload (`reload_node`) and the serving itself (`serve_node`).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from nri_plugin.core.nodestate import NodeState
from nri_plugin.errors import Unavailable
from nri_plugin.nri.service import CONNECTING, REGISTERED, Periodic, ServiceOptions, serve
from nri_plugin.ops.listenaddress import parse_address
from nri_plugin.ops.logsetup import setup_logging
from nri_plugin.ops.metrics import Metrics, RegistrationOnly, ServiceMetrics
from nri_plugin.ops.statussocket import BUILD_TIMEOUT, StatusServer
from nri_plugin.plugin.config_reload import reload_config
from nri_plugin.plugin.handlers import SlaPlugin
from nri_plugin.plugin.pod_events import pod_events

if TYPE_CHECKING:
    from nri_plugin.ops.event import LogFormat

log = logging.getLogger("nri_sla.run")


def build_service(
    node: NodeState,
    metrics: ServiceMetrics,
    *,
    socket: str | None = None,
    name: str | None = None,
    index: str | None = None,
    **options: Any,
) -> tuple[SlaPlugin, ServiceOptions]:
    """The SLA plugin and its service options, wired to the metrics (the per-container
    series too when they are Prometheus series); `socket`, `name` and `index` over the
    node config's, `options` over the other ServiceOptions."""
    nri = node.config.nri
    plugin = SlaPlugin(node, metrics, pod_events(node.config.events, metrics))
    if isinstance(metrics, Metrics):
        # Here, not at the top: it imports prometheus_client, which a plugin serving no
        # metrics endpoint never loads (ops.metrics.RegistrationOnly).
        from nri_plugin.plugin.container_metrics import ContainerCollector

        metrics.registry.register(
            ContainerCollector(lambda: plugin.watch.last, node.config.watch.metrics_containers)
        )

    def on_state(state: str) -> None:
        metrics.set_connected(state == REGISTERED)
        metrics.set_registered(state == REGISTERED)
        if state == CONNECTING:
            metrics.inc_connect_attempts()

    reload = options.get("on_reload")
    if reload is not None:

        def settled_reload() -> Any:
            plugin.settle()  # a pending restore with the config of its Synchronize
            return reload()

        options["on_reload"] = settled_reload
    options.setdefault("backoff_max", nri.reconnect_max_seconds)
    options.setdefault("periodic", periodic_work(node, plugin))
    return plugin, ServiceOptions(
        socket_path=socket or nri.socket,
        name=name or nri.plugin_name,
        idx=index or nri.plugin_index,
        on_state=on_state,
        on_reconnect=lambda _total: metrics.inc_reconnects(),
        on_ready=plugin.on_registered,
        **options,
    )


def periodic_work(node: NodeState, plugin: SlaPlugin) -> list[Periodic]:
    """The plugin's own schedule, as the node config sets it (an interval of 0: off): the
    drift watch, and with GPUs their rescan and health polls."""
    work = []
    if node.config.watch.interval:
        work.append(
            Periodic(
                node.config.watch.interval,
                plugin.drift_steps,
                "drift watch",
                again=plugin.restorer.overtaken,
            )
        )
    gpu = node.config.gpu
    if gpu.rescan_interval and node.gpus is not None:
        work.append(Periodic(gpu.rescan_interval, plugin.rescan_inventory, "GPU inventory rescan"))
    if gpu.health_interval and node.gpus is not None and node.gpus.monitor is not None:
        work.append(Periodic(gpu.health_interval, plugin.poll_gpu_health, "GPU health"))
    return work


def service_metrics(address: str) -> tuple[ServiceMetrics, Callable[[], Any]]:
    """The service's metrics and what starts their server: Prometheus series served at
    `address`; for "" the registration state alone (ops.metrics.RegistrationOnly), and
    neither prometheus_client nor http.server is imported (4.3 MiB of the plugin's
    memory). Raises MetricsError for an address that is no address."""
    if parse_address(address) is None:
        return RegistrationOnly(), lambda: None
    from nri_plugin.ops.metrics_http import start_http_server

    metrics = Metrics()
    return metrics, lambda: start_http_server(metrics, address)


def start_health(address: str, ready: Callable[[], bool]) -> Any:
    """The probe listener at `address` (ops.health.start_health_server); for "", its
    default, None, and ops.health is not imported (as ops.metrics_http without a metrics
    address: what a listener that is off needs of the plugin's memory is nothing)."""
    if not address.strip():
        return None
    from nri_plugin.ops.health import start_health_server

    return start_health_server(address, ready)


def start_listeners(
    metrics_address: str, health_address: str
) -> tuple[ServiceMetrics, contextlib.ExitStack]:
    """The service's metrics (service_metrics), with their server and the probe listener
    ("" turns either off) started, closed together when the returned stack is. Raises
    MetricsError (a ValueError) for an address that is no address, OSError naming the
    listener and its address for one not served (a port taken); nothing stays open then."""
    metrics, start_metrics = service_metrics(metrics_address)
    listeners = contextlib.ExitStack()
    starts: tuple[tuple[str, str, Callable[[], Any]], ...] = (
        ("metrics", metrics_address, start_metrics),
        (
            "health",
            health_address,
            lambda: start_health(health_address, lambda: metrics.is_registered),
        ),
    )
    try:
        for what, address, start in starts:
            try:
                server = start()
            except OSError as exc:  # a MetricsError names the address; a bind error not
                raise OSError(
                    f"{what} address {address}: {getattr(exc, 'strerror', None) or exc}"
                ) from exc
            if server is not None:
                listeners.callback(server.close)
    except BaseException:
        listeners.close()  # what started before the one that failed
        raise
    return metrics, listeners


def start_status_server(plugin: SlaPlugin, path: str) -> StatusServer | None:
    """The root-only socket `nri-sla status` reads; None when off or when it cannot be
    made (logged: enforcement does not depend on it)."""
    if not path:
        return None
    try:
        return StatusServer(path, lambda: plugin.status(BUILD_TIMEOUT))
    except (OSError, Unavailable) as exc:  # Unavailable: the path held by another
        log.warning("status socket %s not served: %s", path, exc)
        return None


def reload_node(
    node: NodeState,
    config_path: str | None,
    log_format: LogFormat | None,
    log_level: str | None,
) -> None:
    """SIGHUP: the node config read again; its live keys applied (`log_format` and
    `log_level`, the command line's, still win), the rest kept until a restart
    (nri_plugin.plugin.config_reload)."""
    done = reload_config(config_path, node.config)
    if done is not None:
        node.reconfigure(done.config)
        setup_logging(
            log_format or done.config.log.format,
            log_level or done.config.log.level,
            defer_decisions=True,
        )


def serve_node(
    node: NodeState, metrics: ServiceMetrics, *, status_socket: str, **service: Any
) -> None:
    """Serve the plugin for `node` until SIGTERM/SIGINT, with its status socket;
    `service`: build_service's keywords. Raises NriError when the runtime fails it,
    ValueError/OSError for a setting this host cannot serve."""
    plugin, options = build_service(node, metrics, **service)
    status = start_status_server(plugin, status_socket)
    try:
        log.info(
            "node: cgroup v%d, %d GPUs; NRI socket %s",
            node.cgroup_version,
            len(node.allocator.inventory.gpus) if node.allocator else 0,
            options.socket_path,
        )
        serve(plugin, options)
    finally:
        if status is not None:
            status.close()
        plugin.events.close()
