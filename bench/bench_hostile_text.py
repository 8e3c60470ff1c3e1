#!/usr/bin/env python3
"""What hostile SLA text costs a CreateContainer, against a typical one.

The plugin answers the runtime's requests one at a time, so a pod whose annotations are
slow to read delays every other container's create. Each case below is a pod whose SLA
annotations sit at one of the parser's bounds (docs/sla.md, "Bounds"), created through
`SlaPlugin.create_container` in-process as bench_create.py does (decode + handler +
encode, --live containers registered, logging as `nri-sla run` sets it up, the container
removed again untimed; a refused create is answered with its error as the plugin does).
Every create of a "distinct" case carries annotations no create before it carried (one
digit changes), so no cache helps: the figure is the price of a cold miss. Every create
of a "same" case carries the annotations of the one before (a controller re-creating a
refused pod, a deployment's replicas). Printed: CPU per create (p50, p99) and the p50's
ratio to a typical pod's first create ("typical, new pod": a small SLA never seen
before) and to a typical replica (the same small SLA every time: the decision reused).
Target: no case costs more than 5x a typical pod's first create (the exit
status says whether it is met); "other annotations" (not SLA text) is shown, not judged.

    .venv/bin/python bench/bench_hostile_text.py [--n 200] [--live 1000]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable

from bench_create import SLA, NullStream, create, plugin_with

from nri_plugin.nri.pb import nri_pb2 as pb
from nri_plugin.ops.logsetup import setup_logging
from nri_plugin.plugin import SlaPlugin
from nri_plugin.simulated.runtime import make_container, make_pod
from nri_plugin.sla import parse as sla_parse
from nri_plugin.sla.schema import MAX_IO_RULES

POD_KEY, CTR_KEY = "sla.nri.io/pod", "sla.nri.io/container.work"
MAX_BYTES = sla_parse.MAX_ANNOTATION_BYTES
MAX_VALUES = getattr(sla_parse, "MAX_VALUES", 4096)  # safeyaml's default before it was named
MAX_DEPTH = sla_parse.MAX_DEPTH
MAX_TOTAL = sla_parse.MAX_TOTAL_ANNOTATION_CHARS
MAX_KEYS = getattr(sla_parse, "MAX_SLA_KEYS", MAX_TOTAL // 20)  # before it was named
TARGET_RATIO = 5.0


def _fill(head: str, item: Callable[[int], str], tail: str, values: int) -> str:
    """head + items + tail, as many items as fit in MAX_BYTES and `values` values."""
    parts, size = [], len(head) + len(tail)
    for n in range(values):
        piece = item(n)
        if size + len(piece) > MAX_BYTES:
            break
        parts.append(piece)
        size += len(piece)
    return head + "".join(parts) + tail


def largest_valid(i: int) -> str:
    """A document the parser accepts, as big as the bounds let it be: io.max rules up to
    the rule bound, then NUMA node ids. Values: 13 for the root and cpu and memory, 4 for
    io.max's
    keys and list, 11 per rule (its mapping, 5 keys, 5 values), 5 for numa with its
    last id, 1 per further id."""
    head = f"cpu: {{limit: 2, period: 100ms}}\nmemory: {{high: {1000 + i}Mi, max: 2Gi}}\n"
    rule = (
        "  - {{device: '259:{n}', read-bps: 500Mi, write-bps: 200Mi, read-iops: 1000, "
        "write-iops: 1000}}\n"
    )
    room = MAX_VALUES - 13 - 4
    rules = min(MAX_IO_RULES, room // 11)
    text = _fill(head + "io:\n  max:\n", lambda n: rule.format(n=n), "", rules)
    room -= text.count("device") * 11 + 5
    return _fill(text + "numa: {nodes: [", lambda n: f"{n}, ", "1023]}\n", max(0, min(room, 1023)))


def unknown_keys(i: int) -> str:
    """Unknown top-level keys up to the byte or value bound (refused: every key wrong)."""
    return _fill(f"k{i}: 0\n", lambda n: f"k{n}x: {n}\n", "", (MAX_VALUES - 3) // 2)


def most_values(i: int) -> str:
    """One list of small numbers at the value bound (refused: not a CPU limit)."""
    return _fill(f"cpu: {{limit: [{i}", lambda n: ",0", "]}\n", MAX_VALUES - 6)


def over_values(i: int) -> str:
    """One value past the value bound (refused by the YAML reader, which stops there)."""
    return f"cpu: {{limit: [{i}" + ",0" * (MAX_VALUES - 5) + "]}\n"


def deepest(i: int) -> str:
    """Nesting at the depth bound, its innermost list filled with values."""
    depth = MAX_DEPTH - 2
    return _fill(
        "cpu: {limit: " + "[" * depth + str(i),
        lambda n: ",0",
        "]" * depth + "}\n",
        MAX_VALUES - 5 - depth,
    )


def over_bytes(i: int) -> str:
    """One byte past the size bound (refused before parsing)."""
    body = f"cpu: {{limit: {i % 8 + 1}}}\n#"
    return body + "x" * (MAX_BYTES + 1 - len(body))


def stray_keys(i: int) -> dict[str, str]:
    """Unknown keys under the prefix, as many as a pod may have (refused)."""
    return {f"sla.nri.io/x{i}-{n}": "" for n in range(MAX_KEYS)}


def over_keys(i: int) -> dict[str, str]:
    """Unknown keys under the prefix up to the pod's total (refused at the first key
    past the key bound)."""
    return {f"sla.nri.io/x{i}-{n}": "" for n in range(MAX_TOTAL // 20)}


def other_keys(i: int) -> dict[str, str]:
    """Not SLA text: a typical SLA among other annotations, 256 KiB in all (Kubernetes'
    bound), which every create decodes and walks past."""
    return {
        POD_KEY: f"cpu: {{limit: 0.5}}\nmemory: {{max: {256 + i}Mi}}",
        **{f"example.com/a{i}-{n}": "" for n in range(256 * 1024 // 20)},
    }


def both(doc: Callable[[int], str]) -> Callable[[int], dict[str, str]]:
    """The same kind of document as the pod's and as the container's."""
    return lambda i: {POD_KEY: doc(i), CTR_KEY: doc(i + 1)}


CASES: list[tuple[str, Callable[[int], dict[str, str]]]] = [
    ("typical", lambda i: {POD_KEY: f"cpu: {{limit: 0.5}}\nmemory: {{max: {256 + i}Mi}}"}),
    ("largest valid", both(largest_valid)),
    ("unknown keys", both(unknown_keys)),
    ("most values", both(most_values)),
    ("over the values", both(over_values)),
    ("deepest nesting", both(deepest)),
    ("over the bytes", both(over_bytes)),
    ("stray keys", stray_keys),
    ("over the keys", over_keys),
    ("other annotations", other_keys),
]
NOT_JUDGED = ("other annotations",)


def creates(plugin: SlaPlugin, pods: list[pb.PodSandbox]) -> tuple[list[float], str]:
    """CPU µs per create, one create per pod; and the first create's outcome."""
    samples, outcome = [], ""
    clock = time.process_time_ns
    for n, pod in enumerate(pods):
        ctr = make_container(pod, "work")
        ctr.id = f"hostile-{n:06d}"
        payload = pb.CreateContainerRequest(pod=pod, container=ctr).SerializeToString()
        start = clock()
        try:
            create(plugin, payload)
            result = "created"
        except Exception as exc:  # the RpcError the runtime is answered with
            result = f"refused: {str(exc)[:110]}"
        samples.append((clock() - start) / 1000)
        outcome = outcome or result
        plugin.remove_container(None, pb.Container(id=ctr.id))
    return samples, outcome


def p(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200, help="creates per case")
    parser.add_argument("--live", type=int, default=1000, help="containers registered")
    parser.add_argument("--show", action="store_true", help="print each case's first outcome")
    args = parser.parse_args()
    setup_logging("text", "info", stream=NullStream(), defer_decisions=True)
    plugin, _ = plugin_with(args.live)
    print(
        f"bounds: {MAX_BYTES} bytes and {MAX_VALUES} values per document, "
        f"{MAX_DEPTH} levels, {MAX_TOTAL} characters per pod; live containers: "
        f"{len(plugin.registry)}; {args.n} creates per case"
    )
    typical_pod = make_pod("typical", annotations={POD_KEY: SLA})
    creates(plugin, [typical_pod] * 50)  # warm-up
    replica = p(creates(plugin, [typical_pod] * args.n)[0], 0.5)
    new_pod = 0.0
    print(
        f"{'case':<30} {'bytes':>6} {'p50 us':>7} {'p99 us':>7} {'x new pod':>9} {'x replica':>9}"
    )
    worst = 0.0
    for name, make in CASES:
        for label, index in (("distinct", lambda n: n), ("same", lambda n: 0)):
            if name == "typical":
                label = "new pod" if label == "distinct" else "replica"
            pods = [
                make_pod(
                    f"{name[:5].replace(' ', '-')}-{label}-{n}", annotations=make(index(n) * 2)
                )
                for n in range(args.n)
            ]
            samples, outcome = creates(
                plugin, pods if label != "replica" else [typical_pod] * args.n
            )
            p50 = p(samples, 0.5)
            new_pod = new_pod or p50
            if name not in NOT_JUDGED:
                worst = max(worst, p50 / new_pod)
            size = sum(len(k) + len(v) for k, v in make(0).items())
            print(
                f"{name + ', ' + label:<30} {size:>6} {p50:>7.0f} {p(samples, 0.99):>7.0f} "
                f"{p50 / new_pod:>9.1f} {p50 / replica:>9.1f}"
            )
            if args.show:
                print(f"    {outcome}")
    met = worst <= TARGET_RATIO
    print(
        f"worst: {worst:.1f}x a typical pod's first create (target <= {TARGET_RATIO:g}x: "
        f"{'met' if met else 'MISSED'})"
    )
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
