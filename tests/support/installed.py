"""An installed copy of nri-sla (the Debian package's site dir, the host hook's runtime):
is every module byte-compiled for the interpreter that runs it, and does a cold hook run
from it write nothing into it?

The OCI hook is `python3 -I -S .../nri_plugin/hook/__main__.py`, exec'd for every
container: a module without a current .pyc is compiled on each start that imports it,
and a hook running as root writes the __pycache__ itself into the installed tree.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
from pathlib import Path

from tests.support.cgroups import make_v2_tree

CTR = "/kubepods/pod-a/ctr-1"
SLA = "cpu:\n  limit: 0.5\nmemory:\n  max: 64Mi\n"


def cache_tag(python: str, env: dict[str, str] | None = None) -> str:
    """sys.implementation.cache_tag of `python` (cpython-311)."""
    return subprocess.run(
        [python, "-I", "-S", "-c", "import sys; print(sys.implementation.cache_tag)"],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        timeout=60,
    ).stdout.strip()


def uncompiled(tree: Path, tag: str, scripts: tuple[str, ...] = ()) -> list[str]:
    """The .py files under `tree` (symlinked dirs not followed, as compileall does not)
    without a current .pyc for `tag`: none, a hash-checked or optimised one, or one whose
    recorded source mtime and size are not the file's. `scripts`: files run as scripts
    (never imported, so never read from a .pyc), relative to `tree`."""
    missing = []
    for top, dirs, files in os.walk(tree):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in files:
            if not name.endswith(".py"):
                continue
            source = Path(top) / name
            rel = str(source.relative_to(tree))
            if rel in scripts:
                continue
            pyc = source.parent / "__pycache__" / f"{name[:-3]}.{tag}.pyc"
            try:
                header = pyc.read_bytes()[:16]
            except FileNotFoundError:
                missing.append(rel)
                continue
            flags, mtime, size = struct.unpack("<III", header[4:16])
            st = source.stat()
            if flags != 0 or mtime != int(st.st_mtime) & 0xFFFFFFFF or size != st.st_size:
                missing.append(f"{rel} (stale or hash-checked .pyc)")
    return sorted(missing)


def files_of(tree: Path) -> dict[str, tuple[int, int]]:
    """Every file and dir under `tree`: (size, mtime_ns) by relative path."""
    out = {}
    for top, dirs, files in os.walk(tree):
        for name in [*dirs, *files]:
            path = Path(top) / name
            st = path.lstat()
            out[str(path.relative_to(tree))] = (st.st_size, st.st_mtime_ns)
    return out


def cold_hook_run(
    python: str, site: Path, work: Path, env: dict[str, str] | None = None
) -> list[str]:
    """One hook run, `python -I -S -X utf8 <site>/nri_plugin/hook/__main__.py`, for a
    container with a CPU/memory SLA on a fake cgroup v2 tree under `work`, its decision
    cache empty (a cold run: the first container of a deployment). Asserts it enforced
    and stored the decision; returns the modules it imported (-X importtime)."""
    root = work / "cg"
    make_v2_tree(root).add_cgroup(CTR)
    bundle = work / "bundle"
    bundle.mkdir()
    annotations = {
        "io.kubernetes.cri.container-type": "container",
        "io.kubernetes.cri.container-name": "app",
        "sla.nri.io/pod": SLA,
    }
    spec = {
        "ociVersion": "1.0.2",
        "process": {"env": ["PATH=/bin"]},
        "annotations": annotations,
        "linux": {"cgroupsPath": CTR},
    }
    (bundle / "config.json").write_text(json.dumps(spec))
    state = {"ociVersion": "1.0.2", "id": "ctr-1", "status": "creating", "bundle": str(bundle)}
    config = work / "config.yaml"
    config.write_text("enforcement: hard\n")
    cache = work / "cache"
    proc = subprocess.run(
        [
            python,
            "-I",
            "-S",
            "-X",
            "utf8",
            "-X",
            "importtime",
            str(site / "nri_plugin" / "hook" / "__main__.py"),
            "--config",
            str(config),
            "--cgroup-root",
            str(root),
            "--cache-dir",
            str(cache),
        ],
        input=json.dumps(state).encode(),
        capture_output=True,
        env=env if env is not None else {"PATH": "/usr/bin:/bin"},
        cwd="/",
        timeout=60,
    )
    err = proc.stderr.decode()
    assert proc.returncode == 0, err[-2000:]
    assert (root / CTR.lstrip("/") / "memory.max").read_text().strip() == str(64 << 20)
    assert any(p.name.startswith("decision-") for p in cache.iterdir()), sorted(cache.iterdir())
    loaded = [
        line.rsplit("|", 1)[-1].strip()
        for line in err.splitlines()
        if line.startswith("import time:")
    ]
    assert "nri_plugin.hook.cold" in loaded  # it decided: the cold path's modules ran
    return loaded
