"""Fixtures for the end-to-end suite against a real containerd + runc + crictl.

The suite runs only when the binaries are supplied:

    NRI_SLA_CONTAINERD=/path/containerd   (1.7.x or 2.x)
    NRI_SLA_CRICTL=/path/crictl
    NRI_SLA_RUNC=/path/runc               (>= 1.2 for containerd 2.x)
    optional: NRI_SLA_CONTAINERD_SHIM, NRI_SLA_CTR (default: beside containerd),
              NRI_SLA_E2E_IMAGE_TAR (OCI archive; default: built from busybox-static),
              NRI_SLA_E2E_PLUGIN_ARGS (extra arguments for `nri-sla run`)

It also needs root and a writable cgroup hierarchy (v1 or v2). See docs/e2e.md.

CRI-O as the runtime (test_crio.py) instead: NRI_SLA_CRIO=/path/crio (1.34 or later),
NRI_SLA_CRICTL, NRI_SLA_RUNC; optional NRI_SLA_CONMON (default /usr/bin/conmon),
NRI_SLA_PINNS (default: beside crio).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.e2e.e2e_cluster import Binaries, Cluster, ClusterError
from tests.e2e.e2e_crio import ArchiveRegistry, CrioBinaries, CrioNode
from tests.e2e.e2e_image import ImageBuildError, build_image_archive

HERE = Path(__file__).parent
DEFAULT_IMAGE = "nri-e2e.local/busybox:1"
ENV_HELP = (
    "set NRI_SLA_CONTAINERD (containerd 1.7/2.x binary), NRI_SLA_CRICTL and "
    "NRI_SLA_RUNC (runc >= 1.2) to run the e2e suite; optional NRI_SLA_CONTAINERD_SHIM, "
    "NRI_SLA_CTR (default: beside containerd), NRI_SLA_E2E_IMAGE_TAR"
)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    # Keep each phase's report on the item so fixtures can dump logs after a failure.
    rep = yield
    setattr(item, f"rep_{rep.when}", rep)
    return rep


def _failed(request: pytest.FixtureRequest) -> bool:
    reps = (getattr(request.node, f"rep_{when}", None) for when in ("setup", "call"))
    return any(rep is not None and rep.failed for rep in reps)


@pytest.fixture(scope="session")
def e2e_bins() -> Binaries:
    env = os.environ
    need = ("NRI_SLA_CONTAINERD", "NRI_SLA_CRICTL", "NRI_SLA_RUNC")
    if not all(env.get(k) for k in need):
        pytest.skip(ENV_HELP)
    if os.geteuid() != 0:
        pytest.skip("the e2e suite runs containerd and runc: run it as root")
    containerd = Path(env["NRI_SLA_CONTAINERD"])
    bins = Binaries(
        containerd=containerd,
        shim=Path(
            env.get("NRI_SLA_CONTAINERD_SHIM") or containerd.with_name("containerd-shim-runc-v2")
        ),
        ctr=Path(env.get("NRI_SLA_CTR") or containerd.with_name("ctr")),
        crictl=Path(env["NRI_SLA_CRICTL"]),
        runc=Path(env["NRI_SLA_RUNC"]),
    )
    if missing := bins.missing():
        pytest.skip(f"not an executable file: {', '.join(missing)} ({ENV_HELP})")
    return bins


def _image_name(tar: Path) -> str:
    with tarfile.open(tar) as t:
        index = json.load(t.extractfile("index.json"))  # type: ignore[arg-type]
    for m in index.get("manifests", []):
        if name := m.get("annotations", {}).get("io.containerd.image.name"):
            return name
    raise ClusterError(
        f"{tar}: index.json names no image (annotation "
        "io.containerd.image.name); build it with tests/e2e/e2e_image.py"
    )


@pytest.fixture(scope="session")
def e2e_image_archive(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    if supplied := os.environ.get("NRI_SLA_E2E_IMAGE_TAR"):
        return Path(supplied), _image_name(Path(supplied))
    out = tmp_path_factory.mktemp("image") / "busybox-oci.tar"
    try:
        archive = build_image_archive(out, Path("/bin/busybox"), DEFAULT_IMAGE)
    except (ImageBuildError, OSError) as exc:
        pytest.skip(f"cannot build the e2e image: {exc}")
    return archive.path, archive.name


@contextlib.contextmanager
def _private_containerd(
    bins: Binaries, image: tuple[Path, str], request: pytest.FixtureRequest
) -> Iterator[Cluster]:
    # A short path under /tmp: unix socket paths are limited to 107 bytes.
    base = Path(tempfile.mkdtemp(prefix="nrie2e-", dir="/tmp"))
    with _running(
        Cluster(bins, base, image_tar=image[0], image=image[1]), "containerd", request
    ) as c:
        yield c


@contextlib.contextmanager
def _running(node, what: str, request: pytest.FixtureRequest) -> Iterator:
    """`node` (a Cluster or a CrioNode) prepared, started and given its image; its log's
    tail printed when the test failed, and its base dir gone afterwards."""
    try:
        node.prepare()
        node.start()
        node.import_image()
        yield node
    finally:
        if _failed(request):
            print(f"---- {what} log (tail) {node.log_path}\n{node.log_tail(80)}")
        problems = node.cleanup()
        if problems:
            print("---- cleanup problems\n" + "\n".join(problems))
        assert not node.base.exists(), f"cleanup left {node.base}"


@pytest.fixture
def cluster(
    e2e_bins: Binaries, e2e_image_archive: tuple[Path, str], request: pytest.FixtureRequest
) -> Iterator[Cluster]:
    with _private_containerd(e2e_bins, e2e_image_archive, request) as c:
        yield c


@pytest.fixture
def second_cluster(
    e2e_bins: Binaries, e2e_image_archive: tuple[Path, str], request: pytest.FixtureRequest
) -> Iterator[Cluster]:
    """Another private containerd beside `cluster` (own sockets, state, cgroup parent)."""
    with _private_containerd(e2e_bins, e2e_image_archive, request) as c:
        yield c


CRIO_HELP = (
    "set NRI_SLA_CRIO (a crio binary, 1.34 or later), NRI_SLA_CRICTL and "
    "NRI_SLA_RUNC to run the CRI-O e2e tests; optional NRI_SLA_CONMON (default "
    "/usr/bin/conmon), NRI_SLA_PINNS (default: beside crio)"
)


@pytest.fixture(scope="session")
def crio_bins() -> CrioBinaries:
    env = os.environ
    if not all(env.get(k) for k in ("NRI_SLA_CRIO", "NRI_SLA_CRICTL", "NRI_SLA_RUNC")):
        pytest.skip(CRIO_HELP)
    if os.geteuid() != 0:
        pytest.skip("the CRI-O e2e tests run crio and runc: run them as root")
    crio = Path(env["NRI_SLA_CRIO"])
    bins = CrioBinaries(
        crio=crio,
        conmon=Path(env.get("NRI_SLA_CONMON", "/usr/bin/conmon")),
        pinns=Path(env.get("NRI_SLA_PINNS") or crio.with_name("pinns")),
        crictl=Path(env["NRI_SLA_CRICTL"]),
        runc=Path(env["NRI_SLA_RUNC"]),
    )
    if missing := bins.missing():
        pytest.skip(f"not an executable file: {', '.join(missing)} ({CRIO_HELP})")
    return bins


@pytest.fixture
def crio(
    crio_bins: CrioBinaries, e2e_image_archive: tuple[Path, str], request: pytest.FixtureRequest
) -> Iterator[CrioNode]:
    """One private CRI-O, its image pulled from a registry serving the suite's archive."""
    base = Path(tempfile.mkdtemp(prefix="nrie2e-crio-", dir="/tmp"))
    with ArchiveRegistry(e2e_image_archive[0], "nri-e2e/busybox", "1") as registry:
        node = CrioNode(
            crio_bins, base, image_tar=e2e_image_archive[0], image=registry.image, registry=registry
        )  # type: ignore[arg-type]
        with _running(node, "crio", request) as c:
            yield c


@dataclass
class PluginProcess:
    argv: list[str]
    log: Path
    proc: subprocess.Popen | None = None
    lines_seen: list[str] = field(default_factory=list)

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def wait_output(self, pattern: str, count: int = 1, timeout: float = 30.0) -> list[str]:
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while True:
            hits = [ln for ln in self.output().splitlines() if rx.search(ln)]
            if len(hits) >= count:
                return hits
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(
                    f"plugin exited ({self.proc.returncode}) before "
                    f"{pattern!r}:\n{self.output()[-3000:]}"
                )
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"plugin output: {pattern!r} seen {len(hits)}/{count} "
                    f"times in {timeout}s:\n{self.output()[-3000:]}"
                )
            time.sleep(0.1)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)


@dataclass
class Plugins:
    """Starts plugin processes beside a cluster and stops them all at teardown."""

    logdir: Path
    started: list[PluginProcess] = field(default_factory=list)

    def start(self, argv: list[str], name: str) -> PluginProcess:
        p = PluginProcess(argv, self.logdir / f"{name}.log")
        with p.log.open("a") as log:
            p.proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        self.started.append(p)
        return p

    def start_probe(
        self, cluster: Cluster, name: str = "e2e-probe", idx: str = "10", sabotage: bool = False
    ) -> PluginProcess:
        argv = [
            sys.executable,
            str(HERE / "probe_plugin.py"),
            "--socket",
            str(cluster.nri_sock),
            "--name",
            name,
            "--idx",
            idx,
        ]
        return self.start(argv + ["--sabotage"] * sabotage, name)


@pytest.fixture
def plugins(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Plugins]:
    ps = Plugins(tmp_path)
    try:
        yield ps
    finally:
        for p in ps.started:
            p.stop()
            if _failed(request):
                print(f"---- plugin log {p.log} ({shlex.join(p.argv)})\n{p.output()[-4000:]}")


@pytest.fixture(scope="session")
def sla_plugin_argv() -> list[str]:
    """`nri-sla run` as this checkout installs it; skipped until the command exists."""
    base = [sys.executable, "-m", "nri_plugin.cli", "run"]
    r = subprocess.run([*base, "--help"], capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        pytest.skip(
            "`nri-sla run --help` fails, so the SLA plugin cannot be started: "
            + (r.stderr.strip().splitlines() or ["no output"])[-1]
        )
    return base + shlex.split(os.environ.get("NRI_SLA_E2E_PLUGIN_ARGS", ""))
