"""Reading, diffing and atomically replacing the node's config files (containerd's, the
hook's base spec) for `nri-sla containerd-config`."""

from __future__ import annotations

import difflib
import os

from nri_plugin.errors import InternalFailure, InvalidInput


def read_text(path: str) -> str | None:
    """The file's text, None when it does not exist."""
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (FileNotFoundError, NotADirectoryError):
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"{path}: cannot be read: {exc}") from None


def write_atomically(path: str, text: str, mode: int = 0o644) -> None:
    tmp = f"{path}.nri-sla-tmp"
    try:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)  # containerd never reads half a file
    except OSError as exc:
        raise InternalFailure(f"cannot write {path}: {exc.strerror or exc}") from None


def remove(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise InternalFailure(f"cannot remove {path}: {exc.strerror or exc}") from None


def diff(path: str, old: str | None, new: str | None) -> str:
    """A unified diff from old to new (None: no file), or "" when they are the same."""
    return "".join(
        difflib.unified_diff(
            (old or "").splitlines(keepends=True),
            (new or "").splitlines(keepends=True),
            fromfile=path if old is not None else "/dev/null",
            tofile=path if new is not None else "/dev/null",
        )
    )
