"""Guest-side fixtures of the systemd guest: systemd is PID 1, the root is a writable
overlay of the host's, and the Debian package the host built waits in the I/O share.

The tests here run only inside that guest (tests/vm/test_systemd_guest.py boots it; the
harness sets NRI_SLA_VM_INIT=systemd), where installing a package, starting units and
reloading systemd harm nothing; elsewhere they skip with the reason. What they share:

* `package`: the .deb installed with `dpkg -i` (maintainer scripts against the running
  systemd); its unit file and the sandbox settings of its [Service] section;
* `nri_runtime`: the project's NRI runtime simulator (nri_plugin.simulated.runtime) on
  its own event loop thread, listening where the packaged config points nri-sla;
* `kube_bundle`: an OCI bundle run by runc with `--systemd-cgroup`, for containers laid
  out the way kubelet and containerd lay them out with the systemd cgroup driver
  (cgroupsPath `kubepods-burstable-pod<uid>.slice:cri-containerd:<id>`: runc asks systemd
  for the transient unit `cri-containerd-<id>.scope` in that slice).
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib.util
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Coroutine, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
CGROUP_ROOT = Path("/sys/fs/cgroup")
UNIT_NAME = "nri-sla.service"
# [Service] keys of the unit that say how it runs rather than what it may do: everything
# else there is its sandbox, and is what a sandboxed run must get.
LIFECYCLE_KEYS = frozenset(
    {
        "Type",
        "NotifyAccess",
        "WatchdogSec",
        "ExecStart",
        "Restart",
        "RestartSec",
        "TimeoutStopSec",
        "TimeoutStartSec",
    }
)


def _load(key: str, path: Path):
    """A helper module by file path, under the name the other conftests load it by
    (test modules and conftests cannot import each other with --import-mode=importlib)."""
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(key, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[key] = module
        spec.loader.exec_module(module)
    return sys.modules[key]


def _harness():
    return _load("nri_sla_vm_harness", HERE.parent / "harness.py")


def systemd_guest_skip_reason() -> str | None:
    """Why the systemd guest tests cannot run here, or None if they can."""
    h = _harness()
    if os.environ.get(h.GUEST_ENV_FLAG) != "1" or os.environ.get(h.GUEST_INIT_ENV) != h.SYSTEMD:
        return (
            "systemd guest test: runs inside the qemu guest with systemd as PID 1 booted "
            "by tests/vm/test_systemd_guest.py"
        )
    if Path("/proc/1/comm").read_text().strip() != "systemd":
        return "systemd guest test: PID 1 is not systemd"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reason = systemd_guest_skip_reason()
    for item in items:
        if HERE not in Path(item.path).resolve().parents:
            continue
        item.add_marker(pytest.mark.vm)
        if reason:
            item.add_marker(pytest.mark.skip(reason=reason))


# --------------------------------------------------------------- systemd


def run(argv: list[str], timeout: float = 120, **kw: Any) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kw)


def unit_properties(unit: str, *names: str) -> dict[str, str]:
    """`systemctl show` of the named properties (all of them when none is named)."""
    argv = ["systemctl", "show", unit, *(f"--property={n}" for n in names)]
    out = run(argv).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def journal(unit: str) -> str:
    return run(["journalctl", "-u", unit, "-o", "short-monotonic", "--no-pager"]).stdout


def wait_for(what: str, probe, timeout: float = 120, interval: float = 0.5, unit: str = ""):
    """Poll probe() until it returns something true; that value. On a timeout the
    message carries `unit`'s journal."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            log = f"\n--- journalctl -u {unit}\n{journal(unit)[-4000:]}" if unit else ""
            raise AssertionError(f"{what}: not within {timeout:.0f} s{log}")
        time.sleep(interval)


@pytest.fixture(scope="session")
def systemd() -> SimpleNamespace:
    """The helpers above, for test modules (which cannot import this conftest)."""
    return SimpleNamespace(
        run=run,
        unit_properties=unit_properties,
        wait_for=wait_for,
        journal=journal,
        kube_bundles=lambda directory: KubeBundles(directory),
    )


@dataclasses.dataclass(frozen=True)
class InstalledPackage:
    deb: Path
    unit_file: Path
    service: dict[str, list[str]]  # the unit file's [Service] section
    install_seconds: float

    def sandbox(self) -> list[tuple[str, str]]:
        """(key, value) of every [Service] setting but the life-cycle ones."""
        return [
            (k, v) for k, values in self.service.items() if k not in LIFECYCLE_KEYS for v in values
        ]


@pytest.fixture(scope="session")
def package() -> InstalledPackage:
    """The Debian package the host built (`make deb`'s build.sh), installed with dpkg -i
    into the guest's root: the real package database, maintainer scripts and systemd."""
    deb = Path(os.environ.get(_harness().GUEST_DEB_ENV, ""))
    if not deb.is_file():
        pytest.skip(f"no Debian package in the guest ({_harness().GUEST_DEB_ENV}={deb})")
    started = time.monotonic()
    res = run(["dpkg", "-i", str(deb)], timeout=300)
    seconds = time.monotonic() - started
    assert res.returncode == 0, res.stdout + res.stderr
    print(f"dpkg -i {deb.name}: {seconds:.1f} s")
    unit_file = Path("/lib/systemd/system") / UNIT_NAME
    tools = _load("nri_sla_package_tools", REPO / "tests" / "packaging" / "package_tools.py")
    return InstalledPackage(deb, unit_file, tools.parse_unit(unit_file)["Service"], seconds)


# --------------------------------------------------------------- the NRI runtime


class RuntimeThread:
    """The runtime simulator on an event loop of its own thread, so that tests (plain
    functions) can drive it while systemd runs the plugin as a service."""

    def __init__(self, socket_path: str) -> None:
        from nri_plugin.simulated.runtime import RuntimeSimulator, SimulatorOptions

        # Emulated (TCG) machine: a first CreateContainer that imports the SLA parser can
        # take seconds; containerd's 2 s default would drop the plugin.
        options = SimulatorOptions(request_timeout=60, registration_timeout=60)
        self.simulator = RuntimeSimulator(socket_path, options)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.session = None

    def call(self, coro: Coroutine, timeout: float = 120) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def listen(self) -> None:
        Path(self.simulator.socket_path).parent.mkdir(parents=True, exist_ok=True)
        self.call(self.simulator.start())

    def accept(self, timeout: float = 120):
        self.session = self.call(self.simulator.accept(timeout), timeout + 10)
        return self.session

    def close(self) -> None:
        self.call(self.simulator.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)


@pytest.fixture(scope="module")
def nri_runtime() -> Iterator[RuntimeThread]:
    """Not yet listening: the test decides when the runtime comes up (listen()). Gone with
    the module, before another module's real containerd takes the socket."""
    from nri_plugin.config.values import NodeConfig

    runtime = RuntimeThread(NodeConfig().nri.socket)
    try:
        yield runtime
    finally:
        runtime.close()


# --------------------------------------------------------------- kubelet-shaped containers


@dataclasses.dataclass(frozen=True)
class KubeContainer:
    """A container runc started in a kubelet-style pod slice (systemd cgroup driver)."""

    id: str
    cgroups_path: str  # kubepods-burstable-pod<uid>.slice:cri-containerd:<id>
    scope: str  # cri-containerd-<id>.scope
    cgroup: Path  # its directory, as systemd reports it (ControlGroup=)

    def read(self, name: str) -> str:
        return (self.cgroup / name).read_text().strip()

    def values(self, names: list[str]) -> dict[str, str]:
        values = {n: self.read(n) for n in names}
        print(f"evidence: {self.cgroup}: {values}")
        return values


class KubeBundles:
    """Busybox containers under `runc --systemd-cgroup`, deleted at teardown. Pods and
    containers are the runtime simulator's messages for the systemd driver (make_pod,
    make_container): the slice, scope and ids containerd would use."""

    def __init__(self, directory: Path) -> None:
        bundles = _load("nri_sla_vm_oci_bundle", HERE.parent / "oci_bundle.py")
        self.bundle = bundles.make_busybox_bundle(directory, ("--systemd-cgroup",))
        self.started: list[str] = []

    @staticmethod
    def pod_container(name: str, pod_annotations: dict[str, str] | None = None):
        """(PodSandbox, Container) of a new burstable pod `name-<random>` with one
        container "app": cgroupsPath kubepods-burstable-pod<uid>.slice:cri-containerd:<id>."""
        from nri_plugin.simulated.runtime import make_container, make_pod

        pod = make_pod(
            f"{name}-{uuid.uuid4().hex[:8]}", cgroup_driver="systemd", annotations=pod_annotations
        )
        return pod, make_container(pod, "app")

    def start(
        self,
        ctr,
        resources: dict | None = None,
        annotations: dict[str, str] | None = None,
        hooks: dict | None = None,
    ) -> tuple[Any, KubeContainer | None]:
        """Start `sleep` as container `ctr` (a simulator Container) in its scope;
        (runc's result, the container, or None when runc failed)."""
        path = ctr.linux.cgroups_path
        config = self.bundle.config(["/bin/sleep", "3600"], resources or {}, path)
        config["annotations"] = annotations or {}
        if hooks:
            config["hooks"] = hooks
        result = self.bundle.start(ctr.id, config)
        if result.rc != 0:
            return result, None
        self.started.append(ctr.id)
        scope = f"cri-containerd-{ctr.id}.scope"
        group = unit_properties(scope, "ControlGroup")["ControlGroup"]
        return result, KubeContainer(ctr.id, path, scope, CGROUP_ROOT / group.lstrip("/"))

    def pid(self, container: KubeContainer) -> int:
        return self.bundle.pid(container.id)

    def delete_all(self) -> None:
        for cid in self.started:
            self.bundle.delete(cid)


@pytest.fixture
def kube_bundle(tmp_path: Path) -> Iterator[KubeBundles]:
    bundles = KubeBundles(tmp_path / "bundle")
    try:
        yield bundles
    finally:
        bundles.delete_all()


@pytest.fixture(scope="session")
def e2e_image():
    """tests/e2e/e2e_image.py: the offline busybox OCI image of the e2e suite."""
    return _load("nri_sla_e2e_image", REPO / "tests" / "e2e" / "e2e_image.py")


@pytest.fixture(scope="session")
def second_disk() -> str:
    """MAJ:MIN of /dev/vdb, the systemd guest's second blank disk: an SLA with io.max on
    two devices is what the plugin writes directly (NRI's `unified` carries one)."""
    dev = Path("/sys/block/vdb/dev")
    if not dev.exists():
        pytest.skip("no /dev/vdb: the harness attaches two virtio disks to the systemd guest")
    return dev.read_text().strip()


@pytest.fixture(scope="session")
def first_disk() -> str:
    dev = Path("/sys/block/vda/dev")
    if not dev.exists():
        pytest.skip("no /dev/vda: the harness attaches a raw virtio disk (-drive if=virtio)")
    return dev.read_text().strip()
