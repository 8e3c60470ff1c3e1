"""The man page nri-sla(1) and the bash completion, made from the command line's own parsers
(nri_plugin.cli): they list exactly the commands and flags the code has.

    python3 packaging/deb/cli_docs.py man [SITE] > nri-sla.1
    python3 packaging/deb/cli_docs.py bash > nri-sla   (bash-completion's completions dir)

Run with nri_plugin importable (build.sh: the package's staged site dir on PYTHONPATH);
SITE is where that dir is installed: the defaults the help shows (the demo's examples)
name it instead of the build's staging dir.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from dataclasses import dataclass
from pathlib import Path

import nri_plugin
from nri_plugin import __version__
from nri_plugin.cli import COMMANDS, HOOK, HOOK_HELP, _top_parser


@dataclass(frozen=True)
class Command:
    name: str  # "config check" for a subcommand's action
    summary: str
    parser: argparse.ArgumentParser


def commands() -> list[Command]:
    """Every command, and each action of a command that has them, as its parser sees it."""
    found = []
    for name, (module_name, summary) in COMMANDS.items():
        parser = argparse.ArgumentParser(prog=f"nri-sla {name}", description=summary)
        importlib.import_module(f"nri_plugin.commands.{module_name}").add_arguments(parser)
        found.append(Command(name, summary, parser))
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                helps = {a.dest: a.help for a in action._choices_actions}
                found += [
                    Command(f"{name} {sub}", helps.get(sub) or "", subparser)
                    for sub, subparser in action.choices.items()
                ]
    return found


def _options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if a.option_strings and a.help != argparse.SUPPRESS]


def _roff(text: str) -> str:
    escaped = text.replace("\\", "\\e").replace("-", "\\-")
    return "\\&" + escaped if escaped.startswith((".", "'")) else escaped


def man_page() -> str:
    lines = [
        f'.TH NRI-SLA 1 "" "nri-sla {__version__}" "User Commands"',
        ".SH NAME",
        "nri-sla \\- " + _roff(_top_parser().description or ""),
        ".SH SYNOPSIS",
        ".B nri-sla",
        ".I COMMAND",
        "[\\fIOPTIONS\\fR]",
        ".SH DESCRIPTION",
        _roff(
            "Each command below is one mode of nri-sla; `nri-sla COMMAND --help` "
            "prints its usage. The documentation is in /usr/share/doc/nri-sla/."
        ),
        ".SH COMMANDS",
    ]
    for command in commands():
        lines += [".SS " + _roff(f"nri-sla {command.name}"), _roff(command.summary)]
        for action in _options(command.parser):
            if "-h" in action.option_strings:
                continue
            metavar = (
                ""
                if action.nargs == 0
                else " "
                + (
                    action.metavar
                    or (
                        ("{" + ",".join(action.choices) + "}")
                        if action.choices
                        else action.dest.upper()
                    )
                )
            )
            lines += [
                ".TP",
                "\\fB" + _roff(", ".join(action.option_strings)) + "\\fR" + _roff(str(metavar)),
                _roff(action.help or ""),
            ]
    lines += [
        ".SS " + _roff(f"nri-sla {HOOK}"),
        _roff(f"{HOOK_HELP}: run by the container runtime (docs/hook.md)."),
        ".SH EXIT STATUS",
        _roff(
            "0 success; 1 refused (hard mode: the SLA cannot be honoured); 2 invalid "
            "input (an annotation, the node config, the command line); 3 internal "
            "failure; 4 unavailable (a port in use, no plugin answering)."
        ),
        ".SH FILES",
        ".TP",
        "/etc/nri\\-sla/config.yaml",
        "the node config",
        ".TP",
        "/etc/nri\\-sla/base\\-runtime\\-spec.json",
        "containerd's default OCI spec with the nri\\-sla hook added (its "
        "base_runtime_spec), made by nri\\-sla containerd\\-config \\-\\-write",
        ".SH SEE ALSO",
        "containerd(8), /usr/share/doc/nri\\-sla/install.md",
    ]
    return "\n".join(lines) + "\n"


def bash_completion() -> str:
    """A completion function: commands after `nri-sla`, then that command's flags (and the
    actions of a command that has them)."""
    cases = []
    for command in commands():
        words = [w for a in _options(command.parser) for w in a.option_strings]
        for action in command.parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                words += list(action.choices)
        cases.append(f'        "{command.name}") echo "{" ".join(words)}" ;;')
    names = " ".join([*COMMANDS, HOOK])
    return (
        "\n".join(
            [
                "# bash completion for nri-sla (made by packaging/deb/cli_docs.py)",
                "_nri_sla_words() {",
                '    case "$1" in',
                *cases,
                "    esac",
                "}",
                "_nri_sla() {",
                "    local cur=${COMP_WORDS[COMP_CWORD]} words=",
                '    if [ "$COMP_CWORD" -eq 1 ]; then',
                f'        COMPREPLY=($(compgen -W "{names} --help --version" -- "$cur"))',
                "        return",
                "    fi",
                "    # an action of the command (config check), else the command itself",
                '    if [ "$COMP_CWORD" -gt 2 ]; then',
                '        words=$(_nri_sla_words "${COMP_WORDS[1]} ${COMP_WORDS[2]}")',
                "    fi",
                '    [ -n "$words" ] || words=$(_nri_sla_words "${COMP_WORDS[1]}")',
                '    COMPREPLY=($(compgen -W "$words" -- "$cur"))',
                "}",
                "complete -o default -F _nri_sla nri-sla",
            ]
        )
        + "\n"
    )


def installed(text: str, site: str) -> str:
    """`text` naming the installed site dir where it names the one nri_plugin runs from."""
    staged = str(Path(nri_plugin.__file__).resolve().parents[1])
    return text.replace(_roff(staged), _roff(site)).replace(staged, site)


if __name__ == "__main__":
    kinds = {"man": man_page, "bash": bash_completion}
    if sys.argv[1:2] not in ([k] for k in kinds) or len(sys.argv) > 3:
        sys.exit(f"usage: {sys.argv[0]} {'|'.join(kinds)} [SITE]")
    output = kinds[sys.argv[1]]()
    sys.stdout.write(installed(output, sys.argv[2]) if len(sys.argv) == 3 else output)
