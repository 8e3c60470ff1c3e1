"""`nri-sla host-hook`: put the OCI hook fallback, its config and the base runtime spec on
the host, from the DaemonSet's image (its initContainer; nri_plugin.commands.hostinstall)."""

from __future__ import annotations

import argparse
from pathlib import Path

from nri_plugin.commands.hostinstall import HOST_BASE_SPEC, HOST_DIR, install
from nri_plugin.config import DEFAULT_PATH
from nri_plugin.errors import InternalFailure

# Where the Dockerfile puts hooks/base-runtime-spec.json.
IMAGE_BASE_SPEC = "/usr/share/nri-sla/base-runtime-spec.json"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host-root", default="/host", metavar="DIR",
                        help="where the host's / is mounted (default /host)")
    parser.add_argument("--config", default=DEFAULT_PATH,
                        help=f"the node config to install for the hook (default "
                             f"{DEFAULT_PATH}: the ConfigMap's file)")
    parser.add_argument("--base-spec-template", default=IMAGE_BASE_SPEC, metavar="FILE",
                        help=f"the OCI spec the base runtime spec is made from (default "
                             f"{IMAGE_BASE_SPEC})")


def main(args: argparse.Namespace) -> int:
    try:
        done = install(Path(args.host_root), args.config, Path(args.base_spec_template))
    except OSError as exc:  # a host path not mounted or not writable, a missing template
        raise InternalFailure(f"cannot install under {args.host_root}: {exc}") from None
    print(f"installed the nri-sla hook in {HOST_DIR} ({done.runtime.name}), its config "
          f"and {HOST_BASE_SPEC} under {args.host_root}")
    return 0
