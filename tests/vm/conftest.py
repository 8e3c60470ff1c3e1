"""Host side of the cgroup v2 guest: boot it once per session, run the guest tests in it,
and hand each guest test's result to one outer test (parametrized by guest node id).

The guest tests live in tests/vm/guest/; the list of them comes from a
`pytest --collect-only` of that directory on the host, so adding a guest test needs no
change here. See docs/testing-cgroup-v2.md.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
GUEST_DIR = HERE / "guest"
COLLECTION_ERROR = "<guest collection error>"
TIMEOUT_ENV = "NRI_SLA_VM_TIMEOUT"
HOST_OPT_IN = "NRI_SLA_CGROUP2_HOST"


def _harness():
    name = "nri_sla_vm_harness"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, HERE / "harness.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


@pytest.fixture(scope="session")
def vm_harness():
    return _harness()


def in_guest() -> bool:
    return os.environ.get(_harness().GUEST_ENV_FLAG) == "1"


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """On the host, a run over tests/ does not collect the guest tests a second time
    (each already appears as test_guest[<node id>]). Naming tests/vm/guest explicitly still
    collects them (they then skip with the reason), and so do the guest and a host that
    opted in with NRI_SLA_CGROUP2_HOST=1."""
    if collection_path != GUEST_DIR or in_guest() or os.environ.get(HOST_OPT_IN) == "1":
        return None
    base = config.invocation_params.dir
    for arg in config.args:
        named = (base / arg.split("::")[0]).resolve()
        if named == GUEST_DIR or GUEST_DIR in named.parents:
            return None
    return True


def collect_guest_nodeids() -> tuple[list[str], str | None]:
    """Node ids of the guest tests (relative to the repo), and an error text if any."""
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
         str(GUEST_DIR.relative_to(REPO))],
        cwd=REPO, capture_output=True, text=True, timeout=120)
    ids = [line.strip() for line in proc.stdout.splitlines() if "::" in line]
    if proc.returncode != 0:
        return ids, proc.stdout + proc.stderr
    return ids, None


_collection_error: str | None = None
_all_ids: list[str] = []


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    global _collection_error, _all_ids
    if "guest_nodeid" not in metafunc.fixturenames:
        return
    if in_guest():  # the outer tests never run inside the guest (no nested qemu)
        metafunc.parametrize("guest_nodeid", ["<inside guest>"])
        return
    if "not vm" in (metafunc.config.getoption("markexpr", "") or ""):
        # -m "not vm" deselects these anyway: spare the collection subprocess.
        metafunc.parametrize("guest_nodeid", ["<deselected>"])
        return
    ids, _collection_error = collect_guest_nodeids()
    _all_ids = list(ids)
    if _collection_error is not None:
        ids.append(COLLECTION_ERROR)
    # The node id itself is the readable test id: test_guest[tests/vm/guest/x.py::t].
    metafunc.parametrize("guest_nodeid", ids, ids=ids)


_run_summary: str | None = None


@pytest.fixture(scope="session")
def guest_run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """Boot the guest once and run the selected guest tests in it (a harness.GuestRun)."""
    global _run_summary
    h = _harness()
    if in_guest():
        pytest.skip("already inside the cgroup v2 guest")
    try:
        tools = h.find_tools()
    except h.VmUnavailable as exc:
        pytest.skip(f"cgroup v2 guest unavailable: {exc}")
    selected = sorted({
        item.callspec.params["guest_nodeid"] for item in request.session.items
        if hasattr(item, "callspec") and "guest_nodeid" in item.callspec.params
    } - {COLLECTION_ERROR})
    # All (or none) selected: name the directory (short command line, same tests).
    whole = not selected or set(selected) >= set(_all_ids)
    args = [str(GUEST_DIR.relative_to(REPO))] if whole else selected
    timeout = float(os.environ.get(TIMEOUT_ENV, "420"))
    script = h.pytest_script(REPO, Path(sys.executable), args,
                             per_test_timeout=min(120.0, timeout / 2))
    earlier = ""
    for attempt in (1, 2):
        work = tmp_path_factory.mktemp("cgroup-v2-guest")
        try:
            run = h.run_in_guest(script, work, timeout=timeout, tools=tools,
                                 keep=h.guest_keep(REPO))
        except h.VmUnavailable as exc:  # e.g. the kernel lacks a module the guest needs
            pytest.skip(f"cgroup v2 guest unavailable: {exc}")
        except h.VmError as exc:
            failure = f"cgroup v2 guest failed to boot: {exc}{earlier}"
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
    _run_summary = (f"cgroup v2 guest ({tools.kernel.name}): boot {boot}, "
                    f"total {run.total_seconds:.1f} s, guest pytest rc {run.rc}, "
                    f"logs in {work}" + (f"; {run.error}" if run.error else "") + earlier)
    return run


def pytest_terminal_summary(terminalreporter) -> None:
    if _run_summary:
        terminalreporter.write_line(_run_summary)


@pytest.fixture
def guest_collection_error() -> str | None:
    return _collection_error
