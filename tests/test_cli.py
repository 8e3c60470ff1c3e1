import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from nri_plugin import __version__
from nri_plugin.cli import COMMANDS, HOOK, main

REPO = Path(__file__).resolve().parents[1]


def test_version_flag():
    out = subprocess.run(
        [sys.executable, "-m", "nri_plugin.cli", "--version"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == f"nri-sla {__version__}"


def test_unknown_command_exits_2(capsys):
    try:
        main(["frobnicate"])
    except SystemExit as exc:
        assert exc.code == 2
    else:
        raise AssertionError("unknown command accepted")
    assert "invalid choice" in capsys.readouterr().err


def test_every_listed_command_has_a_module():
    for name, (module_name, _) in COMMANDS.items():
        module = importlib.import_module(f"nri_plugin.commands.{module_name}")
        assert callable(module.add_arguments) and callable(module.main), name


def test_help_lists_the_commands_and_the_hook(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    # argparse wraps the help at hyphens too ("containerd-" / "config:")
    listed = " ".join(capsys.readouterr().out.split()).replace("- ", "-")
    for name in [*COMMANDS, HOOK]:
        assert f"{name}: " in listed


def test_hook_goes_straight_to_the_hook(monkeypatch):
    import nri_plugin.hook.run as hook_run

    seen: list[list[str]] = []
    monkeypatch.setattr(hook_run, "main", lambda argv: seen.append(argv) or 7)
    assert main([HOOK, "--trace"]) == 7
    assert seen == [["--trace"]]


def test_the_hook_route_imports_no_typing_or_argparse():
    """The launcher (`/opt/nri-sla/bin/nri-sla hook`, the Debian package's `nri-sla hook`)
    enters through this module for every container start."""
    code = (
        f"import sys; sys.path.insert(0, {str(REPO)!r}); import nri_plugin.cli; "
        "print(sorted(m for m in ('typing', 'argparse', 'shutil') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("columns", [None, "40", "0", "-3", "wide", "200"])
def test_help_width_is_argparse_default_without_shutil(monkeypatch, columns):
    # nri_plugin.cli reads the width itself so that a parser never imports shutil; the
    # help must come out as argparse's default formatter would lay it out.
    import argparse
    import shutil

    from nri_plugin import cli

    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    assert cli._help_width() == shutil.get_terminal_size().columns - 2
    ours = argparse.ArgumentParser(prog="p", formatter_class=cli._help_formatter)
    theirs = argparse.ArgumentParser(prog="p")
    for parser in (ours, theirs):
        parser.add_argument("--thing", help="a help text long enough to wrap " * 6)
    assert ours.format_help() == theirs.format_help()
