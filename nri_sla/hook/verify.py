"""Verify-only mode: the plugin already enforced this container (`sla.nri.io/applied`).

The hook writes nothing then; it reads back what the record says NRI put into the spec
and reports drift. Settings the plugin writes directly at StartContainer (scope "direct":
io limits, v1 memory soft limit, io weight) are not checked: at the hook's stages they
are not written yet. A record is no privilege: a forged one can only make the hook write
less for the pod that forged it, never grant anything.
"""

from __future__ import annotations

from typing import Any

from nri_sla.hook.deadline import Deadline
from nri_sla.hook.errors import EXIT_OK, SlaRefusedError
from nri_sla.hook.run import Outcome

PREFIX = "nri-sla hook: "


def expected_writes(plan: Any) -> list[Any]:
    from nri_sla.enforce.plan_writes import cgroup_writes

    direct = set(cgroup_writes(plan, scope="direct"))
    return [w for w in cgroup_writes(plan, scope="all") if w not in direct]


def drift(writes: list[Any], paths: Any) -> list[str]:
    """One text per setting whose file does not hold the planned value."""
    from nri_sla.enforce.readback import values_match

    problems = []
    for w in writes:
        try:
            target = paths.dir(w.controller) / w.file
            read = target.read_text()
        except Exception as exc:  # missing controller/file: the setting cannot hold
            problems.append(f"{w.controller}/{w.file}: cannot read ({exc})")
            continue
        if not values_match(w.file, w.value, read):
            problems.append(f"{target}: expected {w.value!r}, found {read.strip()!r}")
    return problems


def verify(record: str, sla: Any, paths: Any, cid: str, deadline: Deadline) -> Outcome:
    from nri_sla.plan.record import RecordError, decode_record

    hard = sla.enforcement == "hard"
    try:
        path, plan = decode_record(record)
    except RecordError as exc:
        # Not the plugin's record: enforce as if it were absent would be a second writer
        # racing the plugin; refusing is clearer in hard mode, a warning in soft.
        msg = f"sla.nri.io/applied is not a valid record ({exc})"
        if hard:
            raise SlaRefusedError(msg) from None
        return Outcome(EXIT_OK, "verified", [f"{PREFIX}warning: {msg}"], cid)
    deadline.check("verifying")
    problems = drift(expected_writes(plan), paths)
    if problems and hard:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise SlaRefusedError(f"drift from what {path} applied: {problems[0]}{more}")
    return Outcome(EXIT_OK, "verified",
                   [f"{PREFIX}warning: drift from what {path} applied: {p}" for p in problems],
                   cid)
