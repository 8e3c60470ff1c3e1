"""Shared by the record tests: a key, a container id, a node's limits, raw signing."""

from __future__ import annotations

import hmac
from pathlib import Path

from nri_plugin.plan.record import RecordLimits
from nri_plugin.topology.snapshot import load_snapshot

KEY = bytes(range(32))
OWNER = "3f1c0ffee"
SNAPSHOT = load_snapshot(Path(__file__).resolve().parents[2] / "examples" / "dgx-like.yaml")
NODE = RecordLimits(
    max_cpu=max(SNAPSHOT.topology.online),
    max_node=max(SNAPSHOT.topology.node_ids),
    inventory=SNAPSHOT.inventory,
)


def signed_text(text: str, owner: str = OWNER, key: bytes = KEY) -> str:
    """JSON object text authenticated as documented: HMAC-SHA256 over "<owner>\\0<text>",
    added as the last member (also for texts json.dumps could not produce)."""
    mac = hmac.digest(key, f"{owner}\0{text}".encode(), "sha256").hex()
    return f'{text[:-1]},"mac":"{mac}"}}'
