"""containerd 1.7: nri-sla's keys patched into the main config in place.

containerd 1.7 merges an imported file by whole plugin section: a drop-in naming the CRI
plugin resets every CRI key it does not repeat (SystemdCgroup, sandbox_image, registry
config_path, ...). So on 1.7 the main config is edited with a style-keeping TOML editor:
every other key, comment and table stays as it was. The original is kept beside it
(config.toml.nri-sla-orig) and the patched file's first line records a digest of what
nri-sla wrote, so removal puts the original back byte for byte, and refuses (saying what
to do) when someone edited the file since.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from typing import Any

import tomlkit
from tomlkit.exceptions import TOMLKitError

from nri_plugin.commands.configfiles import read_text, remove, write_atomically
from nri_plugin.commands.containerd_dropin import KeyPath, set_key
from nri_plugin.errors import InternalFailure, InvalidInput

MARKER = "# Patched by `nri-sla containerd-config`"
BACKUP_SUFFIX = ".nri-sla-orig"
NO_ORIGINAL = "none (no file was there)"
_FIRST_LINE = re.compile(
    re.escape(MARKER) + r" \(sha256 ([0-9a-f]{64})\); the original: "
    r"(.*)\n"
)


def backup_path(main: str) -> str:
    return main + BACKUP_SUFFIX


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def is_patched(text: str | None) -> bool:
    return text is not None and text.startswith(MARKER)


def original(main: str, current: str | None) -> str | None:
    """The main config as it was before nri-sla (None: there was none)."""
    if current is None or not is_patched(current):
        return current
    match = _FIRST_LINE.match(current)
    if match is None or _digest(current[match.end() :]) != match.group(1):
        raise InvalidInput(
            f"{main} was edited after nri-sla patched it: nri-sla leaves it alone; its "
            f"original is {backup_path(main)}: merge your edits into it, or take nri-sla's "
            f"keys out by hand (docs/install.md lists them) and drop the first line"
        )
    if match.group(2) == NO_ORIGINAL:
        return None
    text = read_text(backup_path(main))
    if text is None:
        raise InvalidInput(
            f"{main} says nri-sla patched it but {backup_path(main)} is "
            f"gone: take nri-sla's keys out by hand (docs/install.md)"
        )
    return text


def patched(
    main: str, before: str | None, keys: list[tuple[KeyPath, Any]], config_version: int
) -> str:
    """The main config `before` with nri-sla's keys set, under the marker line."""
    try:
        doc = tomlkit.parse(before or "")
    except TOMLKitError as exc:
        raise InvalidInput(f"{main}: not valid TOML: {exc}") from None
    if before is None:
        doc["version"] = config_version
    for path, value in keys:
        set_key(doc, path, value)
    body = tomlkit.dumps(doc)
    origin = backup_path(main) if before is not None else NO_ORIGINAL
    return f"{MARKER} (sha256 {_digest(body)}); the original: {origin}\n{body}"


def write(main: str, current: str | None, text: str) -> None:
    """Put the patched text in place, keeping the original first (once)."""
    mode = 0o644
    if current is not None:
        mode = os.stat(main).st_mode & 0o777
        if not is_patched(current):
            try:
                shutil.copy2(main, backup_path(main))
            except OSError as exc:
                raise InternalFailure(
                    f"cannot keep {main} as {backup_path(main)}: {exc.strerror or exc}"
                ) from None
    write_atomically(main, text, mode)


def restore(main: str) -> bool:
    """Put back the main config nri-sla patched; False when it was not patched."""
    current = read_text(main)
    if not is_patched(current):
        return False
    if original(main, current) is None:
        remove(main)
        return True
    try:
        os.replace(backup_path(main), main)  # the original's bytes and mode
    except OSError as exc:
        raise InternalFailure(
            f"cannot put {backup_path(main)} back as {main}: {exc.strerror or exc}"
        ) from None
    return True
