"""What one hook run ends with: Outcome (exit status, stderr lines) and the decision line.

A leaf module: the run, the cached path and the cold path all build these.
"""

from __future__ import annotations

from nri_plugin.value import Value

PREFIX = "nri-sla hook: "
WARN = PREFIX + "warning: "

TYPE_CHECKING = False  # typing itself costs start-up time; only checkers need it
if TYPE_CHECKING:
    from nri_plugin.hook.target import Target


class LoggedDecision(Value):
    """One container decision as the structured log line shows it (path "hook")."""

    __slots__ = ("applied", "error", "log_format", "outcome", "target", "warnings")

    def __init__(self, outcome: str, target: Target, log_format: str = "text",
                 applied: dict | None = None, warnings: list[str] | None = None,
                 error: str | None = None) -> None:
        self.outcome = outcome  # enforced | warned | refused
        self.target = target
        self.log_format = log_format
        self.applied = applied or {}  # what was set (the plan's record fields), if any
        self.warnings = warnings or []
        self.error = error


class Outcome(Value):
    """What the hook did; `lines` go to stderr (one line each)."""

    __slots__ = ("action", "container_id", "decision", "exit_code", "lines")

    def __init__(self, exit_code: int, action: str, lines: list[str] | None = None,
                 container_id: str = "", decision: LoggedDecision | None = None) -> None:
        self.exit_code = exit_code
        self.action = action  # skipped | applied | verified | refused | failed
        self.lines = lines if lines is not None else []
        self.container_id = container_id
        # What the decision log line says (docs/operations.md); None: nothing to log.
        self.decision = decision


class RunState(Value):
    """Mutable facts learnt while running, needed to judge a late failure."""

    __slots__ = ("container_id", "enforcement", "log_format", "target")

    def __init__(self) -> None:
        self.enforcement: str | None = None  # hard | soft once the SLA is parsed
        self.container_id = ""
        self.target: Target | None = None  # set once the container may have an SLA
        self.log_format = "text"  # the node config's log.format, once loaded
