"""Arguments shared by the subcommands that need a node (explain, run, demo), and the
table layout of the commands that print one (inventory, status)."""

from __future__ import annotations

import argparse

from nri_plugin.config.convert import LOG_LEVELS
from nri_plugin.config.loader import DEFAULT_PATH, load_config


def add_node_arguments(
    parser: argparse.ArgumentParser,
    config: str | None = None,
    cgroup: str | None = None,
    inventory: str | None = None,
) -> None:
    """--config, --cgroup and --inventory; a command that plays a node of its own (demo)
    passes its defaults, and the help states them."""
    parser.add_argument(
        "--config",
        default=config,
        help=f"node config file (default {config or DEFAULT_PATH + ' if present'})",
    )
    parser.add_argument(
        "--cgroup",
        choices=("v1", "v2"),
        default=cgroup,
        help="plan for a cgroup v1 or v2 node instead of this host's"
        + (f" (default {cgroup})" if cgroup else ""),
    )
    parser.add_argument(
        "--inventory",
        default=inventory,
        metavar="FILE",
        help="replay a node snapshot (nri-sla inventory --save) "
        "instead of reading this host's CPUs and GPUs"
        + (f" (default {inventory})" if inventory else ""),
    )
    parser.add_argument("--sysfs-root", default="/sys", help=argparse.SUPPRESS)


def add_log_arguments(parser: argparse.ArgumentParser) -> None:
    """--log-format and --log-level of the long-running commands (over log.* of the config)."""
    from nri_plugin.ops.logsetup import FORMATS

    parser.add_argument(
        "--log-format",
        choices=FORMATS,
        default=None,
        help="log line format (default log.format of the config: text)",
    )
    # The levels log.level takes, so that the flag and the key never differ.
    parser.add_argument(
        "--log-level",
        choices=LOG_LEVELS,
        default=None,
        help="least level logged (default log.level of the config: info)",
    )


def node_from_args(args: argparse.Namespace, detect: bool = False, record_key: bytes | None = None):
    """A NodeState from the common arguments (`record_key`: the node's, for a plugin
    whose records must outlive it). Raises ConfigError/ValueError/OSError."""
    from nri_plugin.core.nodebuild import build_node

    config = load_config(args.config)
    version = {"v1": 1, "v2": 2, None: None}[args.cgroup]
    return build_node(
        config,
        cgroup_version=version,
        inventory_file=args.inventory,
        sysfs_root=args.sysfs_root,
        detect=detect,
        record_key=record_key,
    )


def table_lines(rows: list[list[str]]) -> list[str]:
    """Rows (the first: the header) as aligned columns, two spaces apart."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
