"""Fast entry points for the hook (same options and exit codes as `nri-sla hook`):

    python3 -I -m nri_plugin.hook [options]                 # no argparse, no nri_plugin.cli
    python3 -I -S /path/to/nri_plugin/hook/__main__.py [options]   # also no site: fastest

With -S the interpreter skips site (and every .pth file in site-packages, e.g. editable
install finders), so when run as a file this module puts the package's parent directory
and the interpreter's own site-packages on sys.path itself. See docs/hook.md for figures.
"""

from __future__ import annotations

import sys


def _bootstrap_path() -> None:
    """Run as a file: make `nri_plugin` and its dependencies (yaml, cgroupspy) importable."""
    import os

    here = os.path.dirname(os.path.abspath(__file__))
    # Without -I/-P, sys.path[0] is this file's directory (nri_plugin/hook): drop it, so hook
    # modules never shadow top-level names; then put the package's parent first.
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    sys.path.insert(0, os.path.dirname(os.path.dirname(here)))
    version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    # site is what normally notices a virtualenv (pyvenv.cfg next to bin/); do it here.
    venv = os.path.dirname(os.path.dirname(os.path.abspath(sys.executable)))
    if os.path.isfile(os.path.join(venv, "pyvenv.cfg")):
        candidates = [os.path.join(venv, "lib", version, "site-packages")]
    else:
        candidates = [os.path.join(sys.prefix, "lib", version, "site-packages")]
        if sys.prefix == "/usr":  # Debian's own interpreter: its dist-packages directories
            candidates += [f"/usr/local/lib/{version}/dist-packages",
                           "/usr/lib/python3/dist-packages"]
    for candidate in candidates:
        if candidate not in sys.path and os.path.isdir(candidate):
            sys.path.append(candidate)


def main(argv: list[str] | None = None) -> int:
    from nri_plugin.errors import SlaFailure
    from nri_plugin.hook.options import HELP, HelpRequested, parse_argv
    from nri_plugin.hook.values import PREFIX

    try:
        opts = parse_argv(sys.argv[1:] if argv is None else argv)
    except HelpRequested:
        sys.stdout.write(HELP)
        return 0
    except SlaFailure as exc:
        sys.stderr.write(f"{PREFIX}{exc}\n")
        return exc.exit_status
    from nri_plugin.hook.run import main as run_main

    return run_main(opts)


if __name__ == "__main__":
    if not __package__:
        _bootstrap_path()
    status = main()
    # Everything the hook writes is flushed or closed by now (stderr, the decision log,
    # the cache files): skip the interpreter's teardown of every module it loaded, which
    # costs a cached run more than its own cgroup writes.
    sys.stdout.flush()
    sys.stderr.flush()
    import os

    os._exit(status)
