"""`nri-sla host-hook`: put the OCI hook fallback and its config on the host, from the
DaemonSet's image (its initContainer; nri_plugin.commands.hostinstall). The base spec
that makes containerd run it comes from `containerd-config --write` on the node."""

from __future__ import annotations

import argparse
from pathlib import Path

from nri_plugin.commands.hostinstall import HOST_BINARY, HOST_DIR, install
from nri_plugin.config.loader import DEFAULT_PATH
from nri_plugin.errors import InternalFailure, Unavailable


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--host-root",
        default="/host",
        metavar="DIR",
        help="where the host's / is mounted (default /host)",
    )
    parser.add_argument(
        "--config",
        default=DEFAULT_PATH,
        help=f"the node config to install for the hook (default "
        f"{DEFAULT_PATH}: the ConfigMap's file)",
    )


def main(args: argparse.Namespace) -> int:
    try:
        done = install(Path(args.host_root), args.config)
    except (FileNotFoundError, NotADirectoryError, PermissionError) as exc:
        # the host's directories are not mounted (or not writable) where they should be
        raise Unavailable(
            f"cannot install under {args.host_root}: {exc.filename}: "
            f"{exc.strerror} (the host's {HOST_DIR} and /etc/nri-sla must be "
            f"mounted there, writable)"
        ) from None
    except OSError as exc:
        raise InternalFailure(
            f"cannot install under {args.host_root}: {exc.filename}: {exc.strerror or exc}"
        ) from None
    print(
        f"installed the nri-sla hook in {HOST_DIR} ({done.runtime.name}) and its config "
        f"under {args.host_root}; on the node, `{HOST_BINARY} containerd-config --write` "
        f"makes containerd run it"
    )
    return 0
