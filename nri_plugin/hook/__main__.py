"""Fast entry points for the hook (same options and exit codes as `nri-sla hook`):

    python3 -I -m nri_plugin.hook [options]                 # no argparse, no nri_plugin.cli
    python3 -I -S /path/to/nri_plugin/hook/__main__.py [options]   # also no site: fastest

With -S the interpreter skips site (and every .pth file in site-packages, e.g. editable
install finders), so run as a file this puts the package's parent directory on sys.path
itself (run.exit_from_file adds the interpreter's site-packages). Short on purpose: a
script is compiled on every run (no .pyc), so the rest lives in run.py. docs/hook.md has
the figures.
"""

import sys

if __name__ == "__main__":
    if not __package__:
        import os

        # Without -I/-P, sys.path[0] is this file's directory (nri_plugin/hook): drop it, so
        # hook modules never shadow top-level names; then put the package's parent first.
        here = os.path.dirname(os.path.abspath(__file__))
        sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
        sys.path.insert(0, os.path.dirname(os.path.dirname(here)))
    from nri_plugin.hook.run import exit_from_file

    exit_from_file(as_file=not __package__)
