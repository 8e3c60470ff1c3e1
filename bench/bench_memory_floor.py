#!/usr/bin/env python3
"""The resident memory any CPython NRI plugin needs to take in a Synchronize, nri-sla or not.

A fresh interpreter (this virtualenv's, `-I`) takes the steps every plugin on this stack
takes before it can keep a single container, and prints its VmRSS after each: the
interpreter; protobuf's runtime with the NRI descriptors (the project's nri_pb2); PyYAML
(the SLA's format); a socket; the Synchronize request of N containers, four per pod (bench_vs_go's
shapes, made by nri-sla's simulator: golden-like, ~2 MB at 1,000) as received; its pods
and containers decoded one message at a time, as nri-sla's stub and restore do
(`nri_plugin.nri.wire`); then, for comparison, its parse whole. Then what nri-sla's own
transport and records add on top (asyncio, which imports `ssl`; uvloop; OpenSSL's HMAC)
and nri-sla's modules (`nri_plugin.plugin.service`). The peak (VmHWM) before the whole
parse is the floor that the RSS target (peak <= 38 MiB after Synchronize(1,000) + 3,000
creations) sits against: no plugin code, no state kept.

    .venv/bin/python bench/bench_memory_floor.py [--containers 1000] [--json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

RSS_TARGET_MIB = 38.0
SLA = "cpu: {limit: 0.5}\nmemory: {max: 256Mi}"  # bench_vs_go.py's

# Run in the child: one step per line of STEPS, each followed by a VmRSS sample.
CHILD = """import sys, json
def mib(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
out = [("the interpreter", mib("VmRSS"))]
from nri_plugin.nri.pb import nri_pb2 as pb
out.append(("protobuf (upb) + the NRI descriptors", mib("VmRSS")))
import yaml
out.append(("PyYAML", mib("VmRSS")))
import selectors, socket
out.append(("socket + selectors (the least I/O)", mib("VmRSS")))
with open(sys.argv[1], "rb") as f:
    data = f.read()
out.append(("the Synchronize request, received", mib("VmRSS")))
from nri_plugin.nri.wire import LazyMessages, read_fields
fields = read_fields(data)
for cls, number in ((pb.PodSandbox, 1), (pb.Container, 2)):
    messages = LazyMessages(cls)
    messages.add(data, fields.spans[number])
    for message in messages:
        pass
del message
out.append(("decoded one message at a time", mib("VmRSS")))
out.append(("  peak so far (VmHWM): any plugin's floor", mib("VmHWM")))
request = pb.SynchronizeRequest.FromString(data)
out.append(("the request parsed whole (for comparison)", mib("VmRSS")))
import hmac, hashlib
hmac.new(b"k" * 32, b"x", hashlib.sha256).digest()
out.append(("OpenSSL's HMAC (nri-sla's records)", mib("VmRSS")))
import asyncio
out.append(("asyncio (+ ssl)", mib("VmRSS")))
try:
    import uvloop
    out.append(("uvloop", mib("VmRSS")))
except ImportError:
    pass
import nri_plugin.plugin.service
out.append(("nri-sla's plugin modules", mib("VmRSS")))
print(json.dumps(out))
"""


def write_request(path: Path, containers: int) -> int:
    """The Synchronize of `containers` (4 per pod, as bench_vs_go's) to `path`; its size."""
    from nri_plugin.nri.pb import nri_pb2 as pb
    from nri_plugin.simulated.runtime import make_container, make_pod

    n_pods = max(1, containers // 4)
    pods = [make_pod(f"pod-{i}", annotations={"sla.nri.io/pod": SLA}) for i in range(n_pods)]
    ctrs = [make_container(pods[i % n_pods], f"c{i}") for i in range(containers)]
    data = pb.SynchronizeRequest(pods=pods, containers=ctrs).SerializeToString()
    path.write_bytes(data)
    return len(data)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--containers", type=int, default=1000)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-memory-floor-") as tmp:
        request = Path(tmp) / "synchronize.bin"
        size = write_request(request, args.containers)
        out = subprocess.run(
            [sys.executable, "-I", "-c", CHILD, str(request)],
            capture_output=True,
            text=True,
            check=True,
        )
    steps = json.loads(out.stdout)
    floor = next(v for name, v in steps if name.startswith("  peak"))
    if args.json:
        print(
            json.dumps(
                {
                    "containers": args.containers,
                    "request_bytes": size,
                    "steps_mib": steps,
                    "floor_mib": floor,
                    "target_mib": RSS_TARGET_MIB,
                }
            )
        )
        return 0
    print(
        f"VmRSS of a fresh interpreter ({sys.version.split()[0]}) taking in a Synchronize "
        f"of {args.containers:,} containers ({size:,} bytes)"
    )
    previous = 0.0
    for name, mib in steps:
        delta = "" if name.startswith("  peak") else f"{mib - previous:+7.1f}"
        print(f"{name:<44}{mib:8.1f} MiB {delta}")
        if not name.startswith("  peak"):
            previous = mib
    verdict = "above" if floor > RSS_TARGET_MIB else "within"
    print(
        f"the floor before any plugin code or state: {floor:.2f} MiB, {verdict} the "
        f"{RSS_TARGET_MIB:.0f} MiB peak"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
