"""`nri-sla device-plugin`: serve this node's GPUs to the kubelet as its GPU device plugin,
so that nri-sla's topology choice is the kubelet's grant (nri_plugin.kubelet.deviceplugin;
docs/device-plugin.md). For nodes where no other device plugin advertises GPUs."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path

from nri_plugin.commands.common import add_log_arguments
from nri_plugin.config.loader import DEFAULT_PATH


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config", default=None, help=f"node config file (default {DEFAULT_PATH} if present)"
    )
    parser.add_argument(
        "--inventory",
        default=None,
        metavar="FILE",
        help="serve the GPUs of a node snapshot (nri-sla inventory --save) "
        "instead of the config's gpu.inventory",
    )
    parser.add_argument(
        "--socket-dir",
        default=None,
        metavar="DIR",
        help="the kubelet's device-plugin directory (default from the "
        "config's device-plugin.socket-dir: /var/lib/kubelet/device-plugins)",
    )
    parser.add_argument(
        "--mig-strategy",
        default=None,
        choices=("none", "single", "mixed"),
        help="how MIG devices are advertised (default from the config's "
        "device-plugin.mig-strategy: none)",
    )
    parser.add_argument(
        "--metrics-address",
        default=None,
        metavar="HOST:PORT",
        help='serve Prometheus metrics there ("" disables; default from the '
        "config's device-plugin.metrics-address: off)",
    )
    add_log_arguments(parser)


def main(args: argparse.Namespace) -> int:
    from nri_plugin.config.loader import load_config
    from nri_plugin.errors import EXIT_INVALID, SlaFailure, Unavailable
    from nri_plugin.kubelet.deviceplugin import GpuDevicePlugin, PluginSettings
    from nri_plugin.kubelet.plugin_metrics import DevicePluginMetrics
    from nri_plugin.ops.logsetup import setup_logging
    from nri_plugin.ops.metrics_http import start_http_server
    from nri_plugin.topology.inventory import configured_reader
    from nri_plugin.topology.watched import WatchedInventory

    try:
        config = load_config(args.config)
        setup_logging(args.log_format or config.log.format, args.log_level or config.log.level)
        socket_dir = Path(args.socket_dir or config.device_plugin.socket_dir)
        if not socket_dir.is_dir():
            raise Unavailable(
                f"{socket_dir} is not a directory (is the kubelet installed? "
                "device-plugin.socket-dir or --socket-dir)"
            )
        setting = str(Path(args.inventory).resolve()) if args.inventory else config.gpu.inventory
        gpus = WatchedInventory.of(configured_reader(setting))
        metrics = DevicePluginMetrics()
        plugin = GpuDevicePlugin(
            PluginSettings(
                socket_dir=socket_dir,
                resource_name=config.device_plugin.resource_name,
                injection=config.gpu.injection,
                mig_strategy=args.mig_strategy or config.device_plugin.mig_strategy,
            ),
            gpus.read(),
            metrics=metrics,
        )
        address = (
            config.device_plugin.metrics_address
            if args.metrics_address is None
            else args.metrics_address
        )
        server = start_http_server(metrics, address)  # reads registry, is_registered
    except (SlaFailure, ValueError, OSError) as exc:
        print(f"nri-sla device-plugin: {exc}", file=sys.stderr)
        return exc.exit_status if isinstance(exc, SlaFailure) else EXIT_INVALID
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda _sig, _frame: plugin.stop())
    if gpus.monitor is not None and config.gpu.health_interval:
        threading.Thread(
            target=plugin.follow_health,
            args=(gpus, config.gpu.health_interval),
            name="gpu-health",
            daemon=True,
        ).start()
    try:
        plugin.run(rescan=gpus.read, rescan_interval=config.gpu.rescan_interval)
    finally:
        gpus.close()
        if server is not None:
            server.close()
    return 0
