"""`nri-sla containerd-config`: the containerd keys nri-sla needs, for the installed
containerd, printed, or written so that every other key of the node stays as it was.

containerd 2.x: a drop-in that the main config's `imports` reads, in the main config's
config version, its runc `pod_annotations` the node's list plus the SLA keys.
containerd 1.7 (merges imports by whole plugin section): the main config patched in
place, its original kept beside it (nri_plugin.commands.containerd_patch).
With --write, the hook's base spec is made from the node's own default spec
(nri_plugin.commands.basespec). `--dry-run` shows the diffs and writes nothing; a
rewrite with the same settings leaves the files untouched; `--remove` puts back what
was there. A file at the drop-in path that nri-sla did not write is never overwritten.
What can break a node is opt-in: `--fail-closed` and `--systemd-cgroup`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tomllib
from typing import Any

from nri_plugin.commands import basespec, containerd_patch
from nri_plugin.commands.configfiles import diff, read_text, remove, write_atomically
from nri_plugin.commands.containerd_dropin import (
    DEFAULT_BASE_SPEC,
    DEFAULT_DROPIN,
    DEFAULT_MAIN_CONFIG,
    PODS_TO_TOLERATE,
    TOLERATION_KEYS,
    ContainerdVersion,
    DropinOptions,
    config_version_of,
    existing_pod_annotations,
    imported_by,
    owned_keys,
    parse_version,
    render,
    written_by_nri_sla,
)
from nri_plugin.errors import InvalidInput, SlaFailure, Unavailable
from nri_plugin.value import replace

PROG = "nri-sla containerd-config"
# (path, its text now or None, the text wanted or None: removed)
FileChange = tuple[str, str | None, str | None]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--containerd-version",
        metavar="X.Y",
        default=None,
        help="configure for this containerd (1.7 or 2.x) instead of the "
        "one `containerd --version` reports",
    )
    parser.add_argument(
        "--write",
        nargs="?",
        const=DEFAULT_DROPIN,
        default=None,
        metavar="PATH",
        help="write the settings (containerd 2.x: the "
        f"drop-in PATH, default {DEFAULT_DROPIN}; 1.7: into --main-config, "
        "its original kept beside it) and the hook's base spec",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="with --write or --remove: show the diffs, write nothing",
    )
    parser.add_argument(
        "--remove",
        action="store_true",
        help="put back what --write changed: take out the drop-in, "
        "restore a patched main config, delete the base spec",
    )
    parser.add_argument(
        "--fail-closed",
        action="store_true",
        help="turn on the NRI validator requiring nri-sla (containerd "
        ">= 2.2): no container starts without nri-sla, so the pods "
        "that start before it need the toleration annotation first",
    )
    parser.add_argument(
        "--systemd-cgroup",
        choices=("true", "false"),
        default=None,
        help="set runc's SystemdCgroup (must match the kubelet's "
        "cgroupDriver; default: leave it as it is)",
    )
    parser.add_argument(
        "--base-runtime-spec",
        default=DEFAULT_BASE_SPEC,
        metavar="PATH",
        help="where --write makes the OCI hook's base spec, from `ctr oci "
        f"spec` of this containerd (default {DEFAULT_BASE_SPEC})",
    )
    parser.add_argument(
        "--no-base-spec",
        action="store_true",
        help="make no base spec: no base_runtime_spec, the OCI hook fallback stays off",
    )
    parser.add_argument(
        "--ctr",
        default=None,
        metavar="PATH",
        help="the ctr of this containerd (default: beside containerd, else on PATH)",
    )
    parser.add_argument(
        "--hook-binary",
        default=None,
        metavar="PATH",
        help="the nri-sla the base spec's hook runs (default: the one running this command)",
    )
    parser.add_argument(
        "--main-config",
        default=DEFAULT_MAIN_CONFIG,
        metavar="PATH",
        help=f"containerd's config (default {DEFAULT_MAIN_CONFIG})",
    )
    parser.add_argument(
        "--root",
        default="/",
        metavar="DIR",
        help="with --remove: the node's / the paths are under, as when a "
        "package is removed from another root (default /)",
    )


def _installed_version() -> ContainerdVersion | None:
    try:
        out = subprocess.run(
            ["containerd", "--version"], capture_output=True, text=True, timeout=10, check=True
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return parse_version(out, "containerd --version")


def _parse(path: str, text: str | None) -> dict[str, Any] | None:
    if text is None:
        return None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InvalidInput(f"{path}: not valid TOML: {exc}") from None


def _warn_unless_imported(main_config: str, main: dict[str, Any] | None, dropin: str) -> None:
    if main is None:
        print(
            f"{PROG}: {main_config} does not exist: containerd reads {dropin} only when "
            f"its config's imports names it",
            file=sys.stderr,
        )
    elif not imported_by(main, dropin):
        print(
            f"{PROG}: {main_config} does not import {dropin}: add imports = "
            f'["{os.path.dirname(dropin)}/*.toml"] at its top (before any table)',
            file=sys.stderr,
        )


def _base_spec_text(args: argparse.Namespace, version: ContainerdVersion) -> str | None:
    """The base spec to write, or None (said why on stderr)."""
    if args.no_base_spec:
        return None
    ctr = args.ctr or basespec.find_ctr(shutil.which("containerd"))
    try:
        if ctr is None:
            raise Unavailable("no ctr beside containerd or on PATH (give --ctr)")
        default = basespec.node_default_spec(ctr, version)
    except SlaFailure as exc:
        print(
            f"{PROG}: no base_runtime_spec, the OCI hook fallback stays off: {exc}", file=sys.stderr
        )
        return None
    return basespec.with_hook(default, args.hook_binary or basespec.hook_binary())


def _changes(
    args: argparse.Namespace,
    version: ContainerdVersion,
    options: DropinOptions,
    main_text: str | None,
) -> list[FileChange]:
    """Every file --write touches."""
    changes: list[FileChange] = []
    spec = _base_spec_text(args, version)
    if spec is not None:
        options = replace(options, base_spec=args.base_runtime_spec)
        changes.append((args.base_runtime_spec, read_text(args.base_runtime_spec), spec))
    old_dropin = read_text(args.write)
    ours = old_dropin is not None and written_by_nri_sla(old_dropin)
    if version.merges_imports_by_key:
        if old_dropin is not None and not ours:
            raise InvalidInput(
                f"{args.write} exists and was not written by nri-sla: "
                f"move it away or give another --write path"
            )
        changes.append((args.write, old_dropin, render(options)))
        return changes
    before = containerd_patch.original(args.main_config, main_text)
    changes.append(
        (
            args.main_config,
            main_text,
            containerd_patch.patched(
                args.main_config, before, owned_keys(options), options.config_version
            ),
        )
    )
    if ours:  # an earlier nri-sla's 1.7 drop-in: it resets the CRI plugin's other keys
        changes.append((args.write, old_dropin, None))
    return changes


def _apply(args: argparse.Namespace, changes: list[FileChange]) -> None:
    for path, old, new in changes:
        if old == new:
            print(f"{path}: unchanged")
        elif new is None:
            remove(path)
            print(f"took out {path}")
        elif path == args.main_config:
            containerd_patch.write(path, old, new)
            print(f"patched {path} (the original: {containerd_patch.backup_path(path)})")
        else:
            write_atomically(path, new)
            print(f"wrote {path}")


def _named_anywhere(directory: str, needle: str) -> bool:
    for top, _dirs, files in os.walk(directory):
        for name in files:
            text = read_text(os.path.join(top, name)) if name.endswith(".toml") else None
            if text is not None and needle in text:
                return True
    return False


def _remove(args: argparse.Namespace) -> int:
    dropin = args.write or DEFAULT_DROPIN
    old = read_text(dropin)
    main_text = read_text(args.main_config)
    changes: list[FileChange] = []
    if old is not None and written_by_nri_sla(old):
        changes.append((dropin, old, None))
    if containerd_patch.is_patched(main_text):
        changes.append(
            (args.main_config, main_text, containerd_patch.original(args.main_config, main_text))
        )
    spec = read_text(args.base_runtime_spec)
    if args.dry_run:
        sys.stdout.write("".join(diff(p, o, n) for p, o, n in changes) or "no change\n")
        return 0
    for path, _old, _new in changes:
        if path == args.main_config:
            containerd_patch.restore(path)
            print(f"restored {path}")
        else:
            remove(path)
            print(f"took out {path}")
    if spec is not None:
        # containerd's config names the spec as the node sees it
        named = "/" + os.path.relpath(args.base_runtime_spec, args.root)
        if _named_anywhere(os.path.dirname(args.main_config), named):
            print(
                f"{PROG}: kept {args.base_runtime_spec}: containerd's config still names "
                f"it (base_runtime_spec)",
                file=sys.stderr,
            )
        else:
            remove(args.base_runtime_spec)
            print(f"took out {args.base_runtime_spec}")
    if changes:
        print("restart containerd to apply it (systemctl restart containerd)")
    return 0


def main(args: argparse.Namespace) -> int:
    if args.dry_run and args.write is None and not args.remove:
        raise InvalidInput("--dry-run needs --write or --remove (the files to diff against)")
    if args.remove:
        return _remove(args)
    if args.containerd_version is not None:
        version = parse_version(args.containerd_version, "--containerd-version")
    else:
        installed = _installed_version()
        if installed is None:
            raise Unavailable("cannot run `containerd --version`: give --containerd-version")
        version = installed
    main_text = read_text(args.main_config)
    pristine = containerd_patch.original(args.main_config, main_text)
    main = _parse(args.main_config, pristine)
    config_version = config_version_of(main, version)
    options = DropinOptions(
        version,
        config_version,
        existing_pod_annotations(main, config_version),
        fail_closed=args.fail_closed,
        systemd_cgroup=None if args.systemd_cgroup is None else args.systemd_cgroup == "true",
    )
    owned_keys(options)  # a refused option is the only line
    if args.fail_closed:
        print(
            f"{PROG}: before restarting containerd, annotate with "
            f'{" and ".join(TOLERATION_KEYS)}: "true": {"; ".join(PODS_TO_TOLERATE)}',
            file=sys.stderr,
        )
    if args.write is None:
        if not version.merges_imports_by_key:
            print(
                f"{PROG}: containerd {version} merges an imported file by whole plugin "
                f"section: put these keys into {args.main_config} itself (--write does)",
                file=sys.stderr,
            )
        sys.stdout.write(render(options))
        return 0
    changes = _changes(args, version, options, main_text)
    if args.dry_run:
        sys.stdout.write("".join(diff(p, o, n) for p, o, n in changes) or "no change\n")
        return 0
    _apply(args, changes)
    if any(old != new for _p, old, new in changes):
        print("restart containerd to apply it (systemctl restart containerd)")
    if version.merges_imports_by_key:
        _warn_unless_imported(args.main_config, main, args.write)
    return 0
