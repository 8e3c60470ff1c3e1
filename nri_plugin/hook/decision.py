"""What the hook decided for a container, and carrying it out.

A HookDecision is everything the SLA parser and the planner concluded (the cgroup writes,
the RT budget to make room for, warnings, hard/soft, the decision log's `applied` fields)
in plain JSON-able values, so that the decision cache (cache.py) can hand it to later
containers with the same inputs without importing yaml, the parser or the planner.
Cold and cached runs carry a decision out through the same code below: a cached decision
can only be the cold one.
"""

from __future__ import annotations

from nri_plugin.hook.cgdirs import ContainerDirs
from nri_plugin.hook.errors import EXIT_OK, SlaRefusedError
from nri_plugin.hook.values import Value

PREFIX = "nri-sla hook: "
WARN = PREFIX + "warning: "
KINDS = ("apply", "verify")

TYPE_CHECKING = False  # typing costs start-up time; only checkers need it
if TYPE_CHECKING:
    from nri_plugin.hook.deadline import Deadline
    from nri_plugin.hook.run import Outcome, RunState
    from nri_plugin.hook.target import Target


class HookDecision(Value):
    """kind "apply": write `writes` (after raising RT ancestors on v1 for `rt`); "verify":
    read back `writes` (the plugin applied them; drift is named after `source`). `lines`
    are the warnings known before any write."""

    __slots__ = ("applied", "enforcement", "kind", "lines", "rt", "source", "writes")

    def __init__(self, kind: str, enforcement: str = "hard",
                 writes: list[tuple[str, str, str]] | None = None,
                 rt: tuple[int, int] | None = None, lines: list[str] | None = None,
                 applied: dict | None = None, source: str = "") -> None:
        self.kind = kind
        self.enforcement = enforcement
        self.writes = writes or []
        self.rt = rt  # (rt_runtime_us, rt_period_us) when the plan asks for RT
        self.lines = lines or []
        self.applied = applied or {}
        self.source = source

    def to_json(self) -> dict:
        return {"kind": self.kind, "enforcement": self.enforcement,
                "writes": [list(w) for w in self.writes],
                "rt": list(self.rt) if self.rt else None, "lines": self.lines,
                "applied": self.applied, "source": self.source}

    @classmethod
    def from_json(cls, doc: dict) -> HookDecision:
        """Raises ValueError on anything malformed (the caller treats it as a miss)."""
        kind, enforcement = doc["kind"], doc["enforcement"]
        if kind not in KINDS or enforcement not in ("hard", "soft"):
            raise ValueError("bad decision kind or enforcement")
        writes = []
        for w in doc["writes"]:
            if len(w) != 3 or not all(isinstance(x, str) for x in w):
                raise ValueError("bad write")
            writes.append((w[0], w[1], w[2]))
        rt = doc["rt"]
        if rt is not None:
            if (len(rt) != 2 or not all(type(x) is int for x in rt)):
                raise ValueError("bad rt")
            rt = (rt[0], rt[1])
        lines, applied, source = doc["lines"], doc["applied"], doc["source"]
        if (not isinstance(lines, list) or not all(isinstance(x, str) for x in lines)
                or not isinstance(applied, dict) or not isinstance(source, str)):
            raise ValueError("bad lines, applied or source")
        return cls(kind, enforcement, writes, rt, lines, applied, source)


def carry_out(d: HookDecision, dirs: ContainerDirs | None, target: Target, cid: str,
              rs: RunState, deadline: Deadline) -> Outcome:
    """The writes (or read-backs) of a decision, as the hook's Outcome."""
    from nri_plugin.hook.run import Decision

    rs.enforcement = d.enforcement
    if d.kind == "verify":
        out = verify(d, dirs, cid, deadline)
        if out.lines:  # drift (soft): worth a decision line; none when all holds
            out.decision = Decision("warned", target, rs.log_format, warnings=out.lines)
        return out
    deadline.check("writing cgroup files")
    out = apply_writes(d, dirs, cid)
    out.decision = Decision("warned" if out.lines else "enforced", target, rs.log_format,
                            applied=d.applied, warnings=out.lines)
    return out


def verify(d: HookDecision, dirs: ContainerDirs | None, cid: str,
           deadline: Deadline) -> Outcome:
    from nri_plugin.hook.run import Outcome
    from nri_plugin.hook.writes import drift

    deadline.check("verifying")
    problems = drift(d.writes, dirs) if d.writes and dirs is not None else []
    if problems and d.enforcement == "hard":
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise SlaRefusedError(f"drift from what {d.source} applied: {problems[0]}{more}")
    return Outcome(EXIT_OK, "verified",
                   [*d.lines, *(f"{WARN}drift from what {d.source} applied: {p}"
                                for p in problems)], cid)


def apply_writes(d: HookDecision, dirs: ContainerDirs | None, cid: str) -> Outcome:
    from nri_plugin.hook.run import Outcome
    from nri_plugin.hook.writes import apply

    if dirs is None:  # pragma: no cover - callers always resolve dirs for "apply"
        raise ValueError("apply needs the container's cgroup dirs")
    hard = d.enforcement == "hard"
    lines = list(d.lines)
    writes = d.writes
    raised: list = []
    if d.rt is not None and dirs.version == 1:
        raised, problem = raise_rt(d.rt, dirs)
        if problem:
            if hard:
                raise SlaRefusedError(problem)
            lines.append(WARN + problem)
            writes = [w for w in writes if not w[1].startswith("cpu.rt_")]
    failures = [r for r in apply(writes, dirs) if not r.ok]
    if failures and hard:
        if raised:
            from nri_plugin.enforce.rt import release_rt_ancestors

            release_rt_ancestors(raised)  # runc removes the container's cgroup; undo ours
        more = f" (and {len(failures) - 1} more)" if len(failures) > 1 else ""
        raise SlaRefusedError(f"{failures[0].error}{more}")
    lines += [WARN + str(r.error) for r in failures]
    return Outcome(EXIT_OK, "applied", lines, cid)


def raise_rt(rt: tuple[int, int], dirs: ContainerDirs) -> tuple[list, str | None]:
    """Raise cpu.rt_runtime_us on the container's ancestors first (the kernel refuses a
    child budget its parent lacks). Returns (changes made, problem text or None). Only RT
    containers on v1 pay for importing the RT module (pathlib, fractions)."""
    from pathlib import Path

    from nri_plugin.enforce.errors import EnforceError
    from nri_plugin.enforce.rt import raise_rt_ancestors

    try:
        # dirs.dir first, as the mount lookup: the same error wins when both are missing.
        cpu_dir = Path(dirs.dir("cpu"))
        done = raise_rt_ancestors(cpu_dir, rt[0], rt[1], Path(dirs.roots["cpu"]))
    except EnforceError as exc:
        return [], f"cpu.rt-runtime: {exc}"
    return done, None
