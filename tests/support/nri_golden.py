"""The recorded containerd NRI sessions (tests/data/golden) and the reference Go plugin
they were recorded with, for the NRI transport tests (tests/nri)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import yaml

from nri_plugin.nri import mux
from nri_plugin.nri.pb import nri_pb2 as pb
from nri_plugin.nri.stub import CreateResult
from nri_plugin.nri.ttrpc import Frame, FrameDecoder

REPO = Path(__file__).resolve().parents[2]
GOLDEN_DIR = REPO / "tests" / "data" / "golden"
GOLDEN_FILES = (
    "containerd-2.3.4.jsonl",
    "containerd-1.7.34.jsonl",
    "containerd-2.3.4-all-events.jsonl",
    "containerd-1.7.34-all-events.jsonl",
)


@dataclass
class Golden:
    name: str
    records: list[tuple[str, bytes]]  # (dir, bytes) in socket order

    def stream(self, direction: str) -> bytes:
        return b"".join(data for d, data in self.records if d == direction)

    def frames(self, direction: str) -> list[tuple[int, Frame]]:
        """Reassembled ttrpc frames of one direction, in order, with their conn."""
        decoder = mux.MuxDecoder()
        per_conn: dict[int, FrameDecoder] = {}
        out: list[tuple[int, Frame]] = []
        for data in (d for w, d in self.records if w == direction):
            for conn, piece in decoder.feed(data):
                for frame in per_conn.setdefault(conn, FrameDecoder()).feed(piece):
                    assert isinstance(frame, Frame)
                    out.append((conn, frame))
        assert not decoder.in_frame, f"{self.name} {direction}: truncated mux frame"
        assert all(not d.buffered for d in per_conn.values())
        return out


def load_golden(name: str) -> Golden:
    # Part of the repository: a missing recording fails the test, it is not skipped.
    path = GOLDEN_DIR / name
    records = []
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        records.append((rec["dir"], bytes.fromhex(rec["hex"])))
    return Golden(name, records)


class GoRefPlugin:
    """Behaves like the reference Go plugin of the recordings: its toy annotation schema
    `sla.nri.io/container.<name>` = {cpu: {quota-us, period-us}, memory: {max-bytes}}
    becomes an adjustment with annotation sla.nri.io/applied-by=goref."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def create_container(self, pod: pb.PodSandbox, ctr: pb.Container):
        self.calls.append(("create_container", ctr.name))
        text = pod.annotations.get(f"sla.nri.io/container.{ctr.name}")
        if text is None:
            return CreateResult()
        spec = yaml.safe_load(text)
        adj = pb.ContainerAdjustment()
        adj.annotations["sla.nri.io/applied-by"] = "goref"
        res = adj.linux.resources
        if "memory" in spec:
            res.memory.limit.value = spec["memory"]["max-bytes"]
        if "cpu" in spec:
            res.cpu.quota.value = spec["cpu"]["quota-us"]
            res.cpu.period.value = spec["cpu"]["period-us"]
        return CreateResult(adj)

    def stop_container(self, pod, ctr):
        self.calls.append(("stop_container", ctr.name))
        return None

    def remove_container(self, pod, ctr):
        self.calls.append(("remove_container", ctr.name))


class GoRefAllEvents(GoRefPlugin):
    """The -all-events variant: every pod and container event except updates."""

    def _note(self, name: str, *args) -> None:
        self.calls.append((name, args[-1].name))

    def run_pod_sandbox(self, pod):
        self._note("run_pod_sandbox", pod)

    def stop_pod_sandbox(self, pod):
        self._note("stop_pod_sandbox", pod)

    def remove_pod_sandbox(self, pod):
        self._note("remove_pod_sandbox", pod)

    def post_create_container(self, pod, ctr):
        self._note("post_create_container", pod, ctr)

    def start_container(self, pod, ctr):
        self._note("start_container", pod, ctr)

    def post_start_container(self, pod, ctr):
        self._note("post_start_container", pod, ctr)
