"""docs/architecture.md's "Who may import whom" section, rendered from the import contracts
(pyproject.toml's [tool.importlinter], which `make lint` checks with lint-imports).

    python -m tests.support.import_rules           # print the section
    python -m tests.support.import_rules --write   # rewrite it in docs/architecture.md
"""

from __future__ import annotations

import argparse
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PYPROJECT = REPO / "pyproject.toml"
ARCHITECTURE = REPO / "docs" / "architecture.md"
HEADING = "## Who may import whom"
REGENERATE = "python -m tests.support.import_rules --write"


def _names(modules: list[str]) -> str:
    return ", ".join(f"`{m}`" for m in modules)


def _layers(contract: dict) -> list[str]:
    lines = [
        f"**{contract['name']}** (`{contract['id']}`, the packages and modules of "
        f"{_names(contract['containers'])}, highest first):",
        "",
        "```",
        *contract["layers"],
        "```",
    ]
    if ignored := contract.get("ignore_imports"):
        lines += ["", "Allowed against the layers: " + _names(sorted(ignored)) + "."]
    return lines


def _forbidden(contract: dict) -> list[str]:
    how = "directly" if contract.get("allow_indirect_imports") else "directly or through others"
    line = (
        f"* **{contract['name']}** (`{contract['id']}`): no import from "
        f"{_names(contract['source_modules'])} reaches "
        f"{_names(contract['forbidden_modules'])}, {how}."
    )
    if ignored := contract.get("ignore_imports"):
        line += " Allowed: " + _names(sorted(ignored)) + "."
    return [line]


def _protected(contract: dict) -> list[str]:
    return [
        f"* **{contract['name']}** (`{contract['id']}`): "
        f"{_names(contract['protected_modules'])} imported only by "
        f"{_names(contract['allowed_importers'])} (and the tests)."
    ]


RENDERERS = {"layers": _layers, "forbidden": _forbidden, "protected": _protected}


def render_section(pyproject: Path = PYPROJECT) -> str:
    """The section, heading included, ending in one newline."""
    contracts = tomllib.loads(pyproject.read_text())["tool"]["importlinter"]["contracts"]
    lines = [
        HEADING,
        "",
        "Generated from the import contracts in pyproject.toml (`[tool.importlinter]`), "
        "which `make lint`",
        f"checks with import-linter's `lint-imports`; regenerate with `{REGENERATE}`.",
        "Imports inside functions count, those under `TYPE_CHECKING` do not (they never run), and",
        "`../shared/tools/import-cycles` finds no cycle.",
        "",
    ]
    layered = [c for c in contracts if c["type"] == "layers"]
    others = [c for c in contracts if c["type"] != "layers"]
    for contract in layered:
        lines += [*_layers(contract), ""]
    for contract in others:
        lines += RENDERERS[contract["type"]](contract)
    return "\n".join(lines).rstrip("\n") + "\n"


def _bounds(text: str) -> tuple[int, int]:
    """Where the section starts and ends: its heading up to the blank line before the next
    `## ` heading (or the end of the file)."""
    start = text.index(HEADING)
    end = text.find("\n## ", start + len(HEADING))
    return start, len(text) if end < 0 else end + 1


def current_section(doc: Path = ARCHITECTURE) -> str:
    """The section as the doc has it, trailing blank lines dropped."""
    start, end = _bounds(text := doc.read_text())
    return text[start:end].rstrip("\n") + "\n"


def write_section(doc: Path = ARCHITECTURE, pyproject: Path = PYPROJECT) -> None:
    start, end = _bounds(text := doc.read_text())
    rest = text[end:]
    doc.write_text(text[:start] + render_section(pyproject) + ("\n" if rest else "") + rest)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--write",
        action="store_true",
        help=f"rewrite the section in {ARCHITECTURE.relative_to(REPO)}",
    )
    args = parser.parse_args(argv)
    if args.write:
        write_section()
    else:
        sys.stdout.write(render_section())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
