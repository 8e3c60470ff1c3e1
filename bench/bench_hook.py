#!/usr/bin/env python3
"""Start-up cost of the OCI hook: wall time, CPU time and peak RSS per invocation.

Measured on an installed copy, as a node runs it: the script first installs nri-sla into
a temporary host root exactly as the DaemonSet's initContainer does (`nri-sla host-hook`:
the interpreter, the standard library and the site dir copied, then every module
byte-compiled by the copied interpreter), and every variant runs that interpreter and
that copy, never the checkout (whose __pycache__ is whatever the last test left). Each
variant (the fast entry as hookspec.fast_hook_entry installs it: `python3 -I -S -X utf8
.../nri_plugin/hook/__main__.py`) is exec'd N times with a realistic OCI state on stdin
(a containerd-style bundle whose config.json carries an SLA) against a fake cgroup v2
tree, next to a bare `python3 -I -S -c pass` of the same interpreter. Targets
(docs/hook.md): a cached (warm) run and a container without an SLA within 1.5x
of bare python, a cold run within 5x, peak RSS under 40 MiB. A comparison row: a
process that only imports PyYAML and json and parses the SLA and the state (what a cold
run would start from if it read SLAs with PyYAML; the hook's subset reader does not
load it).

SLA variants run "cold" (the decision cache emptied before every run: the first container
of a deployment on a node), "warm" (a cache hit: every later replica) and with the cache
off (`--cache-dir off`). One row runs a cold hook from the same copy without its
__pycache__ (and -B, so it stays so): what an install that does not compile costs. CPU
time (the child's user + system time, from wait4) is shown next to wall time: on a
loaded machine it is the steadier of the two. Peak RSS comes from one more run of each
variant through GNU time (`time` package; "n/a" without it): a child of this process
would count this process's RSS at the fork.

`--instructions` prints, instead of the timings, the instructions one run executes
(valgrind's callgrind, blind to the machine's load) for bare python, a cold CPU/memory
SLA, a cold SLA with numa placement, a cold run without __pycache__ and a warm run.

    .venv/bin/python bench/bench_hook.py [--runs 50] [--instructions]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HOOK_MAIN = ("nri_plugin", "hook", "__main__.py")  # below an installed site dir
CTR = "/kubepods/burstable/pod-1234/ctr-abcd"
SLA = (
    "enforcement: hard\ncpu:\n  limit: 2.5\n  period: 100ms\nnuma:\n  nodes: '0'\n"
    "memory:\n  high: 8Gi\n  max: 10Gi\nio:\n  weight: 500\n"
)
# The same without numa: no placement, so a cold run builds no allocator (core.nodestate
# imports it, the CPU/GPU topology and the RT modules at first use).
SLA_NO_PLACEMENT = SLA.replace("numa:\n  nodes: '0'\n", "")


def stack_code(site: Path) -> str:
    """Importing the shared data path alone, from the installed site dir."""
    return (
        f"import sys; sys.path[:0] = [{str(site)!r}]; import nri_plugin.config, "
        "nri_plugin.core, nri_plugin.plan.planner, nri_plugin.plan.allocator, "
        "nri_plugin.enforce.cgfile, nri_plugin.enforce.cgroupdetect, "
        "nri_plugin.enforce.plan_writes, nri_plugin.topology.cpus"
    )


def cold_floor_code(site: Path) -> str:
    """The least any cold run does with this stack, and none of nri-sla: PyYAML (the
    SLA's format; its C parser where built) reads the SLA and json the OCI state."""
    return (
        f"import sys; sys.path[:0] = [{str(site)!r}]; import json, yaml; "
        "json.loads(sys.stdin.buffer.read()); "
        f"yaml.load({SLA!r}, Loader=getattr(yaml, 'CSafeLoader', yaml.SafeLoader))"
    )


class Installed:
    """nri-sla installed under `top` by `nri-sla host-hook`, as the DaemonSet's
    initContainer installs it on a node (the interpreter, its stdlib and the site dir
    copied, every module byte-compiled by the copied interpreter:
    nri_plugin.commands.hostinstall), and a second copy of its site dir without
    __pycache__. The python3 to run, the environment the launcher gives it. Installed by
    the command in a child process: an exec'd child's peak RSS counts the parent's at
    the fork, so this process stays as small as it was."""

    def __init__(self, top: Path, config: Path) -> None:
        host = top / "host"
        (host / "opt" / "nri-sla").mkdir(parents=True)
        command = [str(Path(sys.executable).with_name("nri-sla")), "host-hook"]
        subprocess.run(
            [*command, "--host-root", str(host), "--config", str(config)],
            check=True,
            stdout=subprocess.DEVNULL,
            timeout=900,
        )
        self.runtime = (host / "opt" / "nri-sla" / "current").resolve()
        self.launcher = host / "opt" / "nri-sla" / "bin" / "nri-sla"
        self.python = str(self.runtime / "bin" / "python3")
        self.site = self.runtime / "site"
        self.main = self.site.joinpath(*HOOK_MAIN)
        # as the launcher runs it (the copied libpython); PATH as a runtime gives hooks
        self.env = {
            "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "LD_LIBRARY_PATH": str(self.runtime / "lib"),
        }
        self.uncompiled_site = top / "site-no-pycache"
        shutil.copytree(
            self.site, self.uncompiled_site, ignore=shutil.ignore_patterns("__pycache__")
        )
        self.uncompiled_main = self.uncompiled_site.joinpath(*HOOK_MAIN)
        tag = sys.implementation.cache_tag
        self.pyc = sum(1 for _ in self.site.rglob(f"*.{tag}.pyc"))
        self.py = sum(1 for _ in self.site.rglob("*.py"))


def own_v2_cgroup() -> str | None:
    """This process's cgroup v2 path ("0::" line; v2 and hybrid hosts), or None."""
    with open("/proc/self/cgroup") as fh:
        for line in fh:
            if line.startswith("0::"):
                return line[3:].strip()
    return None


def make_world(top: Path, sla: bool, sla_text: str = SLA) -> tuple[Path, bytes, Path]:
    """(cgroup root, state JSON, node config) for one container.

    The hook finds a container's cgroup from /proc/<pid>/cgroup when the state has a pid
    (runc always passes one): the state names this bench's own pid, and the fake tree
    mirrors this process's v2 cgroup path, so every run reads a real /proc/<pid>/cgroup.
    Without a v2 line (a pure v1 host) the state has no pid: cgroupsPath is used."""
    root = top / "cg"
    own = own_v2_cgroup()
    cdir = root / (own if own is not None else CTR).strip("/")
    cdir.mkdir(parents=True, exist_ok=True)
    (root / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    for name, value in {
        "cpu.max": "max 100000",
        "cpuset.cpus": "",
        "cpuset.mems": "",
        "memory.max": "max",
        "memory.high": "max",
        "io.weight": "default 100",
        # where io weights go when a disk of this host uses bfq
        "io.bfq.weight": "default 100",
        "io.max": "",
    }.items():
        (cdir / name).write_text(value)
    bundle = top / (
        ("bundle-sla" if sla_text == SLA else "bundle-sla-2") if sla else "bundle-plain"
    )
    bundle.mkdir(exist_ok=True)
    annotations = {
        "io.kubernetes.cri.container-type": "container",
        "io.kubernetes.cri.container-name": "app",
        "io.kubernetes.cri.sandbox-namespace": "default",
        "io.kubernetes.cri.sandbox-id": "f" * 64,
        "io.kubernetes.cri.image-name": "registry.example/app:1.0",
    }
    if sla:
        annotations["sla.nri.io/pod"] = sla_text
    env = [
        "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOSTNAME=app",
        *(f"VAR_{i}=value-{i}" for i in range(30)),
    ]
    mounts = [
        {
            "destination": f"/mnt/m{i}",
            "type": "bind",
            "source": f"/var/lib/m{i}",
            "options": ["rbind", "ro"],
        }
        for i in range(12)
    ]
    config = {
        "ociVersion": "1.1.0",
        "process": {"args": ["/app"], "env": env, "cwd": "/"},
        "root": {"path": "rootfs"},
        "mounts": mounts,
        "annotations": annotations,
        "linux": {"cgroupsPath": own or CTR, "resources": {"cpu": {"shares": 1024}}},
    }
    (bundle / "config.json").write_text(json.dumps(config, indent=1))
    state = {
        "ociVersion": "1.1.0",
        "id": "abcd" * 16,
        "status": "creating",
        "bundle": str(bundle),
        "annotations": annotations,
    }
    if own is not None:
        state["pid"] = os.getpid()
    node_config = top / "config.yaml"
    node_config.write_text("enforcement: hard\n")
    return root, json.dumps(state).encode(), node_config


def run_once(
    argv: list[str], stdin: bytes, env: dict[str, str] | None = None
) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds, exit status) of one exec."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env
    )
    proc.stdin.write(stdin)
    proc.stdin.close()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read()
    proc.stderr.close()
    if proc.returncode != 0 and b"pass" not in argv[-1].encode():
        raise SystemExit(f"{argv} exited {proc.returncode}: {err.decode()[:300]}")
    return wall, usage.ru_utime + usage.ru_stime, proc.returncode


def peak_rss_kib(argv: list[str], stdin: bytes, env: dict[str, str] | None) -> int | None:
    """The peak RSS of one exec, through GNU time (Debian's `time` package), or None
    without it. Not from this process's wait4: a child's peak counts its parent's RSS at
    the fork, and this process is larger than the hook; `time` is a small C program."""
    gnu_time = shutil.which("time", path="/usr/bin:/bin")
    if gnu_time is None:
        return None
    with tempfile.NamedTemporaryFile("r") as out:
        subprocess.run(
            [gnu_time, "-f", "%M", "-o", out.name, *argv],
            input=stdin,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
            check=False,
        )
        return int(out.read().split()[-1])


def measure(variants: list[tuple], runs: int, env: dict[str, str]) -> list[dict]:
    """Round-robin over the variants, so background load hits them all alike. A variant is
    (name, argv, stdin[, prepare[, env]]): prepare() (or None) runs before each exec,
    outside the timing; its env (else `env`) is the whole environment."""
    variants = [(*v, None, None)[:5] for v in variants]
    variants = [(n, a, i, p, e if e is not None else env) for n, a, i, p, e in variants]
    rss: list[int | None] = []
    for _, argv, stdin, prepare, own_env in variants:
        run_once(argv, stdin, own_env)  # warm the page cache (and the decision cache)
        if prepare is not None:
            prepare()
        rss.append(peak_rss_kib(argv, stdin, own_env))
    walls: list[list[float]] = [[] for _ in variants]
    cpus: list[list[float]] = [[] for _ in variants]
    for _ in range(runs):
        for i, (_, argv, stdin, prepare, env) in enumerate(variants):
            if prepare is not None:
                prepare()
            w, c, _ = run_once(argv, stdin, env)
            walls[i].append(w * 1000)
            cpus[i].append(c * 1000)
    out = []
    for (name, *_), ws, cs, rs in zip(variants, walls, cpus, rss, strict=True):
        ws.sort()
        out.append(
            {
                "name": name,
                "median_ms": statistics.median(ws),
                "p90_ms": ws[int(0.9 * (len(ws) - 1))],
                "cpu_ms": statistics.median(cs),
                "peak_rss_mib": None if rs is None else rs / 1024,
            }
        )
    return out


def instructions(argv: list[str], stdin: bytes, env: dict[str, str]) -> int:
    """Instructions one run of argv executes (callgrind, the collector on from the start,
    no output file)."""
    out = subprocess.run(
        [VALGRIND, "--tool=callgrind", "--callgrind-out-file=/dev/null", *argv],
        input=stdin,
        capture_output=True,
        env=env,
        check=False,
        timeout=600,
    )
    err = out.stderr.decode(errors="replace")
    if out.returncode != 0:
        raise SystemExit(f"{argv} under callgrind exited {out.returncode}: {err[-600:]}")
    for line in err.splitlines():
        if "Collected :" in line:
            return int(line.rsplit(":", 1)[1])
    raise SystemExit(f"callgrind printed no 'Collected :' line: {err[-600:]}")


def is_cold(argv: list[str], stdin: bytes, env: dict[str, str]) -> bool:
    """Run once (importtime on): whether it decided cold (loaded the cold path)."""
    out = subprocess.run(
        [argv[0], "-X", "importtime", *argv[1:]],
        input=stdin,
        capture_output=True,
        env=env,
        check=False,
    )
    if out.returncode != 0:
        raise SystemExit(f"{argv} exited {out.returncode}: {out.stderr.decode()[-600:]}")
    return b"nri_plugin.hook.cold" in out.stderr


VALGRIND = "/usr/bin/valgrind"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument(
        "--instructions",
        action="store_true",
        help=f"print callgrind instruction counts instead of timings ({VALGRIND})",
    )
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-hook-") as tmp:
        top = Path(tmp)
        root, state_sla, node_config = make_world(top, sla=True)
        _, state_plain, _ = make_world(top, sla=False)
        _, state_cpu, _ = make_world(top, sla=True, sla_text=SLA_NO_PLACEMENT)
        inst = Installed(top, node_config)
        py, env = inst.python, inst.env
        warm_dir, cold_dir = top / "cache-warm", top / "cache-cold"
        opts = ["--cgroup-root", str(root), "--config", str(node_config)]
        warm = [*opts, "--cache-dir", str(warm_dir)]
        cold = [*opts, "--cache-dir", str(cold_dir)]

        def empty_cold_cache() -> None:
            shutil.rmtree(cold_dir, ignore_errors=True)

        # As hookspec.fast_hook_entry installs it (-X utf8: docs/hook.md).
        fast = [py, "-I", "-S", "-X", "utf8", str(inst.main)]
        # the same copy without its __pycache__, kept so (-B): an install not compiled
        uncompiled = [py, "-I", "-S", "-B", "-X", "utf8", str(inst.uncompiled_main)]
        print(
            f"installed as `nri-sla host-hook` does: {inst.runtime} "
            f"({inst.py} .py, {inst.pyc} .pyc in site/)"
        )
        if args.instructions:
            return print_instructions(inst, fast, uncompiled, state_sla, state_cpu, warm, cold)
        bare = [py, "-I", "-S", "-c", "pass"]
        floor = cold_floor_code(inst.site)
        variants = [
            ("bare python3 -I -S -c pass", bare, b""),
            ("-I -S __main__.py, no SLA", [*fast, *warm], state_plain),
            ("-I -S __main__.py, SLA, warm (cache hit)", [*fast, *warm], state_sla),
            (
                "-I -S __main__.py, SLA, cold (cache miss)",
                [*fast, *cold],
                state_sla,
                empty_cold_cache,
            ),
            (
                "-I -S __main__.py, SLA without numa, cold",
                [*fast, *cold],
                state_cpu,
                empty_cold_cache,
            ),
            (
                "the same, no __pycache__ (-B)",
                [*uncompiled, *cold],
                state_cpu,
                empty_cold_cache,
            ),
            ("-I -S __main__.py, SLA, cache off", [*fast, *opts, "--cache-dir", "off"], state_sla),
            (
                "-I -S __main__.py, SLA, warm, NRI_SLA_HOOK_LOG",
                [*fast, *warm],
                state_sla,
                None,
                {**env, "NRI_SLA_HOOK_LOG": str(top / "hook.log")},
            ),
            # what containerd runs on such a node: the sh launcher, then python3 -I -S
            (
                "/opt/nri-sla/bin/nri-sla hook, SLA, warm",
                [str(inst.launcher), "hook", *warm],
                state_sla,
            ),
            # Where the cold path's time goes: importing the shared data path alone.
            (
                "(import sla+config+plan+enforce+core only)",
                [py, "-I", "-S", "-c", stack_code(inst.site)],
                b"",
            ),
            # For comparison: PyYAML's import alone, which a subset SLA's cold run avoids.
            ("(PyYAML + json parse, no nri-sla)", [py, "-I", "-S", "-c", floor], state_sla),
            # The bare start with the hook's -X utf8 too: what the option alone saves
            # (the C library's locale conversions) under this environment's locale.
            (
                "(bare python3 -I -S -X utf8 -c pass)",
                [py, "-I", "-S", "-X", "utf8", "-c", "pass"],
                b"",
            ),
        ]
        empty_cold_cache()
        results = measure(variants, args.runs, env)
    bare_ms, bare_cpu = results[0]["median_ms"], results[0]["cpu_ms"]
    print(
        f"OCI hook start-up, {args.runs} runs each, {os.cpu_count()} CPUs, "
        f"Python {sys.version.split()[0]}"
    )
    print(
        f"{'variant':44} {'median ms':>10} {'p90 ms':>8} {'x bare':>7} {'CPU ms':>7} "
        f"{'x bare':>7} {'peak RSS MiB':>13}"
    )
    for r in results:
        rss = "n/a" if r["peak_rss_mib"] is None else f"{r['peak_rss_mib']:.1f}"
        print(
            f"{r['name']:44} {r['median_ms']:10.1f} {r['p90_ms']:8.1f} "
            f"{r['median_ms'] / bare_ms:7.2f} {r['cpu_ms']:7.1f} {r['cpu_ms'] / bare_cpu:7.2f} "
            f"{rss:>13}"
        )
    for r, limit in zip(results[1:4], (1.5, 1.5, 5), strict=True):
        ok = r["median_ms"] <= limit * bare_ms and (r["peak_rss_mib"] or 0) < 40
        print(
            f"target for {r['name']}: median <= {limit:g}x bare and peak RSS < 40 MiB: "
            f"{'met' if ok else 'NOT met'}"
        )
    floor_row = next(r for r in results if r["name"].startswith("(PyYAML"))
    print(
        f"PyYAML reading the SLA and json the state, nothing of nri-sla: "
        f"{floor_row['median_ms'] / bare_ms:.2f}x bare (CPU {floor_row['cpu_ms'] / bare_cpu:.2f}x)"
    )
    return 0


def print_instructions(
    inst: Installed,
    fast: list[str],
    uncompiled: list[str],
    state_sla: bytes,
    state_cpu: bytes,
    warm: list[str],
    cold: list[str],
) -> int:
    """One run of each under callgrind: instructions and x bare."""
    if not os.access(VALGRIND, os.X_OK):
        raise SystemExit(f"--instructions needs valgrind at {VALGRIND}")
    env, cold_dir = inst.env, Path(cold[cold.index("--cache-dir") + 1])
    # the hook's own deadline (5 s) is far too short under callgrind
    slow = ["--timeout", "300"]
    # a warm run needs the decision stored: a cold run, and one more when the first
    # started too close to a file change to store it
    for _ in range(3):
        if not is_cold([*fast, *warm, *slow], state_sla, env):
            break
    else:
        raise SystemExit("three runs in a row decided cold: no decision is stored")
    rows = [("bare python3 -I -S -c pass", [inst.python, "-I", "-S", "-c", "pass"], b"")]
    rows += [
        ("hook, SLA, warm (cache hit)", [*fast, *warm, *slow], state_sla),
        ("hook, CPU/memory SLA, cold", [*fast, *cold, *slow], state_cpu),
        ("hook, SLA with numa, cold", [*fast, *cold, *slow], state_sla),
        ("hook, CPU/memory SLA, cold, no __pycache__", [*uncompiled, *cold, *slow], state_cpu),
    ]
    counts = []
    for name, argv, stdin in rows:
        shutil.rmtree(cold_dir, ignore_errors=True)
        counts.append((name, instructions(argv, stdin, env)))
    bare = counts[0][1]
    print(f"OCI hook instructions (callgrind, one run each), Python {sys.version.split()[0]}")
    print(f"{'run':44} {'instructions':>14} {'x bare':>7}")
    for name, n in counts:
        print(f"{name:44} {n / 1e6:12.1f} M {n / bare:7.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
