"""The docs say what is so: README.md and docs/*.md checked against the code.

* Every `nri-sla ...` command in a fenced block runs here (from the repository root, as
  a user who cloned it would) unless SKIPPED says why it cannot, and where the block
  shows output after a `$ ` command, that output is what the command prints.
* The CLI flags the docs show with a subcommand exist in that subcommand's parser, and
  every flag of every subcommand is named somewhere in the docs.
* docs/config.md's tables name exactly the node config's keys.
* operations.md's decision lines are the plugin's own (through the demo).

Comparison of shown output (stdout and stderr as a terminal shows them, interleaved), byte
for byte except: trailing blanks of each line are ignored, and a line that is exactly
`...` stands for any number of lines left out (the parts around it must appear in order).
Without `...` the shown output is the whole output.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from nri_plugin.cli import COMMANDS, HOOK
from nri_plugin.hook.options import FLAGS as HOOK_FLAGS

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
SUBCOMMANDS = {*COMMANDS, HOOK}
# Fenced blocks whose lines are shell commands or their output.
SHELL_BLOCKS = {"", "sh", "text", "console", "bash"}
TIMEOUT_S = 120

# Commands shown in the docs that cannot run here, by (file, command as written without
# its `$ ` and trailing comment) -> why. A command listed here that the docs no longer
# show fails test_skip_list_is_current, so the list stays exact.
SKIPPED: dict[tuple[str, str], str] = {
    # Need files a reader supplies (their own manifests), not in the repository.
    ("README.md", "nri-sla validate deploy/*.yaml"): "the reader's manifests",
    ("README.md", "nri-sla validate --json deploy/*.yaml"): "the reader's manifests",
    ("README.md", "nri-sla explain pod.yaml"): "the reader's manifest, this host's node",
    (
        "README.md",
        "nri-sla explain --nri-version v0.11.0 pod.yaml",
    ): "the reader's manifest, this host's node",
    (
        "docs/sla.md",
        "nri-sla validate bomb.yaml",
    ): "the alias bomb is written by tests/commands/test_manifest_safety.py, which checks "
    "this output",
    (
        "docs/operations.md",
        "nri-sla explain --inventory broken.yaml pod.yaml",
    ): "a broken snapshot of the reader's; tests/commands/test_exit_statuses.py checks the line",
    # This host's hardware: the output depends on the machine the tests run on.
    ("docs/install.md", "nri-sla inventory"): "this host's CPUs and GPUs",
    ("docs/placement.md", "nri-sla inventory"): "this host's CPUs and GPUs",
    ("docs/placement.md", "nri-sla inventory --json"): "this host's CPUs and GPUs",
    (
        "docs/placement.md",
        "nri-sla inventory --save node.yaml",
    ): "this host's CPUs and GPUs, and writes a file",
    (
        "docs/placement.md",
        "nri-sla inventory --source sysfs --sysfs-root /tmp/fake-sys --proc-root /tmp/fake-proc",
    ): "a fake sysfs the reader builds (tests/topology build them)",
    # Root, a runtime or a kubelet on this host.
    (
        "docs/operations.md",
        "nri-sla run --metrics-address 127.0.0.1:9810",
    ): "another process must hold the port; tests/ops/test_health_cli.py checks the line",
    ("docs/operations.md", "sudo nri-sla status"): "root and a running plugin",
    (
        "docs/device-plugin.md",
        "nri-sla device-plugin [--config FILE] [--inventory FILE] "
        "[--socket-dir DIR] [--log-format text|json]",
    ): "a synopsis, not a command",
    # The node's own files: /etc/nri-sla and /etc/containerd, an installed containerd.
    (
        "docs/config.md",
        "nri-sla config check /etc/nri-sla/config.yaml",
    ): "the node's config file; tests/commands/test_config_command.py checks its lines",
    (
        "docs/config.md",
        "nri-sla config default > config.yaml",
    ): "writes a file; tests/commands/test_config_command.py checks that check accepts it",
    (
        "docs/install.md",
        "nri-sla config check /etc/nri-sla/config.yaml",
    ): "the node's config file; tests/commands/test_config_command.py",
    (
        "docs/install.md",
        "nri-sla config check",
    ): "the node's /etc/nri-sla/config.yaml; tests/commands/test_config_command.py",
    (
        "docs/install.md",
        "nri-sla containerd-config",
    ): "an installed containerd (its --version); tests/commands/test_containerd_config.py "
    "runs it with --containerd-version",
    (
        "docs/install.md",
        "nri-sla containerd-config --write --dry-run",
    ): "the node's /etc/containerd; tests/commands/test_containerd_config.py",
    (
        "docs/install.md",
        "nri-sla containerd-config --write",
    ): "writes into /etc/containerd; tests/commands/test_containerd_config.py",
}


@dataclass(frozen=True)
class Shown:
    """One command of a fenced block, and the output shown after it (None: none shown)."""

    doc: str
    line: int
    command: str  # without `$ ` and the trailing comment
    output: list[str] | None


def fenced_blocks(text: str):
    """(info string, first line number, lines) of each fenced block of a Markdown text."""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        match = re.match(r"^(\s*)```(\S*)\s*$", lines[i])
        if not match:
            i += 1
            continue
        indent, info = match.groups()
        end = i + 1
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        yield info, i + 2, [line[len(indent) :] for line in lines[i + 1 : end]]
        i = end + 1


def _command(line: str) -> str | None:
    """The `nri-sla` command a block line holds, without `$ `/`sudo` and comments."""
    text = line[2:] if line.startswith("$ ") else line
    try:
        words = shlex.split(text, comments=True)
    except ValueError:
        return None
    if words[:1] == ["sudo"]:
        words = words[1:]
    if len(words) < 2 or words[0] != "nri-sla" or words[1] not in SUBCOMMANDS:
        return None  # output such as `nri-sla demo: simulated ...`, or prose
    return " ".join(["sudo", *words] if text.startswith("sudo ") else words)


def shown_commands() -> list[Shown]:
    found = []
    for path in DOCS:
        doc = str(path.relative_to(REPO))
        for info, first, lines in fenced_blocks(path.read_text()):
            if info not in SHELL_BLOCKS:
                continue
            for n, line in enumerate(lines):
                command = _command(line)
                if command is None:
                    continue
                output = None
                if line.startswith("$ "):
                    rest = lines[n + 1 :]
                    stop = next((i for i, x in enumerate(rest) if x.startswith("$ ")), len(rest))
                    output = rest[:stop]
                found.append(Shown(doc, first + n, command, output))
    return found


SHOWN = shown_commands()
RUNNABLE = [s for s in SHOWN if (s.doc, s.command) not in SKIPPED]


def run_shown(command: str) -> subprocess.CompletedProcess:
    words = shlex.split(command)
    assert words[0] == "nri-sla", command
    # As a terminal shows it: both streams in one, in the order they were written.
    return subprocess.run(
        [sys.executable, "-m", "nri_plugin.cli", *words[1:]],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=TIMEOUT_S,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def matches(shown: list[str], actual: list[str]) -> bool:
    """`shown` equals `actual` (trailing blanks aside), a `...` line standing for any run
    of lines."""
    shown = [line.rstrip() for line in shown]
    actual = [line.rstrip() for line in actual]
    parts: list[list[str]] = [[]]
    for line in shown:
        if line == "...":
            parts.append([])
        else:
            parts[-1].append(line)
    if len(parts) == 1:
        return shown == actual
    first, *middle, last = parts
    if actual[: len(first)] != first or (last and actual[-len(last) :] != last):
        return False
    at, end = len(first), len(actual) - len(last)
    for part in middle:
        while at + len(part) <= end and actual[at : at + len(part)] != part:
            at += 1
        if at + len(part) > end:
            return False
        at += len(part)
    return at <= end


def test_the_docs_show_commands():
    # the parser finds what it should: a regression here would silently check nothing
    assert len(SHOWN) >= 20 and len(RUNNABLE) >= 8
    assert any(s.output for s in RUNNABLE)


def test_skip_list_is_current():
    shown = {(s.doc, s.command) for s in SHOWN}
    assert set(SKIPPED) - shown == set(), "skipped commands the docs no longer show"


@pytest.mark.parametrize("shown", RUNNABLE, ids=lambda s: f"{s.doc}:{s.line}")
def test_shown_command_runs_and_prints_what_is_shown(shown: Shown):
    out = run_shown(shown.command)
    assert "Traceback" not in out.stdout, out.stdout
    if shown.output is None:
        # shown as a usage example: it must work (0), or refuse an SLA as documented (1);
        # a usage error (2) means the docs show a command line the parser rejects
        assert out.returncode in (0, 1), out.stdout
    else:  # the shown output says what happened (docs/operations.md "Exit statuses")
        assert matches(shown.output, out.stdout.splitlines()), (
            f"{shown.doc}:{shown.line} `{shown.command}` prints:\n{out.stdout}"
        )


def test_matches_normalisation():
    assert matches(["a", "...", "c"], ["a", "b", "b2", "c"])
    assert matches(["a  "], ["a"]) and not matches(["a"], ["a", "b"])
    assert not matches(["a", "...", "d"], ["a", "b", "c"])
    assert matches(["...", "b", "..."], ["a", "b", "c"]) and not matches(["...", "x"], ["a"])


# -- flags ------------------------------------------------------------------------------


def parser_flags(name: str) -> set[str]:
    """The flags `nri-sla NAME` accepts (the hook's own parser for `hook`)."""
    if name == HOOK:
        return {*HOOK_FLAGS, "--help", "-h"}
    parser = argparse.ArgumentParser()
    importlib.import_module(f"nri_plugin.commands.{COMMANDS[name][0]}").add_arguments(parser)
    return {flag for action in parser._actions for flag in action.option_strings}


def visible_flags(name: str) -> set[str]:
    """The long flags of `nri-sla NAME` that --help shows (suppressed ones are internal)."""
    if name == HOOK:
        return set(HOOK_FLAGS)
    parser = argparse.ArgumentParser()
    importlib.import_module(f"nri_plugin.commands.{COMMANDS[name][0]}").add_arguments(parser)
    return {
        flag
        for action in parser._actions
        if action.help != argparse.SUPPRESS
        for flag in action.option_strings
        if flag.startswith("--")
    } - {"--help"}


def flags_used_with_subcommands() -> list[tuple[str, str, str]]:
    """(doc, subcommand, flag) for each flag written after `nri-sla SUB` on the same
    command line (a code line, or an inline code span), up to a pipe, `;`, `&&` or `#`."""
    found = []
    for path in DOCS:
        doc = str(path.relative_to(REPO))
        text = path.read_text()
        spans = re.findall(r"`([^`\n]+)`", text) + text.splitlines()
        for span in spans:
            for match in re.finditer(
                r"\bnri-sla ([a-z-]+)\b([^|;#`]*?)(?=\s*(?:[|;#`]|&&|$))", span
            ):
                sub, rest = match.groups()
                if sub not in SUBCOMMANDS:
                    continue
                for flag in re.findall(r"(?<![\w-])(--?[a-zA-Z][a-z0-9-]*)", rest):
                    found.append((doc, sub, flag))
    return found


def test_every_flag_the_docs_show_exists():
    used = flags_used_with_subcommands()
    assert len(used) >= 30  # the scan finds the docs' flags
    wrong = sorted({(doc, sub, flag) for doc, sub, flag in used if flag not in parser_flags(sub)})
    assert wrong == []


def test_every_flag_is_in_the_docs():
    text = "\n".join(path.read_text() for path in DOCS)
    named = set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", text))
    missing = sorted(
        (sub, flag) for sub in sorted(SUBCOMMANDS) for flag in visible_flags(sub) - named
    )
    assert missing == []


# -- node config keys -------------------------------------------------------------------


def test_config_md_tables_name_exactly_the_config_keys():
    """Every row of docs/config.md's key tables is a key of the schema, and every key of
    the schema has its row (tests/config/test_config.py checks the example and the reload
    lists)."""
    from nri_plugin.config.schema import KEY_ATTRIBUTES

    text = (REPO / "docs" / "config.md").read_text()
    rows = re.findall(r"^\| `([a-z][a-z0-9.-]*)` \|", text, re.M)
    assert len(rows) == len(set(rows)), "a key with two rows"
    assert set(rows) == set(KEY_ATTRIBUTES)


def test_config_md_table_is_the_generated_one(tmp_path):
    """The key table is what `python -m nri_plugin.config.doctable docs/config.md` makes
    from the declarations on the fields of nri_plugin/config/values.py."""
    from nri_plugin.config import doctable

    text = (REPO / "docs" / "config.md").read_text()
    assert doctable.rewrite(text) == text, (
        "run: python -m nri_plugin.config.doctable docs/config.md"
    )
    assert "| `log.level` | `debug` \\| `info` \\| `warning` \\| `error` | `info` |" in text
    # The command rewrites a stale table, and only the table.
    stale = tmp_path / "config.md"
    stale.write_text(text.replace("| `log.level` |", "| `log.old-level` |"))
    command = [sys.executable, "-m", "nri_plugin.config.doctable"]
    assert subprocess.run([*command, str(stale)], cwd=REPO, timeout=TIMEOUT_S).returncode == 0
    assert stale.read_text() == text
    shown = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=TIMEOUT_S)
    assert shown.stdout.splitlines() == doctable.table()
    stale.write_text("no markers\n")
    refused = subprocess.run(
        [*command, str(stale)], cwd=REPO, capture_output=True, text=True, timeout=TIMEOUT_S
    )
    assert refused.returncode == 2 and "markers" in refused.stderr
    assert stale.read_text() == "no markers\n"


# -- decision lines ---------------------------------------------------------------------


def test_operations_md_decision_lines_are_the_plugins():
    """The text and JSON decision lines docs/operations.md shows are what the plugin
    writes for those pods (the demo drives the real plugin; its --verbose log is run's),
    timestamps aside."""
    text = (REPO / "docs" / "operations.md").read_text().split("\n## Logs\n", 1)[1]
    shown = [
        line
        for info, _, lines in fenced_blocks(text)
        if info in ("text", "json")
        for line in lines
        if "sla decision" in line
    ]
    assert len(shown) == 3
    stamp = re.compile(r'"?ts"?[=:]"?\d{4}-\d\d-\d\dT[0-9:.]+Z"?')
    actual = set()
    for log_format in ("text", "json"):
        out = run_shown(
            "nri-sla demo --verbose --log-format "
            f"{log_format} examples/pods/10-inference.yaml examples/pods/30-web.yaml"
        )
        assert out.returncode == 0, out.stdout
        actual |= {
            stamp.sub("TS", line) for line in out.stdout.splitlines() if "sla decision" in line
        }
    for line in shown:
        assert stamp.sub("TS", line) in actual, line


# -- statements an operator reads ---------------------------------------------------------


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_readme_and_explain_help_give_one_nri_version_table():
    from nri_plugin.commands.explain import NRI_RUNTIMES
    from nri_plugin.nri.levels import RUNTIME_NRI

    assert NRI_RUNTIMES in _flat((REPO / "README.md").read_text())
    help_text = _flat(run_shown("nri-sla explain --help").stdout)
    assert NRI_RUNTIMES in help_text
    # Each release the table names speaks that version (nri_plugin.nri.levels).
    for version, claim in re.findall(r"(v0\.\d+\.0): ([^;]+)", NRI_RUNTIMES):
        for runtime, release in re.findall(r"(containerd|CRI-O) (\d+\.\d+(?:\.\d+)?)", claim):
            parts = tuple(int(n) for n in release.split("."))
            parts += (0,) * (3 - len(parts))
            rows = RUNTIME_NRI[runtime.lower()]
            assert [v for first, v in rows if first <= parts][-1] == version, claim


def test_readme_error_example_is_containerds_wording():
    # containerd (2.3.4, 1.7.34) wraps the plugin's answer: "failed to create containerd
    # container: failed to get NRI adjustment for container: <the ttrpc status>", and
    # the plugin answers InvalidArgument for an invalid SLA (nri_plugin.plugin.handlers).
    from nri_plugin.nri.errors import Code
    from nri_plugin.plugin.handlers import STATUS

    readme = (REPO / "README.md").read_text()
    assert (
        "Error: failed to create containerd container: failed to get NRI adjustment for "
        "container: rpc error: code = InvalidArgument desc = sla.nri.io/container.web: "
        "memory.high (12Gi) must be below memory.max (10Gi)"
    ) in readme
    assert STATUS["invalid"] == Code.INVALID_ARGUMENT
    assert "code = Unknown" not in readme
    assert "`FailedPrecondition` for a valid SLA" in readme


def test_example_config_shows_every_key():
    from nri_plugin.config.schema import KEY_ATTRIBUTES

    text = (REPO / "examples" / "config.yaml").read_text()
    sections: dict[str, set[str]] = {}
    section = ""
    for line in text.splitlines():
        match = re.match(r"^( *)([a-z][a-z0-9-]*):", line)
        if match and not line.lstrip().startswith("#"):
            if not match.group(1):
                section = match.group(2)
                sections.setdefault(section, set()).add("")
            else:
                sections.setdefault(section, set()).add(match.group(2))
    shown = {f"{s}.{k}" if k else s for s, keys in sections.items() for k in keys}
    assert set(KEY_ATTRIBUTES) - shown == set()


def test_config_md_key_table_is_one_table():
    lines = (REPO / "docs" / "config.md").read_text().splitlines()
    rows = [i for i, line in enumerate(lines) if re.match(r"^\| `[a-z][a-z0-9.-]*` \|", line)]
    assert rows == list(range(rows[0], rows[-1] + 1)), "a key table broken by other text"


def test_log_levels_are_one_list():
    from nri_plugin.commands.common import add_log_arguments
    from nri_plugin.config.convert import LOG_LEVELS

    parser = argparse.ArgumentParser()
    add_log_arguments(parser)
    [flag] = [a for a in parser._actions if "--log-level" in a.option_strings]
    assert tuple(flag.choices) == LOG_LEVELS
    row = next(
        line
        for line in (REPO / "docs" / "config.md").read_text().splitlines()
        if line.startswith("| `log.level` |")
    )
    cells = re.split(r"(?<!\\)\|", row)  # `\|` inside a cell is no column
    assert tuple(re.findall(r"`(\w+)`", cells[2])) == LOG_LEVELS


def test_demo_config_names_the_namespace_it_lets_use_realtime():
    text = (REPO / "examples" / "demo-config.yaml").read_text()
    allowed = re.search(r"realtime: \[(\w+)\]", text).group(1)
    assert f"`{allowed}` namespace" in text
    assert f"namespace: {allowed}" in (REPO / "examples" / "pods" / "40-latency.yaml").read_text()


def test_docs_cite_no_release_notes_and_give_the_load_test_one_size():
    from tests.e2e.test_load import PODS

    text = "\n".join(path.read_text() for path in DOCS)
    assert "release notes" not in text.lower()  # there are none to read
    about_load = [
        line
        for line in (REPO / "docs" / "e2e.md").read_text().splitlines()
        if re.search(r"test_load|load test|E2E_LOAD", line)
    ]
    sizes = {int(n) for line in about_load for n in re.findall(r"(\d+)[ -]pods?\b", line)}
    assert sizes == {PODS}, sizes


# Development history belongs in the changelog, not in what an operator reads.
HISTORY = re.compile(r"\bissues? #?\d+|\(#\d+\)|\bsession \d+|\bround \d+\b", re.I)
WITHOUT_HISTORY = (
    "README.md",
    "docs/operations.md",
    "docs/e2e.md",
    "docs/config.md",
    "docs/hook.md",
    "docs/install.md",
    "docs/sla.md",
)


@pytest.mark.parametrize("doc", WITHOUT_HISTORY)
def test_operator_docs_carry_no_development_history(doc):
    found = HISTORY.findall((REPO / doc).read_text())
    assert found == [], found
