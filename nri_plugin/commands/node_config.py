"""`nri-sla config check|show|default`: the node config file, checked, in effect, or the
defaults.

check FILE: every problem on its own line (file, dotted field, what is allowed), exit
status 2 (EXIT_INVALID) when there is one, 0 and "FILE: ok" when there is none.
show: the config in effect, every key with its default filled in (the same YAML shape).
default: the default config as YAML, a file `check` accepts.
"""

from __future__ import annotations

import argparse
import os
import sys

from nri_plugin.commands.config_render import config_yaml
from nri_plugin.config.loader import (
    DEFAULT_PATH,
    ConfigError,
    check_config,
    load_config,
    read_config_text,
)
from nri_plugin.config.values import NodeConfig
from nri_plugin.errors import EXIT_INVALID, EXIT_OK, one_line


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    check = actions.add_parser("check", help="validate a node config file, one line per problem")
    check.add_argument(
        "file", nargs="?", default=DEFAULT_PATH, help=f"the file (default {DEFAULT_PATH})"
    )
    show = actions.add_parser("show", help="print the config in effect, defaults filled in")
    show.add_argument(
        "--config", default=None, help=f"node config file (default {DEFAULT_PATH} if present)"
    )
    actions.add_parser("default", help="print the default config (YAML)")


def main(args: argparse.Namespace) -> int:
    if args.action == "check":
        if not os.path.lexists(args.file):  # the file is check's argument, not a --config
            raise ConfigError(
                args.file, "", "does not exist (give the file to check: nri-sla config check FILE)"
            )
        _, errors = check_config(read_config_text(args.file), args.file)
        for error in errors:
            print(f"nri-sla config check: {one_line(str(error))}", file=sys.stderr)
        if errors:
            return EXIT_INVALID
        print(f"{args.file}: ok")
        return EXIT_OK
    config = NodeConfig() if args.action == "default" else load_config(args.config)
    sys.stdout.write(config_yaml(config))
    return EXIT_OK
