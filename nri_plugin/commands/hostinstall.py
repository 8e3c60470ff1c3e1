"""The OCI hook put on the host from the DaemonSet's image (its initContainer runs
`nri-sla host-hook`): the DaemonSet route's fallback, with the ConfigMap as its policy.
containerd runs it once `/opt/nri-sla/bin/nri-sla containerd-config --write`, run on
the node, made the base spec from the node's own default spec and named it.

runc runs the hook on the host, where neither this image's Python nor nri-sla exist. So
the interpreter that runs this code is copied there with what nri-sla needs:

    /opt/nri-sla/runtime-<version>-<id>/  bin/python3, lib/ (libpython, stdlib), site/,
                                          each module byte-compiled by that python3
    /opt/nri-sla/current -> runtime-...   switched by rename: a hook starting meanwhile
                                          sees the old or the new tree, never half
    /opt/nri-sla/bin/nri-sla              sh launcher: current's python3 -I -S
    /etc/nri-sla/config.yaml              the ConfigMap's file (the hook's default path)

A config that does not validate is not installed (the hook would refuse every SLA pod).

Every module of the copy (standard library and site) is byte-compiled before the link
moves, by the copied interpreter itself, as root: the hook is `python3 -I -S`, exec'd for
every container, and a module without its .pyc is compiled again on each start that
imports it (a cold run costs about twice as much). Images built from python:3.X-slim
carry no .pyc of the standard library at all.
"""

from __future__ import annotations

import errno
import os
import re
import secrets
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Collection
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import nri_plugin
from nri_plugin.config.loader import parse_config, read_config_text
from nri_plugin.errors import InternalFailure

HOST_DIR = "/opt/nri-sla"
HOST_BINARY = f"{HOST_DIR}/bin/nri-sla"
HOST_CONFIG = "/etc/nri-sla/config.yaml"
# Not needed by any nri-sla command; most of the standard library's size.
SKIPPED_STDLIB = {
    "site-packages",
    "dist-packages",
    "test",
    "idlelib",
    "tkinter",
    "turtledemo",
    "ensurepip",
    "lib2to3",
    "pydoc_data",
}
# What only the plugin and the device plugin load (`run`, `device-plugin`: NRI and kubelet
# protocols, metrics, event loop, the Events sender's HTTPS client): the copy on the host
# runs the hook and `containerd-config`, whose imports never reach them (the import
# contract in pyproject.toml keeps grpc and protobuf out of the hook).
PLUGIN_ONLY = {"grpcio", "protobuf", "prometheus-client", "uvloop", "urllib3"}
# Byte-code the launcher's interpreter never reads (it runs without -O).
OPTIMIZED_PYC = (".opt-1.pyc", ".opt-2.pyc")
LAUNCHER = """#!/bin/sh
# nri-sla on the host, put here by the nri-sla DaemonSet (nri_plugin/commands/hostinstall.py)
here=$(dirname "$(readlink -f "$0")")/../current
LD_LIBRARY_PATH="$here/lib" exec "$here/bin/python3" -I -S "$here/nri-sla.py" "$@"
"""
ENTRY = """import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.realpath(__file__)), "site"))
from nri_plugin.cli import main  # noqa: E402

sys.exit(main())
"""


@dataclass(frozen=True)
class HostInstall:
    runtime: Path  # the runtime directory now current
    binary: Path
    config: Path


def _requirement_names(dist: metadata.Distribution) -> list[str]:
    names = []
    for requirement in dist.requires or ():
        if "extra ==" in requirement:
            continue  # test and tool extras
        match = re.match(r"[A-Za-z0-9._-]+", requirement)
        if match:
            names.append(match.group(0))
    return names


def _dependency_files(root: str = "nri-sla") -> list[tuple[Path, str]]:
    """(file, path relative to its site dir) of every distribution nri-sla needs, nri-sla
    itself excepted (it may be an editable install: nri_plugin is copied from its code)."""
    seen: set[str] = set()
    files: list[tuple[Path, str]] = []
    pending = _requirement_names(metadata.distribution(root))
    while pending:
        name = pending.pop().lower().replace("_", "-")
        if name in seen or name in PLUGIN_ONLY:
            continue
        seen.add(name)
        dist = metadata.distribution(name)
        pending += _requirement_names(dist)
        for file in dist.files or ():
            if ".." in file.parts or "__pycache__" in file.parts:
                continue  # console scripts outside the site dir; stale caches
            files.append((Path(str(dist.locate_file(file))), str(file)))
    return files


def _copy_tree(source: Path, target: Path, skip: Collection[str] = ()) -> None:
    # config-3.X-<arch>: the static libpython and build files, for compiling extensions
    shutil.copytree(
        source,
        target,
        symlinks=True,
        dirs_exist_ok=True,
        ignore=lambda _dir, names: [
            n for n in names if n in skip or n.startswith("config-3") or n.endswith(OPTIMIZED_PYC)
        ],
    )


def _copy_runtime(target: Path) -> None:
    version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    (target / "bin").mkdir(parents=True)
    shutil.copy2(os.path.realpath(sys.executable), target / "bin" / "python3")
    libdir = Path(sysconfig.get_config_var("LIBDIR") or "/nonexistent")
    library = sysconfig.get_config_var("LDLIBRARY") or ""
    (target / "lib").mkdir()
    if library.endswith(".so") or ".so." in library:  # a shared libpython
        for path in libdir.glob(f"lib{version}*.so*"):
            if path.is_symlink():  # libpython3.X.so -> libpython3.X.so.1.0
                (target / "lib" / path.name).symlink_to(os.readlink(path))
            else:
                shutil.copy2(path, target / "lib" / path.name)
    _copy_tree(Path(sysconfig.get_paths()["stdlib"]), target / "lib" / version, SKIPPED_STDLIB)
    site = target / "site"
    _copy_tree(Path(nri_plugin.__file__).parent, site / "nri_plugin", {"__pycache__"})
    for path, relative in _dependency_files():
        (site / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, site / relative)
    (target / "nri-sla.py").write_text(ENTRY)


def compile_runtime(runtime: Path) -> None:
    """Byte-code for every module of a copied runtime (its stdlib and site), written by
    its own python3 as the hook runs it (no -O; -I: no PYTHON* variable, such as
    PYTHONPYCACHEPREFIX, moves or changes it). Timestamp-checked, as Debian compiles:
    a hash-checked .pyc (what SOURCE_DATE_EPOCH would ask for) reads and hashes the
    source on every import."""
    version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    res = subprocess.run(
        [
            str(runtime / "bin" / "python3"),
            "-I",
            "-S",
            "-m",
            "compileall",
            "-q",
            "--invalidation-mode",
            "timestamp",
            str(runtime / "lib" / version),
            str(runtime / "site"),
        ],
        env={"LD_LIBRARY_PATH": str(runtime / "lib")},
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    if res.returncode != 0:
        tail = " ".join((res.stdout + res.stderr).split())[-400:]
        raise InternalFailure(
            f"byte-compiling {runtime} with its own python3 failed ({res.returncode}): {tail}"
        )


def _write(path: Path, text: str, mode: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".nri-sla-tmp")
    tmp.write_text(text)
    tmp.chmod(mode)
    os.replace(tmp, path)


def install(host_root: Path, config: str) -> HostInstall:
    """Put the hook and its policy under host_root (the host's / as the initContainer
    mounts it). Raises ConfigError for a config that does not validate."""
    text = read_config_text(config)
    parse_config(text, config)
    top = host_root / HOST_DIR.lstrip("/")
    if not top.is_dir():  # not the host's: the initContainer would fill its own filesystem
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(top))
    # a new name each time (an initContainer is often PID 1): the current tree stays whole
    # until the link moves
    runtime = top / f"runtime-{nri_plugin.__version__}-{secrets.token_hex(4)}"
    try:
        _copy_runtime(runtime)
        compile_runtime(runtime)
    except BaseException:
        shutil.rmtree(runtime, ignore_errors=True)  # never current: no hook runs from it
        raise
    link = top / "current.nri-sla-tmp"
    link.unlink(missing_ok=True)
    link.symlink_to(runtime.name)
    os.replace(link, top / "current")
    for old in top.glob("runtime-*"):  # what no hook can start any more
        if old != runtime:
            shutil.rmtree(old, ignore_errors=True)
    binary = host_root / HOST_BINARY.lstrip("/")
    _write(binary, LAUNCHER, 0o755)
    config_path = host_root / HOST_CONFIG.lstrip("/")
    _write(config_path, text, 0o644)
    return HostInstall(runtime, binary, config_path)
