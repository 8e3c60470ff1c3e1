#!/usr/bin/env python3
"""nri-sla against a Go NRI plugin, both driven by containerd's runtime-side NRI code.

A Go "runtime driver" built on github.com/containerd/nri pkg/adaptation (what containerd
runs for NRI) listens on a socket, accepts one external plugin, synchronizes 1,000
containers (several rounds), then times CreateContainer round trips with a golden-like
pod carrying `sla.nri.io/pod: "cpu: {limit: 0.5}\\nmemory: {max: 256Mi}"`. It is run
once with a Go plugin (pkg/stub) doing the same work, and once with the real
`nri-sla run`, alternating for --rounds rounds; the figures are pooled per plugin and
printed as ratios next to the targets: CreateContainer p50 and p99 and
Synchronize at or below Go's (1.0x), a Synchronize of 10,000 containers that each carry a
record under 0.5 s (--records --sync-containers 10000), and nri-sla's peak RSS after
Synchronize(1,000) + 3,000 creations at most 38 MiB (uvloop kept).

Synchronize rounds are --sync-gap apart (each timed on a plugin done with the round
before), and "sync to first create" is the time from the last round's Synchronize until
the first CreateContainer the plugin answered after it: nri-sla answers Synchronize at
once and restores its state right after, so its Synchronize figure is the answer's and
this one includes the restore (the time until the plugin serves a container again).

--floor adds a third plugin, bench/floor_plugin.py: the Go plugin's work in Python on
nri-sla's own NRI transport and none of nri-sla's decision. Its figures are the floor of
this stack (what any plugin on CPython, this ttrpc stub on uvloop, upb, PyYAML and
OpenSSL pays), printed beside nri-sla's so a target below them is seen as such.

--records: every synchronized container carries a genuine `sla.nri.io/applied` record,
signed with the key of the state directory the plugin is given (the plugin's restore
path: each record's MAC verified, decoded and taken again). Without it they carry the
SLA but no record (created while no plugin was registered).

nri-sla runs with the default node config but for `state-dir` (a directory of this run,
never /var/lib/nri-sla).

Needs the project's two Go programs built (sources in bench/go/, how to build them
against a containerd source tree: bench/go/README.md):
    NRI_SLA_BENCH_DRIVER=/tmp/nri-bench/bin/nri-bench-driver \\
    NRI_SLA_BENCH_GO_PLUGIN=/tmp/nri-bench/bin/nri-bench-goplugin \\
    .venv/bin/python bench/bench_vs_go.py [--rounds 3] [--requests 3000] [--records] [--json]
Without them it says what to supply and exits 0.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import queue
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from google.protobuf import json_format

from nri_plugin.config.loader import load_config
from nri_plugin.core.decision import decide
from nri_plugin.core.nodebuild import build_node
from nri_plugin.core.recordkey import load_or_create_key
from nri_plugin.core.request import ContainerRequest
from nri_plugin.plan.record import encode_record
from nri_plugin.simulated.runtime import make_container, make_pod

SLA = "cpu: {limit: 0.5}\nmemory: {max: 256Mi}"
SLA_KEY = "sla.nri.io/pod"
APPLIED = "sla.nri.io/applied"
# The targets: nri-sla / Go at most these ratios ...
TARGETS = {"create_p50": 1.0, "create_p99": 1.0, "sync": 1.0}
RATIO_KEYS = (
    ("create_p50", "create_p50_us"),
    ("create_p99", "create_p99_us"),
    ("create_mean", "create_mean_us"),
    ("sync", "sync_ms"),
    ("ready", "ready_ms"),
    ("plugin_cpu", "plugin_cpu_per_create_us"),
    ("runtime_cpu", "runtime_cpu_per_create_us"),
)
# ... and these figures of nri-sla alone:
SYNC_RECORDS_MS = (10_000, 500.0)  # Synchronize of 10,000 containers, each with a record
RSS_PEAK_MIB = (1_000, 3_000, 38.0)  # peak RSS after Synchronize(1,000) + 3,000 creations
CONFIG = "state-dir: {state}\n"
ENV_DRIVER = "NRI_SLA_BENCH_DRIVER"
ENV_GO_PLUGIN = "NRI_SLA_BENCH_GO_PLUGIN"
FLOOR_PLUGIN = Path(__file__).resolve().with_name("floor_plugin.py")


class BenchError(RuntimeError):
    """A run of the driver/plugin pair did not produce figures."""


@dataclass
class PluginFigures:
    """Pooled figures of one plugin over all rounds."""

    name: str
    create_ns: list[int] = field(default_factory=list)
    sync_us: list[float] = field(default_factory=list)
    ready_us: list[float] = field(default_factory=list)  # the last Synchronize to a create
    rss_after_sync_kib: list[int] = field(default_factory=list)
    rss_sync_peak_kib: list[int] = field(default_factory=list)  # VmHWM after the Synchronizes
    rss_end_kib: list[int] = field(default_factory=list)
    rss_peak_kib: list[int] = field(default_factory=list)  # VmHWM at the end
    plugin_cpu_s: float = 0.0  # plugin CPU time spent in the timed creates (+ warm-up)
    driver_cpu_s: float = 0.0  # the same for the Go runtime side
    cpu_calls: int = 0
    adjustment: dict | None = None


def write_payload(
    path: Path,
    sync_containers: int,
    record_key: bytes | None = None,
    plan_config: Path | None = None,
) -> None:
    """The driver's input: the created pod/container and the state to synchronize, made
    by nri-sla's simulator (the same golden-like objects the other benchmarks use).
    `record_key`: every synchronized container carries the record nri-sla writes for the
    SLA on this host (the plan of the node `plan_config` describes), signed with it."""
    pod = make_pod("bench", annotations={SLA_KEY: SLA})
    ctr = make_container(pod, "work")
    n_pods = max(1, sync_containers // 4)
    pods = [make_pod(f"pod-{i}", annotations={SLA_KEY: SLA}) for i in range(n_pods)]
    ctrs = [make_container(pods[i % n_pods], f"c{i}") for i in range(sync_containers)]
    if record_key is not None and ctrs:
        plan = record_plan(plan_config, record_key)
        for c in ctrs:
            c.annotations[APPLIED] = encode_record(plan, "nri", c.id, record_key)
    as_dict = json_format.MessageToDict
    path.write_text(
        json.dumps(
            {
                "pod": as_dict(pod),
                "container": as_dict(ctr),
                "sync_pods": [as_dict(p) for p in pods],
                "sync_containers": [as_dict(c) for c in ctrs],
            }
        )
    )


def record_plan(config: Path | None, key: bytes):
    """The plan `nri-sla run` makes for the bench SLA on this host (what its records
    hold), by the core's own decision over the plugin's node config."""
    # This process's own node read (no GPUs here is no news: the plugin logs it).
    logging.getLogger("nri_sla").setLevel(logging.ERROR)
    node = build_node(load_config(str(config) if config else None), detect=True, record_key=key)
    decision = decide(node, ContainerRequest({SLA_KEY: SLA}, "c", namespace="default"))
    if decision.plan is None:
        raise BenchError(f"no plan for the bench SLA on this host: {decision.error}")
    return decision.plan


def vm_kib(pid: int, field_name: str = "VmRSS") -> int:
    """A Vm* figure of /proc/<pid>/status in KiB (0 once the process is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field_name + ":"):
                    return int(line.split()[1])
    except FileNotFoundError:
        pass
    return 0


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process from /proc (clock-tick resolution)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class EventReader:
    """The driver's JSON lines, read by a thread so that waits can time out cleanly."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put("")  # end of output

    def wait_for(self, want: str, timeout: float) -> dict:
        """Skip lines until the event `want`."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise BenchError(f"driver: no {want!r} event within {timeout:.0f}s") from None
            if not line:
                raise BenchError(f"driver exited (rc {self.proc.wait()}) before {want!r}")
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue
            if event.get("event") == want:
                return event


def tell(driver: subprocess.Popen, line: str) -> None:
    assert driver.stdin is not None
    driver.stdin.write(line + "\n")
    driver.stdin.flush()


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def run_once(
    args: argparse.Namespace,
    payload: Path,
    plugin_cmd: list[str],
    fig: PluginFigures,
    workdir: Path,
) -> None:
    """One driver + one plugin; `plugin_cmd` ends with its socket option."""
    sock, raw = workdir / f"{fig.name}.sock", workdir / f"{fig.name}.raw"
    log_path, driver_log = workdir / f"{fig.name}.log", workdir / f"{fig.name}.driver.log"
    driver = plugin = None
    try:
        # Logs go to files: a full pipe must never stall a process being timed.
        with open(driver_log, "w") as dlog, open(log_path, "w") as plog:
            driver = subprocess.Popen(
                [
                    args.driver,
                    "-socket",
                    str(sock),
                    "-payload",
                    str(payload),
                    "-n",
                    str(args.requests),
                    "-warmup",
                    str(args.warmup),
                    "-sync-rounds",
                    str(args.sync_rounds),
                    "-sync-gap",
                    f"{args.sync_gap}s",
                    "-wait-stdin",
                    "-raw",
                    str(raw),
                    "-request-timeout",
                    f"{args.request_timeout}s",
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=dlog,
                text=True,
            )
            events = EventReader(driver)
            events.wait_for("listening", 30)
            plugin = subprocess.Popen([*plugin_cmd, str(sock)], stdout=plog, stderr=plog)
        synced = events.wait_for(
            "synced", 60 + args.sync_rounds * (2 * args.request_timeout + args.sync_gap)
        )
        fig.ready_us.append(synced["ready_us"])
        fig.rss_after_sync_kib.append(vm_kib(plugin.pid))
        fig.rss_sync_peak_kib.append(vm_kib(plugin.pid, "VmHWM"))
        cpu0 = cpu_seconds(plugin.pid), cpu_seconds(driver.pid)
        tell(driver, "go")
        done = events.wait_for("done", 600)
        # The driver holds the connection until told, so the plugin is still there.
        fig.plugin_cpu_s += cpu_seconds(plugin.pid) - cpu0[0]
        fig.driver_cpu_s += cpu_seconds(driver.pid) - cpu0[1]
        fig.cpu_calls += args.warmup + args.requests + 1  # + the driver's probe call
        fig.rss_end_kib.append(vm_kib(plugin.pid))
        fig.rss_peak_kib.append(vm_kib(plugin.pid, "VmHWM"))
        tell(driver, "bye")
        fig.create_ns += [int(x) for x in raw.read_text().split()]
        fig.sync_us.extend(done["sync_all_us"])
        fig.adjustment = fig.adjustment or done["first_adjustment"]
        driver.wait(30)
    except (BenchError, OSError, subprocess.TimeoutExpired) as e:
        tails = "".join(
            f"\n--- {p.name} (tail):\n{p.read_text()[-2000:]}"
            for p in (driver_log, log_path)
            if p.exists()
        )
        raise BenchError(f"{fig.name}: {e}{tails}") from None
    finally:
        for proc in (driver, plugin):
            if proc is not None:
                stop(proc)


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))]


def unsigned(adjustment: dict | None) -> str:
    """The adjustment without the record's MAC: each plugin signs the record with its own
    key (and per container), so only the rest can be the same."""
    text = json.dumps(adjustment, sort_keys=True)
    return re.sub(r',\\"mac\\":\\"[0-9a-f]{64}\\"', "", text)


def summary(fig: PluginFigures) -> dict[str, float]:
    us = [n / 1e3 for n in fig.create_ns]
    return {
        "create_calls": len(us),
        "create_p50_us": pct(us, 0.5),
        "create_p99_us": pct(us, 0.99),
        "create_mean_us": statistics.fmean(us),
        "sync_ms": statistics.median(fig.sync_us) / 1e3,
        "ready_ms": statistics.median(fig.ready_us) / 1e3,
        "rss_after_sync_mib": max(fig.rss_after_sync_kib) / 1024,
        "rss_sync_peak_mib": max(fig.rss_sync_peak_kib) / 1024,
        "rss_end_mib": max(fig.rss_end_kib) / 1024,
        # VmHWM, or a sample above it: the kernel updates the high-water mark lazily.
        "rss_peak_mib": max(*fig.rss_peak_kib, *fig.rss_after_sync_kib, *fig.rss_end_kib) / 1024,
        "plugin_cpu_per_create_us": fig.plugin_cpu_s / fig.cpu_calls * 1e6,
        "runtime_cpu_per_create_us": fig.driver_cpu_s / fig.cpu_calls * 1e6,
    }


def ratio(ours: float, go: float) -> float:
    """ours / go; infinite when Go's figure is 0 (CPU time below one clock tick in a short
    run)."""
    return ours / go if go else float("inf")


def main(args: argparse.Namespace) -> dict:
    # The nri-sla of this Python (the checkout under test) before any other on PATH.
    beside = Path(sys.executable).with_name("nri-sla")
    nri_plugin = args.nri_sla or (str(beside) if beside.exists() else shutil.which("nri-sla"))
    if not nri_plugin:
        raise BenchError("no nri-sla executable: pass --nri-sla PATH")
    with tempfile.TemporaryDirectory(prefix="nri-bench-go-") as tmp:
        workdir = Path(tmp)
        # The default node config but for its state directory (the record key's home).
        config, state = workdir / "config.yaml", workdir / "state"
        config.write_text(CONFIG.format(state=state))
        key = load_or_create_key(str(state)) if args.records else None
        plugin_cmds = {
            "go": [args.go_plugin, *args.go_plugin_arg, "-socket"],
            "nri-sla": [
                nri_plugin,
                "run",
                "--config",
                str(config),
                "--metrics-address",
                "",
                *args.nri_sla_arg,
                "--socket",
            ],
        }
        if args.floor:
            plugin_cmds["floor"] = [
                sys.executable,
                str(FLOOR_PLUGIN),
                "run",
                "--config",
                str(config),
                "--metrics-address",
                "",
                "--socket",
            ]
        figs = {name: PluginFigures(name) for name in plugin_cmds}
        payload = workdir / "payload.json"
        write_payload(payload, args.sync_containers, key, config)
        for _ in range(args.rounds):  # alternate, so drift on the machine hits both
            for name, cmd in plugin_cmds.items():
                run_once(args, payload, cmd, figs[name], workdir)
    sums = {name: summary(fig) for name, fig in figs.items()}
    go = sums["go"]
    ratios = {name: ratio(sums["nri-sla"][key], go[key]) for name, key in RATIO_KEYS}
    out = {
        **sums,
        "ratios": ratios,
        "targets": TARGETS,
        "same_adjustment": all(
            unsigned(fig.adjustment) == unsigned(figs["go"].adjustment) for fig in figs.values()
        ),
        "adjustment": figs["nri-sla"].adjustment,
        "rounds": args.rounds,
        "go_plugin_args": args.go_plugin_arg,
        "sync_containers": args.sync_containers,
        "records": args.records,
        "sync_gap_s": args.sync_gap,
        "creations": args.warmup + args.requests,
        "loadavg_1m": os.getloadavg()[0],
        "cpus": os.cpu_count(),
    }
    if args.floor:
        out["floor_ratios"] = {name: ratio(sums["floor"][key], go[key]) for name, key in RATIO_KEYS}
    return out


def report(out: dict) -> None:
    go, py, r = out["go"], out["nri-sla"], out["ratios"]
    n = out["sync_containers"]
    records = "each with a record" if out["records"] else "SLA, no record"
    print(
        f"CreateContainer round trip via nri pkg/adaptation ({py['create_calls']} calls per "
        f"plugin over {out['rounds']} alternating rounds); Synchronize of {n:,} "
        f"containers ({records}; median of all)"
    )
    floor, fr = out.get("floor"), out.get("floor_ratios")
    print(
        f"{'figure':<30}{'Go (pkg/stub)':>15}{'nri-sla':>12}{'ratio':>9}{'target':>9}"
        + (f"{'floor':>12}{'ratio':>9}" if floor else "")
    )
    rows = [
        ("create p50 (us)", "create_p50_us", "create_p50"),
        ("create p99 (us)", "create_p99_us", "create_p99"),
        ("create mean (us)", "create_mean_us", "create_mean"),
        (f"sync {n:,}{' with records' if out['records'] else ''} (ms)", "sync_ms", "sync"),
        ("sync to first create (ms)", "ready_ms", "ready"),
        ("plugin CPU/create (us)", "plugin_cpu_per_create_us", "plugin_cpu"),
        ("runtime CPU/create (us)", "runtime_cpu_per_create_us", "runtime_cpu"),
    ]
    for label, key, rkey in rows:
        target = out["targets"].get(rkey)
        verdict = "" if target is None else (" ok" if r[rkey] <= target else " MISSED")
        tgt = f"<= {target}x" if target else ""
        extra = f"{floor[key]:>12.1f}{fr[rkey]:>8.2f}x" if floor else ""
        print(
            f"{label:<30}{go[key]:>15.1f}{py[key]:>12.1f}{r[rkey]:>8.2f}x{tgt:>9}{extra}{verdict}"
        )
    for line in absolute_targets(out):
        print(line)
    print(
        f"plugin RSS after the {n:,}-container Synchronize: nri-sla "
        f"{py['rss_after_sync_mib']:.1f} MiB, Go {go['rss_after_sync_mib']:.1f} MiB (the peak "
        f"by then {py['rss_sync_peak_mib']:.1f} / {go['rss_sync_peak_mib']:.1f}); at the "
        f"end: {py['rss_end_mib']:.1f} / {go['rss_end_mib']:.1f} MiB; peak (VmHWM) "
        f"{py['rss_peak_mib']:.1f} / {go['rss_peak_mib']:.1f} MiB"
    )
    if floor:
        print(
            f"the floor plugin (bench/floor_plugin.py): RSS after the Synchronize "
            f"{floor['rss_after_sync_mib']:.1f} MiB, at the end {floor['rss_end_mib']:.1f} "
            f"MiB, peak {floor['rss_peak_mib']:.1f} MiB"
        )
    if out["go_plugin_args"]:
        print(f"Go plugin arguments: {' '.join(out['go_plugin_args'])}")
    print(
        f"same adjustment from every plugin: {out['same_adjustment']}; load average "
        f"{out['loadavg_1m']:.2f} on {out['cpus']} CPUs"
    )


def absolute_targets(out: dict) -> list[str]:
    """The targets of nri-sla alone, where this run measured them."""
    py, lines = out["nri-sla"], []
    n, limit_ms = SYNC_RECORDS_MS
    if out["records"] and out["sync_containers"] == n:
        ok = "ok" if py["sync_ms"] < limit_ms else "MISSED"
        lines.append(
            f"Synchronize of {n:,} containers each with a record: {py['sync_ms']:.0f} "
            f"ms (target < {limit_ms:.0f} ms) {ok}"
        )
    synced, created, limit_mib = RSS_PEAK_MIB
    if out["sync_containers"] == synced and out["creations"] >= created:
        ok = "ok" if py["rss_peak_mib"] <= limit_mib else "MISSED"
        lines.append(
            f"nri-sla peak RSS after Synchronize({synced:,}) + {out['creations']:,} "
            f"creations: {py['rss_peak_mib']:.1f} MiB (target <= {limit_mib:.0f} MiB) "
            f"{ok}"
        )
    return lines


def run() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds per plugin")
    parser.add_argument("--requests", type=int, default=3000, help="timed creates per round")
    parser.add_argument("--warmup", type=int, default=300, help="untimed creates per round")
    parser.add_argument("--sync-containers", type=int, default=1000)
    parser.add_argument(
        "--records",
        action="store_true",
        help="every synchronized container carries a genuine record (the plugin's restore path)",
    )
    parser.add_argument(
        "--sync-rounds",
        type=int,
        default=5,
        help="Synchronize rounds per connection (the median of all is reported)",
    )
    parser.add_argument(
        "--sync-gap",
        type=float,
        default=1.0,
        help="seconds between two Synchronize rounds: each is timed on a "
        "plugin done with the one before (nri-sla restores its state right "
        "after the answer; back to back, a round would be timed with the "
        "last round's restore, which no runtime does: one Synchronize per "
        "connection)",
    )
    parser.add_argument(
        "--request-timeout",
        type=float,
        default=2.0,
        help="the runtime's deadline per plugin request in seconds "
        "(containerd's default 2; a Synchronize slower than it drops the "
        "plugin, so raise it to time one that misses)",
    )
    parser.add_argument(
        "--nri-sla",
        default="",
        help="nri-sla executable (default: beside this Python, else on PATH)",
    )
    parser.add_argument(
        "--nri-sla-arg",
        action="append",
        default=[],
        help="extra argument for `nri-sla run` (repeatable)",
    )
    parser.add_argument(
        "--go-plugin-arg",
        action="append",
        default=[],
        help="extra argument for the Go plugin, e.g. -log (one decision "
        "log line per container, as nri-sla writes)",
    )
    parser.add_argument(
        "--floor", action="store_true", help="also run bench/floor_plugin.py (this stack's floor)"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    args.driver = os.environ.get(ENV_DRIVER, "")
    args.go_plugin = os.environ.get(ENV_GO_PLUGIN, "")
    missing = [
        v
        for v in (ENV_DRIVER, ENV_GO_PLUGIN)
        if not os.environ.get(v) or not os.access(os.environ[v], os.X_OK)
    ]
    if missing:
        print(
            f"bench_vs_go: skipped: set {' and '.join(missing)} to executables: the Go "
            f"runtime driver (nri pkg/adaptation) and the Go plugin (nri pkg/stub); "
            f"build them from bench/go/ (bench/go/README.md)"
        )
        return 0
    try:
        out = main(args)
    except BenchError as e:
        print(f"bench_vs_go: {e}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(out, sort_keys=True))
    else:
        report(out)
    if not out["same_adjustment"]:
        print(
            "bench_vs_go: the plugins answered different adjustments, so the figures "
            "do not compare the same work",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(run())
