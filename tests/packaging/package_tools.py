"""What the packaging tests share with the systemd guest (tests/vm/systemd_guest): building
the Debian package (packaging/deb/build.sh, the wheelhouse kept between sessions) and
reading a systemd unit file. Loaded by file path under one name (conftests and test
modules cannot import each other with --import-mode=importlib).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO / "packaging" / "deb" / "build.sh"
# Dependency wheels survive between sessions here: only the first build needs PyPI.
WHEELHOUSE = Path(os.environ.get("NRI_SLA_WHEELHOUSE", "/tmp/nri-sla-wheelhouse"))


class DebUnavailable(Exception):
    """The package cannot be built here; the message says what is missing."""


# One build per test session: tests/packaging and the systemd guest both want the package
# (each build takes ~10-25 s on the 2-core machine).
_built: dict[tuple[str, str], Path] = {}


def build_deb(out_dir: Path, python: str, compress: str = "gzip") -> Path:
    """The .deb built into out_dir (or the one this session built already); its path.
    gzip by default: the package is unpacked by tests, and xz costs seconds more to unpack
    under emulation."""
    known = _built.get((python, compress))
    if known is not None and known.is_file():
        return known
    env = dict(
        os.environ,
        PYTHON=python,
        OUT_DIR=str(out_dir),
        WHEELHOUSE=str(WHEELHOUSE),
        DEB_COMPRESS=compress,
    )
    res = subprocess.run([str(BUILD_SCRIPT)], env=env, capture_output=True, text=True, timeout=300)
    if res.returncode != 0 and "could not fetch dependency wheels" in res.stderr:
        raise DebUnavailable(
            "building the .deb needs PyPI once (pip wheel) or "
            "NRI_SLA_WHEELHOUSE=a directory holding the dependency wheels"
        )
    if res.returncode != 0 and "strip not found" in res.stderr:
        raise DebUnavailable("building the .deb needs strip (apt-get install binutils)")
    if res.returncode != 0 and "dpkg-deb not found" in res.stderr:
        raise DebUnavailable("building the .deb needs dpkg-deb (apt-get install dpkg-dev)")
    if res.returncode != 0:
        raise RuntimeError(f"{BUILD_SCRIPT} failed ({res.returncode}):\n{res.stderr[-3000:]}")
    built = _built[(python, compress)] = Path(res.stdout.strip().splitlines()[-1])
    return built


def parse_unit(path: Path) -> dict[str, dict[str, list[str]]]:
    """Parse a systemd unit into section -> key -> values (keys may repeat)."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] | None = None
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
            continue
        if current is None:
            raise ValueError(f"{path}: key outside a section: {line}")
        key, sep, value = line.partition("=")
        if not sep:
            raise ValueError(f"{path}: not KEY=VALUE: {line}")
        current.setdefault(key.strip(), []).append(value.strip())
    return sections
