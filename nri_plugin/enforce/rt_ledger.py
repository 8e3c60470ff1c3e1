"""What nri-sla raised in the RT ancestors of containers (cgroup v1), so that it gives back
exactly that once no container below needs it.

Runc writes a container's own cpu.rt_runtime_us and removes the container's cgroup when it
ends; nobody lowers the parents (the pod's, the QoS class's, kubepods) that enforce.rt raised
for it, so without a give-back their raised values stay in the kernel: they count against
the root's budget for every later raise (after a plugin restart RT pods are refused although
none runs) and nothing else on the node gets that time back.

The ledger keeps, per ancestor nri-sla raised, the value before its first raise (`before`)
and the value it last wrote (`set_us`). A give-back lowers each such ancestor, deepest first
(children shrink before their parents, as the kernel requires), to the larger of `before`
and what its children still take (needed_runtime: live containers, and the ones nri-sla
granted a budget whose cgroup runc has not written yet). An ancestor whose value someone
else changed since nri-sla's write is theirs from then on: dropped from the ledger, never
lowered. The ledger survives restarts in `<state-dir>/rt-raises.json` (root-only), so a
plugin that starts after its RT containers went away gives their budget back at its first
Synchronize.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from nri_plugin.enforce.errors import RtBudgetError
from nri_plugin.enforce.rt import RtChange, needed_runtime, read_runtime, write_runtime
from nri_plugin.errors import DamagedState

log = logging.getLogger("nri_sla.rt")

LEDGER_FILE = "rt-raises.json"
MAX_ENTRIES = 4096  # ancestors: pods, QoS classes, kubepods; far more than a node has
MAX_BYTES = 1 << 20
RETRY_DELAYS = (0.01, 0.02, 0.04)  # s: 70 ms at most on the event loop, only after EINVAL


@dataclass
class Raise:
    """One ancestor nri-sla raised: its value before, and what nri-sla last wrote."""

    before: int
    set_us: int


def _lower(path: Path, value: int) -> None:
    """Write a lower budget. A child cgroup runc just removed still counts in the kernel
    until its group is freed (an RCU grace period: tens of ms), and the kernel refuses
    (EINVAL) a value under it meanwhile: a few short retries, then the caller's next pass."""
    for delay in RETRY_DELAYS:
        try:
            write_runtime(path, value)
            return
        except OSError as exc:
            if exc.errno != errno.EINVAL:
                raise
            time.sleep(delay)
    write_runtime(path, value)


class RtLedger:
    """The raises nri-sla made and has not given back yet; `file` None: kept in memory only
    (nodes whose raises never outlive them: tests, the simulator)."""

    def __init__(self, file: Path | None = None) -> None:
        self.file = file
        self.raises: dict[Path, Raise] = self._load() if file is not None else {}

    def note(self, changes: Iterable[RtChange]) -> None:
        """Raises just made (enforce.rt.raise_rt_ancestors' result)."""
        changed = False
        for change in changes:
            known = self.raises.get(change.path)
            # Known and still ours: the first `before` stays; otherwise this raise starts it.
            before = known.before if known and known.set_us == change.old_us else change.old_us
            self.raises[change.path] = Raise(before, change.new_us)
            changed = True
        if changed:
            self._save()

    def give_back(
        self, hierarchy_root: Path, pending: Mapping[Path, tuple[int, int]]
    ) -> list[RtChange]:
        """Lower every ancestor nri-sla raised to what is still needed below it (never under
        its value before nri-sla's raise); `pending`: container dirs -> (runtime, period)
        of the live containers granted RT. Returns the changes made."""
        if not self.raises:
            return []
        root = hierarchy_root.resolve()
        lowered: list[RtChange] = []
        for path in sorted(self.raises, key=lambda p: len(p.parts), reverse=True):
            entry = self.raises[path]
            try:
                if not path.is_relative_to(root) or path == root or path.is_symlink():
                    raise RtBudgetError(f"{path} is not a group below {root}")
                current = read_runtime(path)
                if current != entry.set_us:  # gone (0 after re-creation) or someone else's
                    del self.raises[path]
                    continue
                target = min(current, max(entry.before, needed_runtime(path, pending)))
                if target < current:
                    _lower(path, target)
                    lowered.append(RtChange(path, current, target))
            except (RtBudgetError, OSError) as exc:
                if not path.exists():
                    del self.raises[path]  # the group went away (the pod's, once it ends)
                elif getattr(exc, "errno", None) == errno.EINVAL:
                    log.info(
                        "RT budget of %s not given back yet (the kernel still counts a "
                        "removed child): retried at the next pass",
                        path,
                    )
                else:
                    log.warning("RT budget of %s not given back: %s", path, exc)
                continue
            if target <= entry.before:
                del self.raises[path]
            else:
                entry.set_us = target
        if lowered or not self.raises:
            self._save()
        return lowered

    # -- the file ------------------------------------------------------------------------
    def _load(self) -> dict[Path, Raise]:
        assert self.file is not None
        try:
            with open(self.file, "rb") as f:
                data = f.read(MAX_BYTES + 1)
        except FileNotFoundError:
            return {}
        except OSError as exc:
            log.warning(
                "%s: cannot read the RT ledger (%s): raises from before this start "
                "are not given back",
                self.file,
                exc.strerror,
            )
            return {}
        try:
            if len(data) > MAX_BYTES:
                raise DamagedState(f"larger than {MAX_BYTES} bytes")
            doc = json.loads(data)
            items = doc["raises"].items()
            if len(items) > MAX_ENTRIES:
                raise DamagedState(f"more than {MAX_ENTRIES} entries")
            raises = {}
            for path, (before, set_us) in items:
                if not (os.path.isabs(path) and type(before) is int and type(set_us) is int):
                    raise DamagedState(f"entry {path!r} is not an absolute path with two integers")
                raises[Path(path)] = Raise(before, set_us)
            return raises
        # (ValueError: the JSON reader's, or an entry that is not a pair.)
        except (DamagedState, ValueError, KeyError, TypeError, AttributeError) as exc:
            log.warning(
                "%s: the RT ledger is not valid (%s): raises from before this start "
                "are not given back",
                self.file,
                exc,
            )
            return {}

    def _save(self) -> None:
        if self.file is None:
            return
        doc = {"raises": {str(p): [r.before, r.set_us] for p, r in self.raises.items()}}
        tmp = self.file.with_name(self.file.name + ".tmp")
        try:
            self.file.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "w") as f:
                json.dump(doc, f)
            os.replace(tmp, self.file)
        except OSError as exc:
            log.warning(
                "%s: cannot write the RT ledger (%s): a restart would not give these raises back",
                self.file,
                exc.strerror,
            )
