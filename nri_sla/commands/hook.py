"""`nri-sla hook`: the OCI hook entry point (OCI state JSON on stdin).

The work lives in nri_sla.hook; this module only maps argparse onto HookOptions.
`python3 -I -m nri_sla.hook` is the same hook without argparse (faster start-up).
"""

from __future__ import annotations

import argparse

from nri_sla.hook.deadline import DEFAULT_TIMEOUT
from nri_sla.hook.spec import DEFAULT_STAGE, STAGES


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--stage", default=DEFAULT_STAGE, choices=list(STAGES),
                        help="the OCI hook stage this hook is installed at "
                             f"(default {DEFAULT_STAGE})")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, metavar="S",
                        help=f"give up after S seconds (default {DEFAULT_TIMEOUT:g})")
    parser.add_argument("--config", default=None, metavar="PATH",
                        help="node config file (default /etc/nri-sla/config.yaml; "
                             "missing file = built-in defaults)")
    parser.add_argument("--cgroup-root", default=None, metavar="PATH",
                        help="cgroup filesystem root (default: the node config's cgroup.root, "
                             "/sys/fs/cgroup)")


def main(args: argparse.Namespace) -> int:
    from nri_sla.hook.errors import HookError
    from nri_sla.hook.options import HookOptions, check
    from nri_sla.hook.run import main as run_main

    try:
        check(args.stage, args.timeout)
    except HookError as exc:
        import sys

        sys.stderr.write(exc.line() + "\n")
        return exc.exit_code
    return run_main(HookOptions(stage=args.stage, timeout=args.timeout, config=args.config,
                                cgroup_root=args.cgroup_root))
