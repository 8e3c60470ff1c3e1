"""Fast entry points for the hook (same options and exit codes as `nri-sla hook`):

    python3 -I -m nri_plugin.hook [options]                 # no argparse, no nri_plugin.cli
    python3 -I -S -X utf8 /path/to/nri_plugin/hook/__main__.py [options]  # no site: fastest

With -S the interpreter skips site (and every .pth file in site-packages, e.g. editable
install finders), so run as a file this puts the package's parent directory on sys.path
itself (run.exit_from_file adds the interpreter's site-packages). Short on purpose: a
script is compiled on every run (no .pyc), so the rest lives in run.py. docs/hook.md has
the figures.
"""

import gc
import sys

if __name__ == "__main__":
    # One short process that ends in os._exit: the cyclic collector would only walk the
    # objects of the modules it imports (~0.6 M instructions of a cached run's ~41 M) and
    # free nothing that matters before the exit.
    gc.disable()
    if not __package__:
        # Without -I/-P the interpreter put this file's directory (nri_plugin/hook) first
        # on sys.path: drop it, so hook modules never shadow top-level names. Then put the
        # package's parent first: __file__ is absolute, and string operations suffice
        # (`os` would cost a cached run more than all its cgroup writes: posixfs.py).
        if not sys.flags.safe_path:
            del sys.path[0]
        sys.path.insert(0, __file__.rpartition("/nri_plugin/hook/")[0] or "/")
    from nri_plugin.hook.run import exit_from_file

    exit_from_file(as_file=not __package__)
