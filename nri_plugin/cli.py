"""The `nri-sla` command line.

Each subcommand lives in its own module under `nri_plugin.commands` and is imported only
when chosen: `nri-sla hook` is exec'd for every container, so start-up must not pay for
protobuf, NVML or the plugin service.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # `nri-sla hook` runs through here per container: no `typing`
if TYPE_CHECKING:
    import argparse

# `nri-sla hook` is exec'd for every container: main() hands its argv to nri_plugin.hook
# before argparse or any module below is imported (docs/hook.md).
HOOK = "hook"
HOOK_HELP = "OCI hook entry point (state JSON on stdin)"

# name -> (module under nri_plugin.commands with add_arguments(parser) and main(args),
# one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("run", "run the NRI plugin service"),
    "explain": ("explain", "show what each container of a pod manifest would get"),
    "validate": ("validate", "check the SLA annotations of pod manifests (CI friendly)"),
    "inventory": ("inventory", "print the node's CPUs, NUMA nodes and GPUs"),
    "demo": ("demo", "run the plugin against the built-in runtime simulator"),
    "device-plugin": (
        "device_plugin",
        "serve the node's GPUs to the kubelet as its device "
        "plugin (nri-sla's choice becomes the grant)",
    ),
    "status": (
        "status",
        "show each SLA container: enforced vs actual, drift, throttling (asks the running plugin)",
    ),
    "config": (
        "node_config",
        "check a node config file, show the one in effect, or print the defaults",
    ),
    "containerd-config": (
        "containerd_config",
        "print or write the containerd settings "
        "nri-sla needs, as a drop-in for containerd's imports",
    ),
    "host-hook": (
        "host_hook",
        "put the OCI hook, its config and the base runtime spec on "
        "the host (the DaemonSet's initContainer)",
    ),
    "version": ("version", "print nri-sla's version"),
}


def _help_width() -> int:
    """The width argparse gives its help by default, `shutil.get_terminal_size().columns`
    less 2 (COLUMNS, else the terminal of stdout, else 80), read here because argparse
    imports `shutil` for it, and `shutil` imports bz2, lzma and zlib: 0.4 MiB of the
    plugin's memory that nothing else of `nri-sla run` needs (docs/benchmarks.md, "Plugin
    memory"). Every parser makes a formatter at each add_argument, not only for --help."""
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns <= 0:
        stdout = sys.__stdout__
        try:
            columns = os.get_terminal_size(stdout.fileno()).columns if stdout else 0
        except (ValueError, OSError):  # not a terminal, or closed
            columns = 0
    return (columns or 80) - 2


def _help_formatter(prog: str) -> argparse.HelpFormatter:
    """argparse's own formatter at its own default width (`_help_width`)."""
    import argparse

    return argparse.HelpFormatter(prog, width=_help_width())


def _top_parser():
    import argparse

    from nri_plugin import __version__

    parser = argparse.ArgumentParser(
        prog="nri-sla",
        description="Pod resource SLAs for containerd nodes (NRI plugin and OCI hook).",
        formatter_class=_help_formatter,
    )
    parser.add_argument("--version", action="version", version=f"nri-sla {__version__}")
    helps = {name: help_text for name, (_, help_text) in COMMANDS.items()} | {HOOK: HOOK_HELP}
    parser.add_argument(
        "command",
        choices=sorted(helps),
        metavar="COMMAND",
        help="; ".join(f"{n}: {h}" for n, h in helps.items()),
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == [HOOK]:
        from nri_plugin.hook.run import main as hook_main

        return hook_main(argv[1:])
    import argparse
    import importlib
    import logging

    from nri_plugin.errors import EXIT_INVALID, SlaFailure, one_line

    # One-shot commands: warnings as plain lines (`run` sets up its own structured log).
    logging.basicConfig(level=logging.WARNING, format="nri-sla: %(message)s")
    top = _top_parser()
    if not argv:
        top.print_usage(sys.stderr)
        return EXIT_INVALID
    if argv[0].startswith("-"):
        top.parse_args(argv)  # --help, --version: exit 0; anything else: usage, exit 2
        return EXIT_INVALID
    name = argv[0]
    if name not in COMMANDS:
        top.parse_args(argv[:1])  # prints the choices and exits 2
    module_name, help_text = COMMANDS[name]
    module = importlib.import_module(f"nri_plugin.commands.{module_name}")
    parser = argparse.ArgumentParser(
        prog=f"nri-sla {name}", description=help_text, formatter_class=_help_formatter
    )
    module.add_arguments(parser)
    args = parser.parse_args(argv[1:])
    try:
        return int(module.main(args) or 0)
    except SlaFailure as exc:  # whose fault it is decides the status (nri_plugin.errors)
        print(f"nri-sla {name}: {one_line(str(exc))}", file=sys.stderr)
        return exc.exit_status


if __name__ == "__main__":
    sys.exit(main())
