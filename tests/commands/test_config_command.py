"""`nri-sla config check|show|default`: one line per problem with the table's exit status,
the config in effect with defaults filled in, and defaults that `check` takes back."""

from __future__ import annotations

from pathlib import Path

import yaml

from nri_plugin.cli import main
from nri_plugin.config.cap import Cap
from nri_plugin.config.loader import parse_config
from nri_plugin.config.values import NodeConfig
from nri_plugin.errors import EXIT_INVALID, EXIT_OK
from nri_plugin.value import replace

REPO = Path(__file__).resolve().parents[2]


def run(capsys, *args: str) -> tuple[int, str, str]:
    status = main(["config", *args])
    out, err = capsys.readouterr()
    return status, out, err


def test_default_is_the_defaults_and_check_accepts_it(capsys, tmp_path):
    status, out, _ = run(capsys, "default")
    assert status == EXIT_OK
    assert parse_config(out, "default") == NodeConfig(source="default")
    path = tmp_path / "config.yaml"
    path.write_text(out)
    assert run(capsys, "check", str(path)) == (EXIT_OK, f"{path}: ok\n", "")


def test_show_fills_in_defaults_around_the_files_settings(capsys, tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text(
        "enforcement: soft\npod-caps: {exclusive-cpus: 4}\nreserved-cpus: 0-1\n"
        "cgroup: {version: 2}\n"
    )
    status, out, _ = run(capsys, "show", "--config", str(path))
    assert status == EXIT_OK
    shown = yaml.safe_load(out)
    assert shown["enforcement"] == "soft"
    assert shown["pod-caps"] == {"exclusive-cpus": 4, "rt-share": 0.1}
    assert shown["reserved-cpus"] == [0, 1]
    assert shown["cgroup"]["version"] == 2
    assert shown["log"] == {"format": "text", "level": "info"}  # a default filled in
    expected = replace(
        NodeConfig(),
        enforcement="soft",
        reserved_cpus=(0, 1),
        pod_caps=replace(NodeConfig().pod_caps, exclusive_cpus=Cap(4)),
        cgroup=replace(NodeConfig().cgroup, version=2),
        source="shown",
    )
    assert parse_config(out, "shown") == expected


def test_the_example_file_holds_the_defaults(capsys):
    # examples/config.yaml (the package's /etc/nri-sla/config.yaml) says its values are
    # the defaults: `show` of it and `default` agree
    _, shown, _ = run(capsys, "show", "--config", str(REPO / "examples" / "config.yaml"))
    _, default, _ = run(capsys, "default")
    assert shown == default


def test_check_prints_each_problem_on_its_own_line(capsys, tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("enforcement: bogus\nlog: {level: loud}\nwatch: {interval-seconds: -1}\n")
    status, out, err = run(capsys, "check", str(path))
    assert status == EXIT_INVALID and out == ""
    lines = err.splitlines()
    assert len(lines) == 3
    assert all(line.startswith(f"nri-sla config check: {path}: ") for line in lines)
    assert [line.split(": ")[2].split()[0] for line in lines] == [
        "enforcement",
        "watch.interval-seconds",
        "log.level",
    ]


def test_check_of_a_missing_or_broken_file_is_one_line(capsys, tmp_path):
    status, _, err = run(capsys, "check", str(tmp_path / "absent.yaml"))
    assert status == EXIT_INVALID and len(err.splitlines()) == 1 and "does not exist" in err
    broken = tmp_path / "broken.yaml"
    broken.write_text("enforcement: [hard\n")
    status, _, err = run(capsys, "check", str(broken))
    assert status == EXIT_INVALID and len(err.splitlines()) == 1 and str(broken) in err
