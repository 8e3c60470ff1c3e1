"""`nri-sla containerd-config`: the containerd settings nri-sla needs, for the installed
containerd version, printed or written as a drop-in that containerd's `imports` reads.

`--dry-run` shows the unified diff against the drop-in that is there and writes nothing.
A rewrite with the same settings leaves the file untouched. A file at the drop-in path
that nri-sla did not write is never overwritten. What can break a node is opt-in:
`--fail-closed` (the validator) and `--systemd-cgroup` (nri_plugin.commands.containerd_dropin).
"""

from __future__ import annotations

import argparse
import difflib
import os
import subprocess
import sys
import tomllib

from nri_plugin.commands.containerd_dropin import (
    DEFAULT_BASE_SPEC,
    DEFAULT_DROPIN,
    DEFAULT_MAIN_CONFIG,
    PODS_TO_TOLERATE,
    TOLERATION_KEYS,
    ContainerdVersion,
    DropinOptions,
    imported_by,
    parse_version,
    render,
    written_by_nri_sla,
)
from nri_plugin.errors import InternalFailure, InvalidInput, Unavailable

PROG = "nri-sla containerd-config"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--containerd-version", metavar="X.Y", default=None,
                        help="configure for this containerd (1.7 or 2.x) instead of the "
                             "one `containerd --version` reports")
    parser.add_argument("--write", nargs="?", const=DEFAULT_DROPIN, default=None,
                        metavar="PATH", help="write the drop-in (default path "
                        f"{DEFAULT_DROPIN}) instead of printing it")
    parser.add_argument("--dry-run", action="store_true",
                        help="with --write: show the diff against the file there, "
                             "write nothing")
    parser.add_argument("--fail-closed", action="store_true",
                        help="turn on the NRI validator requiring nri-sla (containerd "
                             ">= 2.2): no container starts without nri-sla, so the pods "
                             "that start before it need the toleration annotation first")
    parser.add_argument("--systemd-cgroup", choices=("true", "false"), default=None,
                        help="set runc's SystemdCgroup (must match the kubelet's "
                             "cgroupDriver; default: leave it as it is)")
    parser.add_argument("--base-runtime-spec", default=DEFAULT_BASE_SPEC, metavar="PATH",
                        help="the OCI hook's base spec, set as base_runtime_spec only "
                             f"when the file exists (default {DEFAULT_BASE_SPEC})")
    parser.add_argument("--main-config", default=DEFAULT_MAIN_CONFIG, metavar="PATH",
                        help="containerd's config, checked to import the drop-in "
                             f"(default {DEFAULT_MAIN_CONFIG})")


def _installed_version() -> ContainerdVersion | None:
    try:
        out = subprocess.run(["containerd", "--version"], capture_output=True, text=True,
                             timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return parse_version(out, "containerd --version")


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (FileNotFoundError, NotADirectoryError):
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"{path}: cannot be read: {exc}") from None


def _write_atomically(path: str, text: str) -> None:
    tmp = f"{path}.nri-sla-tmp"
    try:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)  # containerd never reads half a file
    except OSError as exc:
        raise InternalFailure(f"cannot write {path}: {exc.strerror or exc}") from None


def _warn_unless_imported(main_config: str, dropin: str) -> None:
    text = _read(main_config)
    if text is None:
        print(f"{PROG}: {main_config} does not exist: containerd reads {dropin} only when "
              f"its config's imports names it", file=sys.stderr)
        return
    try:
        imported = imported_by(tomllib.loads(text), dropin)
    except tomllib.TOMLDecodeError as exc:
        raise InvalidInput(f"{main_config}: not valid TOML: {exc}") from None
    if not imported:
        print(f"{PROG}: {main_config} does not import {dropin}: add imports = "
              f"[\"{os.path.dirname(dropin)}/*.toml\"] at its top (before any table)",
              file=sys.stderr)


def main(args: argparse.Namespace) -> int:
    if args.containerd_version is not None:
        version = parse_version(args.containerd_version, "--containerd-version")
    else:
        version = _installed_version()
        if version is None:
            raise Unavailable("cannot run `containerd --version`: give --containerd-version")
    base_spec = args.base_runtime_spec if os.path.isfile(args.base_runtime_spec) else None
    systemd = None if args.systemd_cgroup is None else args.systemd_cgroup == "true"
    text = render(DropinOptions(version, fail_closed=args.fail_closed,
                                systemd_cgroup=systemd, base_spec=base_spec))
    if args.fail_closed:
        print(f"{PROG}: before restarting containerd, annotate with "
              f"{' and '.join(TOLERATION_KEYS)}: \"true\": {'; '.join(PODS_TO_TOLERATE)}",
              file=sys.stderr)
    if base_spec is None:
        print(f"{PROG}: no base_runtime_spec: {args.base_runtime_spec} is not there (the "
              f"OCI hook fallback stays off)", file=sys.stderr)
    if args.write is None:
        if args.dry_run:
            raise InvalidInput("--dry-run needs --write (the file to diff against)")
        sys.stdout.write(text)
        return 0
    old = _read(args.write)
    if old is not None and not written_by_nri_sla(old):
        raise InvalidInput(f"{args.write} exists and was not written by nri-sla: "
                           f"move it away or give another --write path")
    if args.dry_run:
        diff = difflib.unified_diff((old or "").splitlines(keepends=True),
                                    text.splitlines(keepends=True),
                                    fromfile=args.write if old is not None else "/dev/null",
                                    tofile=args.write)
        sys.stdout.write("".join(diff) or f"{args.write}: no change\n")
        return 0
    if old == text:
        print(f"{args.write}: unchanged")
    else:
        _write_atomically(args.write, text)
        print(f"wrote {args.write}: restart containerd to apply it "
              f"(systemctl restart containerd)")
    _warn_unless_imported(args.main_config, args.write)
    return 0
