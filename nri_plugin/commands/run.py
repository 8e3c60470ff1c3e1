"""`nri-sla run`: the NRI plugin service (assembled in nri_plugin.plugin.service).

Dials the runtime's NRI socket (or uses fd 3 when containerd launched it from
/opt/nri/plugins), registers, rebuilds allocations from Synchronize, answers container
events, reconnects when containerd restarts, serves Prometheus metrics and talks to systemd.
This module checks what the operator gave and maps failures to exit statuses.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys

from nri_plugin.commands.common import add_log_arguments, add_node_arguments, node_from_args
from nri_plugin.kubelet.cpumanager import DEFAULT_STATE_FILE, policy_warning

log = logging.getLogger("nri_sla.run")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_node_arguments(parser)
    parser.add_argument(
        "--socket", default=None, help="NRI socket (default from the config: /var/run/nri/nri.sock)"
    )
    parser.add_argument("--name", default=None, help="plugin name (default nri-sla)")
    parser.add_argument("--index", default=None, help="plugin index, two digits (default 50)")
    parser.add_argument(
        "--metrics-address",
        default=None,
        help='host:port for /metrics, /healthz, /readyz ("" disables)',
    )
    parser.add_argument(
        "--health-address",
        default=None,
        help="host:port for /healthz and /readyz alone, the probes' "
        'listener that no connection flood starves ("" disables)',
    )
    parser.add_argument(
        "--cpu-manager-state",
        default=DEFAULT_STATE_FILE,
        metavar="FILE",
        help="the kubelet's CPU manager checkpoint, read at start to warn "
        f"when its policy is not none (default {DEFAULT_STATE_FILE}; "
        '"" skips the check)',
    )
    add_log_arguments(parser)


def main(args: argparse.Namespace) -> int:
    from nri_plugin import __version__
    from nri_plugin.config.loader import load_config
    from nri_plugin.core.recordkey import load_or_create_key
    from nri_plugin.errors import EXIT_INTERNAL, EXIT_INVALID, EXIT_UNAVAILABLE, SlaFailure
    from nri_plugin.nri.errors import NriError
    from nri_plugin.nri.heap import keep_large_blocks_mapped
    from nri_plugin.nri.stub import check_identity
    from nri_plugin.ops.logsetup import setup_logging
    from nri_plugin.plugin.service import reload_node, serve_node, start_listeners
    from nri_plugin.topology.snapshot import load_snapshot

    # A reload asked for while starting (systemctl reload, a ConfigMap roll) must not stop
    # the plugin: ignored until the service's own SIGHUP handler reloads.
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    # Before the first large request: a Synchronize's megabytes stay out of the heap.
    keep_large_blocks_mapped()
    # What the operator gave is checked before the first log line, so that a mistake is
    # the one line on stderr (docs/operations.md "Exit statuses"), exiting with its kind's
    # status (a ValueError or OSError there is the operator's input too).
    try:
        config = load_config(args.config)
        # Decision lines written once each answer is sent (ops.logsetup says why).
        setup_logging(
            args.log_format or config.log.format,
            args.log_level or config.log.level,
            defer_decisions=True,
        )
        # Given is given: `--name ""` is refused, not read as "use the config's".
        check_identity(
            config.nri.plugin_name if args.name is None else args.name,
            config.nri.plugin_index if args.index is None else args.index,
        )
        if args.socket is not None and not os.path.isabs(args.socket):
            raise ValueError(
                f"--socket {args.socket!r} must be an absolute path (the NRI "
                "socket, e.g. /var/run/nri/nri.sock)"
            )
        if args.inventory is not None:
            load_snapshot(args.inventory)  # read again below; here only to fail early
        # Before the node: a key nri-sla cannot trust is refused, not replaced (that would
        # disown every record on the node), and the plugin does not start without one.
        key = load_or_create_key(config.state_dir)
    except (SlaFailure, ValueError, OSError) as exc:
        print(f"nri-sla run: {exc}", file=sys.stderr)
        return exc.exit_status if isinstance(exc, SlaFailure) else EXIT_INVALID
    try:
        metrics, listeners = start_listeners(
            config.metrics.address if args.metrics_address is None else args.metrics_address,
            config.metrics.health_address if args.health_address is None else args.health_address,
        )
    except (ValueError, OSError) as exc:  # ValueError: MetricsError, naming the address
        print(f"nri-sla run: {exc}", file=sys.stderr)
        # a bad address is the operator's input; a taken port, the host's state
        return EXIT_INVALID if isinstance(exc, ValueError) else EXIT_UNAVAILABLE
    with listeners:
        log.info("nri-sla %s starting (config %s)", __version__, config.source)
        policy = policy_warning(args.cpu_manager_state) if args.cpu_manager_state else None
        if policy is not None:
            log.warning("%s", policy)
        try:
            node = node_from_args(args, detect=True, record_key=key)
            serve_node(
                node,
                metrics,
                status_socket=config.status.socket,
                socket=args.socket,
                name=args.name,
                index=args.index,
                on_reload=lambda: reload_node(node, args.config, args.log_format, args.log_level),
            )
        except (ValueError, OSError) as exc:  # the config against this host, NRI_PLUGIN_*
            print(f"nri-sla run: {exc}", file=sys.stderr)
            return EXIT_INVALID
        except NriError as exc:  # the runtime, after start-up
            print(f"nri-sla run: {exc}", file=sys.stderr)
            return EXIT_INTERNAL
    return 0
