"""`nri-sla validate POD.yaml...`: check SLA annotations against the contract, for CI.

Node-independent: it checks what a workload owner controls (syntax, types, ranges,
contradictions), not what a particular node can honour (`explain` does that). Exit status:
0 all valid, 1 any SLA error, 2 a manifest that cannot be read or is refused by the
hardened YAML reader (one line naming the file and the problem).
"""

from __future__ import annotations

import argparse
import sys

from nri_plugin.manifests import ManifestError, load_pods


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("manifests", nargs="+", metavar="POD.yaml")
    parser.add_argument("--prefix", default="sla.nri.io", help="annotation prefix")
    parser.add_argument("--quiet", "-q", action="store_true", help="print errors only")


def main(args: argparse.Namespace) -> int:
    from nri_plugin.sla.errors import SlaError, SlaErrors
    from nri_plugin.sla.parse import sla_for_container

    status = 0
    for path in args.manifests:
        try:
            pods = load_pods(path)
        except ManifestError as exc:
            print(f"error: {exc}", file=sys.stderr)
            status = 2
            continue
        for pod in pods:
            for name in pod.containers:
                where = f"{pod.source} container {name}"
                try:
                    sla = sla_for_container(pod.annotations, name, prefix=args.prefix)
                except SlaError as exc:
                    for error in exc.errors:
                        print(f"{where}: {error}")
                    if isinstance(exc, SlaErrors) and exc.omitted:
                        print(f"{where}: ... and {exc.omitted} more problems")
                    status = max(status, 1)
                    continue
                if not args.quiet:
                    print(f"{where}: {'ok' if sla else 'no SLA'}")
    return status
