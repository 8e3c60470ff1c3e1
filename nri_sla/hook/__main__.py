"""Fast entry point: `python3 -I -m nri_sla.hook [options]` (no argparse, no cli module).

Same options and exit codes as `nri-sla hook`; see docs/hook.md.
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    from nri_sla.hook.errors import HookError
    from nri_sla.hook.options import parse_argv

    try:
        opts = parse_argv(sys.argv[1:] if argv is None else argv)
    except HookError as exc:
        sys.stderr.write(exc.line() + "\n")
        return exc.exit_code
    from nri_sla.hook.run import main as run_main

    return run_main(opts)


if __name__ == "__main__":
    sys.exit(main())
