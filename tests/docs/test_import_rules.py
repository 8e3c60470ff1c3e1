"""The layer contract (pyproject.toml's [tool.importlinter], which `make test` runs as
lint-imports) is what docs/architecture.md says, and it catches an import against it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.support.import_rules import (
    ARCHITECTURE,
    PYPROJECT,
    REGENERATE,
    REPO,
    current_section,
    render_section,
)

LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def test_architecture_section_is_the_contract_rendered() -> None:
    assert current_section() == render_section(), (
        f"{ARCHITECTURE.relative_to(REPO)}'s 'Who may import whom' differs from the contract "
        f"in {PYPROJECT.name}: run `{REGENERATE}`"
    )


def _lint(tree: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(tree)}  # this copy's nri_plugin, not the checkout's
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-logo", "--no-cache"],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_an_import_against_the_layers_breaks_the_contract(tmp_path: Path) -> None:
    shutil.copytree(
        REPO / "nri_plugin", tmp_path / "nri_plugin", ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copy(PYPROJECT, tmp_path)
    assert _lint(tmp_path).returncode == 0
    framing = tmp_path / "nri_plugin" / "nri" / "ttrpc.py"
    framing.write_text(framing.read_text() + "\nfrom nri_plugin.sla import Sla  # noqa\n")
    broken = _lint(tmp_path)
    assert broken.returncode != 0, broken.stdout
    assert "nri_plugin.nri.ttrpc -> nri_plugin.sla" in broken.stdout, broken.stdout
    assert "Protocol code knows no SLA" in broken.stdout and "BROKEN" in broken.stdout


def test_a_heavy_import_on_the_hooks_warm_path_breaks_its_contract(tmp_path: Path) -> None:
    # `typing` only for a checker (under TYPE_CHECKING) is free; imported, it is not
    shutil.copytree(
        REPO / "nri_plugin", tmp_path / "nri_plugin", ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copy(PYPROJECT, tmp_path)
    granted = tmp_path / "nri_plugin" / "granted.py"
    granted.write_text(granted.read_text() + "\nfrom typing import Any  # noqa\n")
    broken = _lint(tmp_path)
    assert broken.returncode != 0, broken.stdout
    assert "nri_plugin.granted -> typing" in broken.stdout, broken.stdout
    assert "A cached hook run loads no parser" in broken.stdout
