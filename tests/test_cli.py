import subprocess
import sys

from nri_plugin import __version__
from nri_plugin.cli import main


def test_version_flag():
    out = subprocess.run([sys.executable, "-m", "nri_plugin.cli", "--version"],
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == f"nri-sla {__version__}"


def test_unknown_command_exits_2(capsys):
    try:
        main(["frobnicate"])
    except SystemExit as exc:
        assert exc.code == 2
    else:
        raise AssertionError("unknown command accepted")
    assert "invalid choice" in capsys.readouterr().err
