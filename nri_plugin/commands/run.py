"""`nri-sla run`: the NRI plugin service.

Dials the runtime's NRI socket (or uses fd 3 when containerd launched it from
/opt/nri/plugins), registers, rebuilds allocations from Synchronize, answers container
events, reconnects when containerd restarts, serves Prometheus metrics and talks to systemd.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys

from nri_plugin.commands.common import add_log_arguments, add_node_arguments, node_from_args

log = logging.getLogger("nri_sla.run")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_node_arguments(parser)
    parser.add_argument("--socket", default=None, help="NRI socket (default from the config: "
                        "/var/run/nri/nri.sock)")
    parser.add_argument("--name", default=None, help="plugin name (default nri-sla)")
    parser.add_argument("--index", default=None, help="plugin index, two digits (default 50)")
    parser.add_argument("--metrics-address", default=None,
                        help='host:port for /metrics, /healthz, /readyz ("" disables)')
    parser.add_argument("--health-address", default=None,
                        help='host:port for /healthz and /readyz alone, the probes\' '
                        'listener that no connection flood starves ("" disables)')
    add_log_arguments(parser)


def main(args: argparse.Namespace) -> int:
    from nri_plugin import __version__
    from nri_plugin.config import ConfigError, load_config
    from nri_plugin.core.recordkey import RecordKeyError, load_or_create_key
    from nri_plugin.errors import EXIT_INTERNAL, EXIT_INVALID, EXIT_UNAVAILABLE
    from nri_plugin.nri.errors import NriError
    from nri_plugin.nri.service import serve
    from nri_plugin.nri.stub import check_identity
    from nri_plugin.ops.health import start_health_server
    from nri_plugin.ops.logsetup import setup_logging
    from nri_plugin.ops.metrics import Metrics, MetricsError
    from nri_plugin.ops.metrics_http import start_http_server
    from nri_plugin.topology.snapshot import load_snapshot

    # A reload asked for while starting (systemctl reload, a ConfigMap roll) must not stop
    # the plugin: ignored until the service's own SIGHUP handler reloads.
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    # What the operator gave is checked before the first log line, so that a mistake is
    # the one line on stderr (docs/operations.md "Exit statuses"); a bad --inventory
    # reaches nri_plugin.cli, one line of its kind.
    try:
        config = load_config(args.config)
        setup_logging(args.log_format or config.log.format, args.log_level or config.log.level)
        check_identity(args.name or config.nri.plugin_name, args.index or config.nri.plugin_index)
        if args.inventory is not None:
            load_snapshot(args.inventory)  # read again below; here only to fail early
        # Before the node: a key nri-sla cannot trust is refused, not replaced (that would
        # disown every record on the node), and the plugin does not start without one.
        key = load_or_create_key(config.state_dir)
    except (ConfigError, RecordKeyError, ValueError, OSError) as exc:
        print(f"nri-sla run: {exc}", file=sys.stderr)
        return EXIT_INVALID
    metrics = Metrics()
    address = config.metrics.address if args.metrics_address is None else args.metrics_address
    health_address = (config.metrics.health_address if args.health_address is None
                      else args.health_address)
    listeners: list = []
    for what, where, start in (
            ("metrics", address, lambda: start_http_server(metrics, address)),
            ("health", health_address,
             lambda: start_health_server(health_address, lambda: metrics.is_registered))):
        try:
            listeners.append(start())
        except (MetricsError, OSError) as exc:
            for listener in listeners:
                if listener is not None:
                    listener.close()
            print(f"nri-sla run: {_listen_error(what, where, exc)}", file=sys.stderr)
            # a bad address is the operator's input; a taken port, the host's state
            return EXIT_INVALID if isinstance(exc, ValueError) else EXIT_UNAVAILABLE
    log.info("nri-sla %s starting (config %s)", __version__, config.source)
    status = None
    try:
        node = node_from_args(args, detect=True, record_key=key)
        plugin, options = build_service(node, metrics, socket=args.socket, name=args.name,
                                        index=args.index,
                                        on_reload=lambda: reload_node(node, args))
        status = start_status_server(plugin, config.status.socket)
        log.info("node: cgroup v%d, %d GPUs; NRI socket %s", node.cgroup_version,
                 len(node.allocator.inventory.gpus) if node.allocator else 0,
                 options.socket_path)
        serve(plugin, options)
    except (ValueError, OSError) as exc:  # the config against this host, a bad NRI_PLUGIN_*
        print(f"nri-sla run: {exc}", file=sys.stderr)
        return EXIT_INVALID
    except NriError as exc:  # the runtime, after start-up
        print(f"nri-sla run: {exc}", file=sys.stderr)
        return EXIT_INTERNAL
    finally:
        for listener in listeners:
            if listener is not None:
                listener.close()
        if status is not None:
            status.close()
    return 0


def _listen_error(what: str, address: str, exc: Exception) -> str:
    # A MetricsError already names the address; a bind error (OSError) does not.
    if isinstance(exc, ValueError):
        return str(exc)
    return f"{what} address {address}: {getattr(exc, 'strerror', None) or exc}"


def reload_node(node, args: argparse.Namespace) -> None:
    """SIGHUP: the node config read again; its live keys applied (the command line's log
    flags still win), the rest kept until a restart (nri_plugin.ops.config_reload)."""
    from nri_plugin.ops.config_reload import reload_config
    from nri_plugin.ops.logsetup import setup_logging

    done = reload_config(args.config, node.config)
    if done is not None:
        node.reconfigure(done.config)
        setup_logging(args.log_format or done.config.log.format,
                      args.log_level or done.config.log.level)


def start_status_server(plugin, path: str):
    """The root-only socket `nri-sla status` reads; None when off or when it cannot be
    made (logged: enforcement does not depend on it)."""
    from nri_plugin.ops.statussocket import BUILD_TIMEOUT, StatusServer

    if not path:
        return None
    try:
        return StatusServer(path, lambda: plugin.status(BUILD_TIMEOUT))
    except OSError as exc:
        log.warning("status socket %s not served: %s", path, exc)
        return None


def build_service(node, metrics, *, socket: str | None = None, name: str | None = None,
                  index: str | None = None, **options):
    """The SLA plugin and its service options, wired to the metrics (also used by tests)."""
    from nri_plugin.nri.service import CONNECTING, REGISTERED, Periodic, ServiceOptions
    from nri_plugin.plugin import SlaPlugin
    from nri_plugin.plugin.container_metrics import ContainerCollector

    nri = node.config.nri
    watch = node.config.watch
    plugin = SlaPlugin(node, metrics)
    metrics.registry.register(ContainerCollector(lambda: plugin.watch.last,
                                                 watch.metrics_containers))

    def on_state(state: str) -> None:
        metrics.set_connected(state == REGISTERED)
        metrics.set_registered(state == REGISTERED)
        if state == CONNECTING:
            metrics.inc_connect_attempts()

    options.setdefault("backoff_max", nri.reconnect_max_seconds)
    periodic = []
    if watch.interval:
        periodic.append(Periodic(watch.interval, plugin.drift_pass, "drift watch"))
    rescan = node.config.gpu.rescan_interval
    if rescan and node.gpus is not None:
        periodic.append(Periodic(rescan, plugin.rescan_inventory, "GPU inventory rescan"))
    health = node.config.gpu.health_interval
    if health and node.gpus is not None and node.gpus.monitor is not None:
        periodic.append(Periodic(health, plugin.poll_gpu_health, "GPU health"))
    options.setdefault("periodic", periodic)
    return plugin, ServiceOptions(
        socket_path=socket or nri.socket, name=name or nri.plugin_name,
        idx=index or nri.plugin_index, on_state=on_state,
        on_reconnect=lambda _total: metrics.inc_reconnects(),
        on_ready=plugin.on_registered, **options)
