"""`nri-sla version`: the version, as `nri-sla --version` prints it."""

from __future__ import annotations

import argparse

from nri_plugin import __version__


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """No arguments."""


def main(args: argparse.Namespace) -> int:
    print(f"nri-sla {__version__}")
    return 0
