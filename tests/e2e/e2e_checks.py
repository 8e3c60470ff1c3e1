"""The fault tests' common verdicts: the node holds what its pods asked for, nri-sla's
account of it (log lines, gauges, counters) is exactly that, and no GPU is lost or open to
two containers."""

from __future__ import annotations

import re
from dataclasses import dataclass

from tests.e2e.e2e_gpu import GPUS, KINDS
from tests.e2e.e2e_rollout import Audit, Expected, audit, node_containers
from tests.e2e.e2e_service import GPU_UUIDS, gpu_sla, visible_gpus

SYNC = re.compile(
    r"synchronized: (\d+) pods, (\d+) containers, (\d+) allocations rebuilt, "
    r"(\d+) records ignored, (\d+) owners released, (\d+) created unenforced"
)
UNENFORCED_ID = re.compile(r"created unenforced.*\bcontainer=([0-9a-f]{64})\b")


@dataclass(frozen=True)
class SyncSummary:
    """nri-sla's one-line account of a Synchronize."""

    pods: int
    containers: int
    rebuilt: int
    ignored: int
    released: int
    unenforced: int

    @classmethod
    def parse(cls, line: str) -> SyncSummary:
        m = SYNC.search(line)
        if m is None:
            raise AssertionError(f"not a Synchronize summary: {line}")
        return cls(*(int(g) for g in m.groups()))


def syncs(process, count: int = 1, timeout: float = 60.0) -> list[SyncSummary]:
    """The first `count` Synchronize summaries of one plugin process (waits for them)."""
    lines = process.wait_output(SYNC.pattern, count=count, timeout=timeout)
    print("evidence: plugin log:", *lines, sep="\n  ")
    return [SyncSummary.parse(line) for line in lines]


def reported_unenforced(process) -> set[str]:
    """Ids of the containers a plugin process logged as "created unenforced"."""
    return {m[1] for line in process.output().splitlines() if (m := UNENFORCED_ID.search(line))}


def start_created(cluster) -> dict[str, str]:
    """Start what is still only created (a pod whose start was cut off), as the kubelet's
    next sync would; returns the ones whose start failed, with the runtime's message."""
    failed = {}
    for c in node_containers(cluster):
        if c.state == "CONTAINER_CREATED":
            try:
                cluster.crictl("start", c.id)
            except cluster.Error as exc:
                failed[c.id] = str(exc)
    return failed


def check_node(cluster, sla, expected: dict[str, Expected], reported: set[str]) -> Audit:
    """Every running container of `expected`'s pods holds its SLA in the kernel (nri-sla's
    record in its spec) or holds none of it and was `reported` as created unenforced, and
    nothing else was reported; no GPU is held twice, and the plugin's GPU gauge counts
    exactly the GPUs the containers hold."""
    containers = node_containers(cluster)
    result = audit(containers, expected)
    states: dict[str, int] = {}
    for c in containers:
        states[c.state] = states.get(c.state, 0) + 1
    print(
        f"evidence: node: {states}; running: {len(result.enforced)} enforced, "
        f"{len(result.unenforced)} unenforced; {result.gpus_held} GPUs held; "
        f"{len(reported)} reported created unenforced"
    )
    assert not result.wrong, "\n".join(result.wrong)
    assert not result.doubled(), result.doubled()
    assert {c.id for c in result.unenforced} <= reported, "unenforced and not reported"
    assert reported <= {c.id for c in containers if not c.enforced}, "reported but enforced"
    samples = sla.scrape()
    print(
        "evidence: metrics: nri_sla_gpus_in_use",
        samples.get("nri_sla_gpus_in_use"),
        "nri_sla_unenforced_containers_total",
        samples.get("nri_sla_unenforced_containers_total"),
    )
    assert samples.get("nri_sla_gpus_in_use") == result.gpus_held
    return result


def only_free_gpus_left(sla, held: set[str]) -> None:
    """The GPUs no live container holds, granted by the kubelet to one more pod, open for
    it alone, and nri-sla counts every GPU held once: nothing lost, nothing doubled."""
    free = set(GPU_UUIDS) - held
    if free:
        grant = sla.gpus.cdi_grant(KINDS[1], tuple(g.index for g in GPUS if g.uuid in free))
        got = visible_gpus(sla.cluster.run_pod("fill", gpu_sla(len(free)), grant=grant))
        assert set(got) == free
    sla.assert_gpus_counted(len(GPU_UUIDS))
