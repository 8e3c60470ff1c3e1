#!/usr/bin/env python3
"""CreateContainer in-process: decode + SlaPlugin's handler + encode, CPU per create.

What the plugin's own share of a create costs, without the transport (bench_transport.py
measures that with a trivial handler) and without the runtime (bench_vs_go.py): the
golden-sized CreateContainerRequest bench_vs_go.py sends (nri-sla's simulator, the pod
carrying its SLA), decoded, handled by `SlaPlugin.create_container` with --live
containers already registered, the answer encoded, and the container removed again (so
every create sees the same live set; the removal is not timed). Warm: --warmup creates
first. Logging as `nri-sla run` sets it up (text, info, decision lines deferred) into a
null stream, and each create runs in its own turn of an event loop, as in `nri-sla run`:
the decision line is rendered and written once the turn ends, after the answer. Two
figures: the CPU until the answer is encoded (what the runtime waits for) and the CPU of
the whole turn (with the decision line and the loop's own work; uvloop's loop when it
is installed, as `nri-sla run` runs).

--evict MIB writes over that many MiB before every create (untimed): the CPU caches
then hold none of the create's code and data, as in `nri-sla run`, which sleeps between
the runtime's requests while the runtime (and everything else on the node) runs. A
create costs 2-3x its hot-loop CPU so (docs/benchmarks.md, "CreateContainer in the
plugin"); 8 covers this VM's 2 MiB L2 with room.

    .venv/bin/python bench/bench_create.py [--n 5000] [--live 1000] [--evict 8] [--profile]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import os
import pstats
import time

from nri_plugin.config.values import NodeConfig
from nri_plugin.core.nodebuild import build_node
from nri_plugin.nri.pb import nri_pb2 as pb
from nri_plugin.nri.stub import _create_response
from nri_plugin.ops.logsetup import setup_logging
from nri_plugin.plugin import SlaPlugin
from nri_plugin.simulated.runtime import make_container, make_pod

SLA = "cpu: {limit: 0.5}\nmemory: {max: 256Mi}"  # bench_vs_go.py's


class NullStream(io.TextIOBase):
    """A log stream that keeps nothing (the line is still rendered and written)."""

    def write(self, text: str) -> int:
        return len(text)


def plugin_with(live: int) -> tuple[SlaPlugin, pb.PodSandbox]:
    node = build_node(NodeConfig(), detect=False, record_key=bytes(32))
    plugin = SlaPlugin(node)
    plugin.nri_version = "v0.12.0"
    pods = [
        make_pod(f"pod-{i}", annotations={"sla.nri.io/pod": SLA}) for i in range(max(1, live // 4))
    ]
    for i in range(live):
        pod = pods[i % len(pods)]
        plugin.create_container(pod, make_container(pod, f"c{i}"))
    return plugin, make_pod("bench", annotations={"sla.nri.io/pod": SLA})


def requests(pod: pb.PodSandbox, n: int) -> list[bytes]:
    """Encoded CreateContainerRequests, a fresh container id each (as the driver sends)."""
    out = []
    for i in range(n):
        ctr = make_container(pod, "work")
        ctr.id = f"bench-{i:06d}"
        out.append(pb.CreateContainerRequest(pod=pod, container=ctr).SerializeToString())
    return out


def create(plugin: SlaPlugin, payload: bytes) -> tuple[str, bytes]:
    req = pb.CreateContainerRequest.FromString(payload)
    return req.container.id, _create_response(plugin.create_container(req.pod, req.container))


def run(
    plugin: SlaPlugin, payloads: list[bytes], evict_mib: int = 0
) -> tuple[list[float], list[float]]:
    """CPU µs per create until its answer is encoded, and for its whole loop turn."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(_creates(plugin, payloads, evict_mib))
    return uvloop.run(_creates(plugin, payloads, evict_mib))


async def _creates(
    plugin: SlaPlugin, payloads: list[bytes], evict_mib: int
) -> tuple[list[float], list[float]]:
    to_answer, whole = [], []
    clock = time.process_time_ns
    # One byte per 64-byte cache line of the buffer written: every line is evicted.
    junk = bytearray(evict_mib << 20)
    line_bytes = bytes(len(junk[::64]))
    for payload in payloads:
        if evict_mib:
            junk[::64] = line_bytes
        start = clock()
        cid, _ = create(plugin, payload)
        answered = clock()
        await asyncio.sleep(0)  # the turn ends: the decision line is written
        to_answer.append((answered - start) / 1000)
        whole.append((clock() - start) / 1000)
        plugin.remove_container(None, pb.Container(id=cid))  # untimed: same live set
    return to_answer, whole


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=5000, help="timed creates")
    parser.add_argument("--warmup", type=int, default=500)
    parser.add_argument("--live", type=int, default=1000, help="containers registered")
    parser.add_argument(
        "--evict",
        type=int,
        default=0,
        metavar="MIB",
        help="write over MIB MiB before each create (cold caches)",
    )
    parser.add_argument("--profile", action="store_true", help="cProfile the timed creates")
    args = parser.parse_args()
    setup_logging("text", "info", stream=NullStream(), defer_decisions=True)
    plugin, pod = plugin_with(args.live)
    payloads = requests(pod, args.warmup + args.n)
    print(f"request: {len(payloads[0])} bytes; live containers: {len(plugin.registry)}")
    run(plugin, payloads[: args.warmup])
    if args.profile:
        profile = cProfile.Profile()
        profile.runcall(run, plugin, payloads[args.warmup :], args.evict)
        pstats.Stats(profile).sort_stats(os.environ.get("BENCH_SORT", "cumulative")).print_stats(45)
        return
    to_answer, whole = run(plugin, payloads[args.warmup :], args.evict)
    caches = f", {args.evict} MiB written before each" if args.evict else ""
    print(f"CreateContainer in-process (decode + handler + encode{caches}), n={len(whole)}:")
    for what, samples in (("until the answer", to_answer), ("for the whole turn", whole)):
        samples.sort()
        p50, p99 = samples[len(samples) // 2], samples[int(len(samples) * 0.99)]
        print(
            f"  CPU {what}: p50 {p50:.0f} us, p99 {p99:.0f} us, "
            f"mean {sum(samples) / len(samples):.0f} us"
        )


if __name__ == "__main__":
    main()
