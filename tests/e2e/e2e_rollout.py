"""Many pods at once through crictl, as the kubelet creates them during a rollout, and an
audit of what the node holds afterwards: every container's real cgroup values and GPUs
against the SLA its pod asked for.

A worker thread per concurrent pod runs `crictl runp`, `create` and `start` and records
each stage's wall time, or the stage that failed and the runtime's message. As the
kubelet does, a stage is tried again while containerd cannot be reached (it is being
restarted) and after the one failure a SIGKILLed containerd leaves behind (TRANSIENT);
any other failure is final: the tests look at what it left behind.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from tests.e2e.e2e_cgroup import CgroupValues, cgroup_v2_only, read_cgroup
from tests.e2e.e2e_gpu import NoGpuLeft, spec_gpus

STAGES = ("runp", "create", "start")
# Failures of a request that never reached containerd, which the kubelet's retry gets
# through: containerd down (no socket, or nobody on it) or still starting (1.7), and the
# snapshot directory a SIGKILL left under the native snapshotter's next id (the first
# snapshot after the restart fails "failed to rename: ... file exists" and removes it).
# A request cut off in flight is not retried: it may have been done (a second start of a
# started container fails "container is in CONTAINER_RUNNING state").
TRANSIENT = (
    "connect: connection refused",
    "connect: no such file or directory",
    "server is not initialized yet",
    "file exists",
)
RETRY_FOR = 60.0  # seconds a stage keeps being retried
APPLIED = "sla.nri.io/applied"
# No memory limit as read_cgroup reports it: v1 memory.limit_in_bytes, v2 "max".
UNLIMITED_MEMORY_V1 = 9223372036854771712


@dataclass
class PodRun:
    """One pod of a rollout: ids once made, each stage's seconds, or where it failed."""

    name: str
    annotations: dict[str, str]
    pod_id: str = ""
    container_id: str = ""
    failed_at: str = ""
    error: str = ""
    seconds: dict[str, float] = field(default_factory=dict)
    retries: int = 0

    @property
    def started(self) -> bool:
        return not self.failed_at


class Rollout:
    """`pods` (name, annotations) created by `workers` threads at once. `grants`: the
    kubelet's admission of a pod, its device grant (CRI ContainerConfig fields) or None;
    NoGpuLeft keeps the pod from being made (stage "admit")."""

    def __init__(
        self,
        cluster,
        pods: Iterable[tuple[str, dict[str, str]]],
        workers: int,
        grants: Callable[[str], dict | None] | None = None,
    ) -> None:
        self.cluster = cluster
        self.grants = grants
        self.runs = [PodRun(name, annotations) for name, annotations in pods]
        self.workers = workers
        self._done = 0
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._futures: list = []
        self.started_at = self.ended_at = 0.0

    def start(self) -> Rollout:
        self.started_at = time.monotonic()
        self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="rollout")
        self._futures = [self._pool.submit(self._run, r) for r in self.runs]
        return self

    def _run(self, run: PodRun) -> None:
        c = self.cluster
        try:
            try:
                grant = self.grants(run.name) if self.grants else None
            except NoGpuLeft as exc:
                run.failed_at, run.error = "admit", str(exc)
                return
            files = c.pod_files(run.name, run.annotations, grant=grant)
            steps: list[tuple[str, Callable[[], str]]] = [
                ("runp", lambda: c.run_sandbox(files)),
                ("create", lambda: c.create_container(run.pod_id, files)),
                ("start", lambda: c.crictl("start", run.container_id)),
            ]
            for stage, step in steps:
                t0 = time.monotonic()
                try:
                    out = self._retrying(run, step)
                except (c.Error, subprocess.TimeoutExpired) as exc:
                    run.failed_at, run.error = stage, str(exc)
                    return
                finally:
                    run.seconds[stage] = time.monotonic() - t0
                if stage == "runp":
                    run.pod_id = out
                elif stage == "create":
                    run.container_id = out
        finally:
            with self._lock:
                self._done += 1

    def _retrying(self, run: PodRun, step: Callable[[], str]) -> str:
        deadline = time.monotonic() + RETRY_FOR
        while True:
            try:
                return step()
            except self.cluster.Error as exc:
                if not any(t in str(exc) for t in TRANSIENT) or time.monotonic() > deadline:
                    raise
                run.retries += 1
                time.sleep(0.25)

    def finished(self) -> int:
        with self._lock:
            return self._done

    def wait_finished(self, count: int, timeout: float = 300.0) -> None:
        deadline = time.monotonic() + timeout
        while self.finished() < count:
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"rollout: {self.finished()}/{count} pods finished in {timeout}s"
                )
            time.sleep(0.05)

    def wait(self, timeout: float = 600.0) -> list[PodRun]:
        self.wait_finished(len(self.runs), timeout)
        assert self._pool is not None
        for f in self._futures:
            f.result()  # a bug in _run surfaces here
        self._pool.shutdown()
        self.ended_at = time.monotonic()
        return self.runs

    @property
    def wall_seconds(self) -> float:
        return self.ended_at - self.started_at

    def summary(self) -> str:
        failed: dict[str, int] = {}
        for r in self.runs:
            if r.failed_at:
                failed[r.failed_at] = failed.get(r.failed_at, 0) + 1
        ok = sum(r.started for r in self.runs)
        retried = sum(r.retries > 0 for r in self.runs)
        return (
            f"{len(self.runs)} pods by {self.workers} workers in "
            f"{self.wall_seconds:.1f}s: {ok} started, failed at {failed or 'none'}, "
            f"{retried} retried"
        )


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty list."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))
    return ordered[int(rank) - 1]


def stage_figures(runs: Iterable[PodRun], stage: str) -> str:
    xs = [r.seconds[stage] * 1000 for r in runs if stage in r.seconds]
    if not xs:
        return f"{stage}: no samples"
    return (
        f"{stage}: n={len(xs)} p50={percentile(xs, 50):.0f}ms "
        f"p99={percentile(xs, 99):.0f}ms mean={statistics.fmean(xs):.0f}ms"
    )


# -- what the node holds -------------------------------------------------------------------
@dataclass(frozen=True)
class NodeContainer:
    """A container as the runtime and the kernel see it now."""

    id: str
    pod_id: str
    pod_name: str
    state: str  # CONTAINER_RUNNING, CONTAINER_CREATED, CONTAINER_EXITED, ...
    spec_annotations: dict[str, str]
    gpus: tuple[str, ...]  # UUIDs of the GPU device nodes in its spec
    cgroups_path: str

    @property
    def enforced(self) -> bool:
        """nri-sla answered its CreateContainer (its record is in the spec)."""
        return APPLIED in self.spec_annotations

    def cgroup(self) -> CgroupValues:
        return read_cgroup(self.cgroups_path)


def node_containers(cluster, workers: int = 4) -> list[NodeContainer]:
    """Every container containerd knows (`crictl ps -a`), inspected."""
    pods = {
        p["id"]: p["metadata"]["name"]
        for p in json.loads(cluster.crictl("pods", "-o", "json"))["items"]
    }
    listed = json.loads(cluster.crictl("ps", "-a", "-o", "json"))["containers"]

    def inspect(c: dict) -> NodeContainer:
        info = json.loads(cluster.crictl("inspect", "-o", "json", c["id"]))
        spec = info.get("info", {}).get("runtimeSpec") or {}
        return NodeContainer(
            c["id"],
            c["podSandboxId"],
            pods.get(c["podSandboxId"], ""),
            c["state"],
            spec.get("annotations", {}),
            tuple(spec_gpus(spec)),
            spec.get("linux", {}).get("cgroupsPath", ""),
        )

    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(inspect, listed))


@dataclass(frozen=True)
class Expected:
    """What a pod's SLA puts into its container's cgroup (and how many GPUs)."""

    cpu_quota: int
    cpu_period: int
    memory_limit: int
    gpus: int = 0


@dataclass
class Audit:
    """Running containers sorted by whether nri-sla enforced them, and every way one of
    them is not what it should be."""

    enforced: list[NodeContainer] = field(default_factory=list)
    unenforced: list[NodeContainer] = field(default_factory=list)
    wrong: list[str] = field(default_factory=list)
    gpu_owners: dict[str, list[str]] = field(default_factory=dict)

    @property
    def gpus_held(self) -> int:
        return len(self.gpu_owners)

    def doubled(self) -> dict[str, list[str]]:
        return {g: ids for g, ids in self.gpu_owners.items() if len(ids) > 1}


def audit(containers: Iterable[NodeContainer], expected: dict[str, Expected]) -> Audit:
    """Check each running container of a pod named in `expected`: with nri-sla's record,
    the cgroup holds exactly its SLA; without one, nothing of the SLA is in force (no
    quota, no memory limit). Either way it can open exactly as many GPUs as it was
    granted (the kubelet's grant is applied by the runtime, plugin or not)."""
    result = Audit()
    v2 = cgroup_v2_only()
    for c in containers:
        want = expected.get(c.pod_name)
        if want is None or c.state != "CONTAINER_RUNNING":
            continue
        got = c.cgroup()
        have = (got.cpu_quota, got.cpu_period, got.memory_limit, len(c.gpus))
        for gpu in c.gpus:
            result.gpu_owners.setdefault(gpu, []).append(c.id)
        if c.enforced:
            result.enforced.append(c)
            should = (want.cpu_quota, want.cpu_period, want.memory_limit, want.gpus)
        else:
            result.unenforced.append(c)
            should = (-1, got.cpu_period, -1 if v2 else UNLIMITED_MEMORY_V1, want.gpus)
        if have != should:
            result.wrong.append(
                f"{c.pod_name} {c.id[:12]} enforced={c.enforced}: "
                f"quota/period/memory/gpus {have}, expected {should}"
            )
    return result


def sla_pods(
    count: int, prefix: str, gpu_every: int = 0
) -> tuple[list[tuple[str, dict[str, str]]], dict[str, Expected]]:
    """`count` pods named <prefix>000.., each with its own SLA (CPU limit 50m..450m at a
    100ms period, memory.max 64Mi + its number in MiB) so that a value landing in the
    wrong container shows; every `gpu_every`-th one also asks one GPU (of its grant).
    Returns the pods and what each one's cgroup must hold."""
    pods, expected = [], {}
    for i in range(count):
        millis, mib = 50 * (1 + i % 9), 64 + i
        sla = f"cpu: {{limit: {millis}m, period: 100ms}}\nmemory: {{max: {mib}Mi}}\n"
        gpus = 1 if gpu_every and i % gpu_every == 0 else 0
        if gpus:
            sla += "gpu: {count: 1, align: false}\n"
        name = f"{prefix}{i:03d}"
        pods.append((name, {"sla.nri.io/pod": sla}))
        expected[name] = Expected(millis * 100, 100_000, mib << 20, gpus)
    return pods, expected
