"""Host side of the qemu guests: boot each kind once per session, run its guest tests in
it, and hand each guest test's result to one outer test (parametrized by guest node id).
The guests the selected tests use boot at the same time, each in a thread of its own, when
the first outer test needs one (boots.py); each outer test waits for its own guest.

Two kinds of guest, each with its directory of guest tests (see harness.py):
* tests/vm/guest/: busybox as init, the host root read-only, cgroup v2 set up by hand;
  outer test tests/vm/test_cgroup_v2_guest.py::test_guest[<node id>];
* tests/vm/systemd_guest/: systemd as PID 1 on a writable overlay of the host root, the
  Debian package built here and installed there; outer test
  tests/vm/test_systemd_guest.py::test_systemd_guest[<node id>].
The list of guest tests comes from a `pytest --collect-only` of the directory on the host,
so adding a guest test needs no change here. Inside a guest this conftest also records
every test's result in the I/O share (results.json), where the outer tests read it.
See docs/testing-cgroup-v2.md.
"""

from __future__ import annotations

import compileall
import dataclasses
import functools
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
COLLECTION_ERROR = "<guest collection error>"
TIMEOUT_ENV = "NRI_SLA_VM_TIMEOUT"
HOST_OPT_IN = "NRI_SLA_CGROUP2_HOST"
# The containerd e2e of the systemd guest (tests/vm/systemd_guest/test_containerd_*.py):
# the same variables as tests/e2e, handed into the guest; their binaries' directories are
# made visible there.
E2E_ENV = (
    "NRI_SLA_CONTAINERD",
    "NRI_SLA_CRICTL",
    "NRI_SLA_RUNC",
    "NRI_SLA_CONTAINERD_SHIM",
    "NRI_SLA_CTR",
)


def _vm_module(name: str):
    """tests/vm/<name>.py, loaded once under the name every tests/vm conftest uses for it
    (test modules and conftests cannot import each other with --import-mode=importlib)."""
    key = f"nri_sla_vm_{name}"
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(key, HERE / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[key] = module
        spec.loader.exec_module(module)
    return sys.modules[key]


def _harness():
    return _vm_module("harness")


@pytest.fixture(scope="session")
def vm_harness():
    return _harness()


@pytest.fixture(scope="session")
def vm_boots():
    return _vm_module("boots")


def in_guest() -> bool:
    return os.environ.get(_harness().GUEST_ENV_FLAG) == "1"


@dataclasses.dataclass
class GuestSuite:
    """One kind of guest (harness.GUEST_KINDS) as this session sees it: the collected
    node ids, a collection error, the run summary."""

    param: str  # the outer test's parameter: the guest node id
    kind: Any  # harness.GuestKind
    fixture: str  # the session fixture that boots it and hands its run to the outer tests
    ids: list[str] = dataclasses.field(default_factory=list)
    collection_error: str | None = None
    summary: str | None = None

    @property
    def directory(self) -> Path:
        return REPO / self.kind.tests


SUITES = {
    s.param: s
    for s in (
        GuestSuite("guest_nodeid", _harness().GUEST_KINDS["busybox"], "guest_run"),
        GuestSuite("systemd_nodeid", _harness().GUEST_KINDS["systemd"], "systemd_guest_run"),
    )
}


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """On the host, a run over tests/ does not collect the guest tests a second time
    (each already appears as an outer test). Naming a guest directory explicitly still
    collects its tests (they then skip with the reason), and so do the guests and a host
    that opted in with NRI_SLA_CGROUP2_HOST=1."""
    dirs = {s.directory for s in SUITES.values()}
    if collection_path not in dirs or in_guest() or os.environ.get(HOST_OPT_IN) == "1":
        return None
    base = config.invocation_params.dir
    for arg in config.args:
        named = (base / arg.split("::")[0]).resolve()
        if named == collection_path or collection_path in named.parents:
            return None
    return True


def collect_guest_nodeids(directory: Path) -> tuple[list[str], str | None]:
    """Node ids of the guest tests in `directory` (relative to the repo), and an error
    text if any."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
            str(directory.relative_to(REPO)),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    ids = [line.strip() for line in proc.stdout.splitlines() if "::" in line]
    if proc.returncode != 0:
        return ids, proc.stdout + proc.stderr
    return ids, None


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    for param, suite in SUITES.items():
        if param not in metafunc.fixturenames:
            continue
        if in_guest():  # the outer tests never run inside a guest (no nested qemu)
            metafunc.parametrize(param, ["<inside guest>"])
        elif "not vm" in (metafunc.config.getoption("markexpr", "") or ""):
            # -m "not vm" deselects these anyway: spare the collection subprocess.
            metafunc.parametrize(param, ["<deselected>"])
        else:
            ids, suite.collection_error = collect_guest_nodeids(suite.directory)
            suite.ids = list(ids)
            if suite.collection_error is not None:
                ids.append(COLLECTION_ERROR)
            # The node id itself is the readable test id: test_guest[tests/vm/guest/x.py::t].
            metafunc.parametrize(param, ids, ids=ids)


@dataclasses.dataclass
class BootContext:
    """What every guest boot of the session shares: the session's request, a temporary
    directory maker safe to call from the boot threads, the event that kills the guests
    when the session ends, and how many guests boot at once."""

    request: pytest.FixtureRequest
    tmp_path_factory: pytest.TempPathFactory
    cancel: threading.Event
    guests: int
    _mktemp_lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)

    def mktemp(self, name: str) -> Path:
        with self._mktemp_lock:
            return self.tmp_path_factory.mktemp(name)

    def cpus(self, kind: Any) -> Any:  # harness.GuestKind -> harness.GuestCpus
        """The guest's vCPUs: the host's cores shared out between the guests booting."""
        h = _harness()
        return h.guest_cpus(kind, max(1, h.host_cores() // self.guests))


def _boot(
    ctx: BootContext,
    suite: GuestSuite,
    prepare: Callable[[Path], dict[str, str]] | None = None,
    extra_keep: tuple[str, ...] = (),
):
    """Boot `suite`'s guest once and run its selected tests in it (a harness.GuestRun).

    prepare(io_dir) puts files into the I/O share before the boot and returns variables
    for the guest command's environment.
    """
    h = _harness()
    try:
        tools = h.find_tools()
    except h.VmUnavailable as exc:
        pytest.skip(f"{suite.kind.label} unavailable: {exc}")
    selected = sorted(
        {
            item.callspec.params[suite.param]
            for item in ctx.request.session.items
            if hasattr(item, "callspec") and suite.param in item.callspec.params
        }
        - {COLLECTION_ERROR}
    )
    # All (or none) selected: name the directory (short command line, same tests).
    whole = not selected or set(selected) >= set(suite.ids)
    args = [str(suite.directory.relative_to(REPO))] if whole else selected
    timeout = float(os.environ.get(TIMEOUT_ENV, suite.kind.timeout))
    script = h.pytest_script(
        REPO,
        Path(sys.executable),
        args,
        per_test_timeout=min(suite.kind.per_test_timeout, timeout / 2),
    )
    earlier = ""
    for attempt in (1, 2):
        work = ctx.mktemp(suite.kind.label.replace(" ", "-"))
        env = prepare(work / "io") if prepare else {}
        try:
            run = h.run_in_guest(
                script,
                work,
                timeout=timeout,
                tools=tools,
                keep=h.guest_keep(REPO) + extra_keep,
                init=suite.kind.init,
                env=env,
                disks=suite.kind.disks,
                cpus=ctx.cpus(suite.kind),
                cancel=ctx.cancel,
            )
        except h.VmUnavailable as exc:  # e.g. the kernel lacks a module the guest needs
            pytest.skip(f"{suite.kind.label} unavailable: {exc}")
        except h.VmError as exc:
            failure = f"{suite.kind.label} failed to boot: {exc}{earlier}"
        else:
            failure = None
        if failure:  # outside the except block: no chained traceback in the report
            pytest.fail(failure, pytrace=False)
        # A hanging test fails at the per-test timeout and the run still finishes; a run
        # that never finishes is the emulated machine stalling (TCG on a busy host:
        # "soft lockup", "rcu ... starved" on the console). Boot once more for that.
        if run.error is None or attempt == 2:
            break
        earlier = f"; first attempt: {run.error}"
    boot = f"{run.boot_seconds:.1f} s" if run.boot_seconds is not None else "?"
    suite.summary = (
        f"{suite.kind.label} ({tools.kernel.name}): boot {boot}, "
        f"total {run.total_seconds:.1f} s, guest pytest rc {run.rc}, "
        f"logs in {work}" + (f"; {run.error}" if run.error else "") + earlier
    )
    return run


def _boot_busybox(ctx: BootContext) -> Any:
    """The busybox cgroup v2 guest's run of the selected tests/vm/guest tests."""
    return _boot(ctx, SUITES["guest_nodeid"])


def _package_tools():
    key = "nri_sla_package_tools"  # the name tests/packaging/conftest.py loads it by
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            key, REPO / "tests" / "packaging" / "package_tools.py"
        )
        module = importlib.util.module_from_spec(spec)
        sys.modules[key] = module
        spec.loader.exec_module(module)
    return sys.modules[key]


def _e2e_binaries() -> tuple[dict[str, str], tuple[str, ...]]:
    """The containerd e2e variables that are set, and the directories of their binaries
    (resolved: /tmp is a fresh tmpfs in the guest, these are bound back onto it)."""
    env = {k: os.environ[k] for k in E2E_ENV if os.environ.get(k)}
    dirs = {str(Path(v).resolve().parent) for v in env.values()}
    dirs |= {str(Path(v).parent) for v in env.values()}
    return env, tuple(sorted(d for d in dirs if Path(d).is_dir()))


def _boot_systemd(ctx: BootContext) -> Any:
    """The systemd guest's run of the selected tests/vm/systemd_guest tests, with the
    Debian package built here (`make deb`'s build.sh) in its I/O share."""
    if shutil.which("dpkg-deb") is None:
        pytest.skip(
            "the systemd guest installs the Debian package: building it needs "
            "dpkg-deb (apt-get install dpkg-dev)"
        )
    tools = _package_tools()
    deb_dir = ctx.mktemp("deb")
    try:
        deb = tools.build_deb(deb_dir, sys.executable)
    except tools.DebUnavailable as exc:
        pytest.skip(f"systemd guest: {exc}")
    h = _harness()
    e2e_env, e2e_dirs = _e2e_binaries()

    def prepare(io_dir: Path) -> dict[str, str]:
        io_dir.mkdir(parents=True, exist_ok=True)
        shutil.copy2(deb, io_dir / deb.name)
        return {**e2e_env, h.GUEST_DEB_ENV: f"{h.GUEST_IO_DIR}/{deb.name}"}

    return _boot(ctx, SUITES["systemd_nodeid"], prepare, e2e_dirs)


BOOTERS: dict[str, Callable[[BootContext], Any]] = {
    "guest_nodeid": _boot_busybox,
    "systemd_nodeid": _boot_systemd,
}


def compile_for_guests() -> None:
    """Byte-compile nri_plugin here, natively, before the guests boot. A guest sees the
    tree read-only and keeps nothing it compiles, so without these .pyc files (a host
    running with PYTHONDONTWRITEBYTECODE=1 never writes them) every Python process in a
    guest, each hook run included, compiles every nri_plugin module it imports: seconds
    per process under TCG. Up-to-date files are left alone."""
    compileall.compile_dir(REPO / "nri_plugin", quiet=1)


def _selected_guests(session: pytest.Session) -> list[str]:
    """The guests whose run some selected test uses (directly or through another fixture)."""
    return [
        param
        for param, suite in SUITES.items()
        if any(suite.fixture in getattr(item, "fixturenames", ()) for item in session.items)
    ]


@pytest.fixture(scope="session")
def guest_boots(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """Every guest the session's tests use, started together when the first of them needs
    one (each with its share of the host's cores: see BootContext.cpus)."""
    if in_guest():
        pytest.skip("already inside a qemu guest")
    params = _selected_guests(request.session)
    if params:
        compile_for_guests()
    ctx = BootContext(request, tmp_path_factory, threading.Event(), max(1, len(params)))
    boots = _vm_module("boots").GuestBoots(
        {param: functools.partial(boot, ctx) for param, boot in BOOTERS.items()}, params, ctx.cancel
    )
    yield boots
    boots.stop()


@pytest.fixture(scope="session")
def guest_run(guest_boots):
    """The busybox cgroup v2 guest's run of the selected tests/vm/guest tests."""
    return guest_boots.wait("guest_nodeid")


@pytest.fixture(scope="session")
def systemd_guest_run(guest_boots):
    """The systemd guest's run of the selected tests/vm/systemd_guest tests, with the
    Debian package built here in its I/O share."""
    return guest_boots.wait("systemd_nodeid")


def pytest_terminal_summary(terminalreporter) -> None:
    for suite in SUITES.values():
        if suite.summary:
            terminalreporter.write_line(suite.summary)


def _tail(text: str, lines: int = 40) -> str:
    return "\n".join(text.splitlines()[-lines:])


def report_guest_test(suite: GuestSuite, nodeid: str, run) -> None:
    """Pass, skip or fail as guest test `nodeid` did in `run`."""
    if nodeid == COLLECTION_ERROR:
        pytest.fail(
            f"collecting {suite.directory.relative_to(REPO)} failed:\n{suite.collection_error}",
            pytrace=False,
        )
    result = _harness().load_results(run.io_dir).get(nodeid)
    if result is None:
        why = run.error or f"guest pytest rc {run.rc}"
        pytest.fail(
            f"guest test {nodeid} reported no result ({why})\n"
            f"--- guest pytest output (tail)\n{_tail(run.output)}\n"
            f"--- guest console (tail)\n{_tail(run.console)}",
            pytrace=False,
        )
    if result["outcome"] == "skipped":
        pytest.skip(f"in the guest: {result['longrepr']}")
    if result["outcome"] != "passed":
        pytest.fail(
            f"in the guest ({result['outcome']}):\n{result['longrepr']}\n{result['sections']}",
            pytrace=False,
        )


def report_guest_pytest(run) -> None:
    """rc 0: all passed; 1: some failed (reported by the per-test outer tests). Anything
    else means the guest pytest itself broke (usage error, internal error, nothing
    collected)."""
    if run.rc is None:
        pytest.fail(
            f"{run.error}\n--- guest pytest output (tail)\n{_tail(run.output)}\n"
            f"--- guest console (tail)\n{_tail(run.console)}",
            pytrace=False,
        )
    assert run.rc in (0, 1), f"guest pytest exited {run.rc}\n{_tail(run.output, 80)}"
    assert run.boot_seconds is not None


@pytest.fixture(scope="session")
def guest_report() -> SimpleNamespace:
    """The outer tests' verdicts (test modules cannot import this conftest):
    .test(param, nodeid, run) and .pytest(run)."""
    return SimpleNamespace(
        test=lambda param, nodeid, run: report_guest_test(SUITES[param], nodeid, run),
        pytest=report_guest_pytest,
    )


# --------------------------------------------------------------- inside a guest: results

_results: dict[str, dict[str, Any]] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Fold setup/call/teardown into one result per test, for the outer host test."""
    entry = _results.setdefault(
        report.nodeid, {"outcome": "passed", "longrepr": "", "sections": "", "duration": 0.0}
    )
    entry["duration"] += report.duration
    if report.outcome == "failed":
        entry["outcome"] = "failed" if report.when == "call" else "error"
        entry["longrepr"] += f"[{report.when}] {report.longreprtext}\n"
    elif report.outcome == "skipped" and entry["outcome"] == "passed":
        entry["outcome"] = "skipped"
        longrepr = report.longrepr
        entry["longrepr"] = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    if report.when in ("call", "teardown") or report.outcome != "passed":
        entry["sections"] = "\n".join(f"--- {title}\n{text}" for title, text in report.sections)
    if report.when == "teardown":
        # Written after every test: if the guest dies or times out mid-run, the tests that
        # finished still report their own results on the host.
        _write_results()


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.failed:
        _results[report.nodeid] = {
            "outcome": "error",
            "longrepr": report.longreprtext,
            "sections": "",
            "duration": 0.0,
        }


def _write_results() -> None:
    h = _harness()
    io_dir = Path(h.GUEST_IO_DIR)
    if in_guest() and io_dir.is_dir():
        tmp = io_dir / "results.json.tmp"
        tmp.write_text(json.dumps(_results, indent=1))
        tmp.replace(io_dir / "results.json")


def pytest_sessionfinish(session: pytest.Session) -> None:
    _write_results()
