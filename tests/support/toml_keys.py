"""containerd configs as flat key paths, for comparing two of them key by key."""

from __future__ import annotations

from typing import Any


def flat(doc: dict[str, Any], prefix: tuple[str, ...] = ()) -> dict[tuple[str, ...], Any]:
    """Every leaf of a parsed TOML document by its key path; a table is no leaf."""
    out: dict[tuple[str, ...], Any] = {}
    for key, value in doc.items():
        if isinstance(value, dict):
            out.update(flat(value, (*prefix, key)))
        else:
            out[(*prefix, key)] = value
    return out
