"""CgroupActions: what a decision comes down to for the hook, and carrying it out.

Everything the core decided for a container (the cgroup writes, the RT budget to make
room for, warnings, hard/soft, the decision log's `applied` fields) in plain JSON-able
values, so that the decision cache (cache.py) can hand it to later containers with the
same inputs without importing yaml, the parser or the planner. Cold and cached runs carry
actions out through the same code below, with the one cgroup writer (enforce.cgfile):
a cached run can only do what the cold one did.
"""

from nri_plugin.enforce.cgfile import CgroupWrite, CgroupWriter
from nri_plugin.errors import EXIT_OK, DamagedState, Refused
from nri_plugin.hook.values import WARN, LoggedDecision, Outcome
from nri_plugin.value import Value

KINDS = ("apply", "verify")

TYPE_CHECKING = False  # typing costs start-up time; only checkers need it
if TYPE_CHECKING:
    from nri_plugin.enforce.cgpaths import CgroupPaths
    from nri_plugin.hook.values import Run


class CgroupActions(Value):
    """kind "apply": write `writes` (after making RT room on v1 for `rt`); "verify": read
    `writes` back (the plugin applied them; drift is named after `source`). `lines` are
    the warnings known before any write; `key` names the SLA annotation in RT messages."""

    __slots__ = ("applied", "enforcement", "key", "kind", "lines", "rt", "source", "writes")

    def __init__(
        self,
        kind: str,
        enforcement: str = "hard",
        writes: list[CgroupWrite] | None = None,
        rt: tuple[int, int] | None = None,
        lines: list[str] | None = None,
        applied: dict | None = None,
        source: str = "",
        key: str = "",
    ) -> None:
        self.kind = kind
        self.enforcement = enforcement
        self.writes = writes or []
        self.rt = rt  # (rt_runtime_us, rt_period_us) when the plan asks for RT
        self.lines = lines or []
        self.applied = applied or {}
        self.source = source
        self.key = key

    def to_json(self) -> dict:
        return {
            "kind": self.kind,
            "enforcement": self.enforcement,
            "writes": [list(w) for w in self.writes],
            "rt": list(self.rt) if self.rt else None,
            "lines": self.lines,
            "applied": self.applied,
            "source": self.source,
            "key": self.key,
        }

    @classmethod
    def from_json(cls, doc: dict) -> "CgroupActions":
        """Raises DamagedState (or KeyError/TypeError) on anything malformed (the caller treats
        it as a miss)."""
        kind, enforcement = doc["kind"], doc["enforcement"]
        if kind not in KINDS or enforcement not in ("hard", "soft"):
            raise DamagedState("bad decision kind or enforcement")
        writes = []
        for w in doc["writes"]:
            if len(w) != 3 or not all(isinstance(x, str) for x in w):
                raise DamagedState("bad write")
            writes.append(CgroupWrite(w[0], w[1], w[2]))
        rt = doc["rt"]
        if rt is not None:
            if len(rt) != 2 or not all(type(x) is int for x in rt):
                raise DamagedState("bad rt")
            rt = (rt[0], rt[1])
        lines, applied, source, key = doc["lines"], doc["applied"], doc["source"], doc["key"]
        if (
            not isinstance(lines, list)
            or not all(isinstance(x, str) for x in lines)
            or not isinstance(applied, dict)
            or not isinstance(source, str)
            or not isinstance(key, str)
        ):
            raise DamagedState("bad lines, applied, source or key")
        return cls(kind, enforcement, writes, rt, lines, applied, source, key)


def carry_out(a: CgroupActions, cgroup: "CgroupPaths", run: "Run") -> Outcome:
    """The writes (or read-backs) of the actions in the container's cgroup, as the hook's
    Outcome: the one way both the cached and the cold decision are carried out."""
    progress, cid = run.progress, run.oci.id
    progress.enforcement = a.enforcement
    if a.kind == "verify":
        run.deadline.check("verifying")
        out = verify(a, cgroup, cid)
        if out.lines:  # drift (soft): worth a decision line; none when all holds
            out.decision = LoggedDecision(
                "warned", run.target, progress.log_format, warnings=out.lines
            )
        return out
    run.deadline.check("writing cgroup files")
    out = apply_writes(a, cgroup, cid)
    out.decision = LoggedDecision(
        "warned" if out.lines else "enforced",
        run.target,
        progress.log_format,
        applied=a.applied,
        warnings=out.lines,
    )
    return out


def verify(a: CgroupActions, paths: "CgroupPaths", cid: str) -> Outcome:
    problems = CgroupWriter(paths).drift(a.writes) if a.writes else []
    if problems and a.enforcement == "hard":
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise Refused(f"drift from what {a.source} applied: {problems[0]}{more}")
    return Outcome(
        EXIT_OK,
        "verified",
        [*a.lines, *(f"{WARN}drift from what {a.source} applied: {p}" for p in problems)],
        cid,
    )


def apply_writes(a: CgroupActions, paths: "CgroupPaths", cid: str) -> Outcome:
    hard = a.enforcement == "hard"
    lines = list(a.lines)
    writes = a.writes
    raised: list = []
    if a.rt is not None and paths.version == 1:
        # The plugin's rule (hard refuses, soft runs without RT). Only RT containers on
        # v1 pay for importing the RT module (pathlib, fractions).
        from nri_plugin.enforce.rt import rt_room

        raised, problem = rt_room(paths, a.rt, a.enforcement, a.key)
        if problem:
            lines.append(WARN + problem)
            writes = [w for w in writes if not w.file.startswith("cpu.rt_")]
    # Hard: all or none (the writer undoes its earlier writes at the first failure).
    failures = [r for r in CgroupWriter(paths).apply(writes, undo_on_failure=hard) if not r.ok]
    if failures and hard:
        if raised:
            from nri_plugin.enforce.rt import release_rt_ancestors

            release_rt_ancestors(raised)  # runc removes the container's cgroup; undo ours
        more = f" (and {len(failures) - 1} more)" if len(failures) > 1 else ""
        raise Refused(f"{failures[0].error}{more}")
    lines += [WARN + str(r.error) for r in failures]
    return Outcome(EXIT_OK, "applied", lines, cid)
