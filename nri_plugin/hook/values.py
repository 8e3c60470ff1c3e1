"""The values one hook run passes around: the Run (what the hook was given and found), its
Progress (what a late failure is judged by), its Deadline, and the Outcome it ends with.

A leaf module: the run, the cached path, the cold path and the actions all use these, so
none of them needs another's module.
"""

import time

from nri_plugin.errors import InternalFailure, ProgrammingError
from nri_plugin.value import Value

# When the run began, before it loaded the code that decides (core.inputs.loaded_code):
# this module is among the first the hook imports.
STARTED_NS = time.time_ns()
PREFIX = "nri-sla hook: "
WARN = PREFIX + "warning: "

TYPE_CHECKING = False  # typing itself costs start-up time; only checkers need it
if TYPE_CHECKING:
    from nri_plugin.hook.inputs import BundleSpec, OciState, Target
    from nri_plugin.hook.options import HookOptions
    from nri_plugin.ops.event import LogFormat


class HookTimeout(InternalFailure):
    """The hook ran past its own deadline (it never hangs the runtime)."""


class Deadline:
    """The hook's own time limit, checked between steps (run.alarm is the backstop for a
    step that blocks); both raise HookTimeout naming where it stopped."""

    def __init__(self, seconds: float) -> None:
        if not seconds > 0:
            raise ProgrammingError("timeout must be positive")
        self.seconds = seconds
        self.end = time.monotonic() + seconds

    def check(self, step: str) -> None:
        if time.monotonic() >= self.end:
            raise HookTimeout(f"timed out after {self.seconds:g}s before {step}")


class Progress(Value):
    """What the run has learnt so far, to judge a failure that cuts it short: whose it is,
    hard or soft, and how the decision line is written."""

    __slots__ = ("container_id", "enforcement", "log_format", "target")

    def __init__(self) -> None:
        self.container_id = ""
        self.target: Target | None = None  # set once the container may have an SLA
        self.enforcement: str | None = None  # hard | soft once the SLA is known
        self.log_format: LogFormat = "text"  # the node config's log.format, once known


class Run(Value):
    """One hook run for a container that may have an SLA: the options, the OCI state, the
    bundle's spec, their annotations merged (run.py), who the container is, the deadline
    and the run's Progress. Frozen, like a frozen dataclass (not one: `dataclasses` costs more
    start-up time than a cached run's own work): the cached and the cold path read it,
    neither changes it."""

    # set once in __init__ (object.__setattr__): declared here for checkers (quoted)
    opts: "HookOptions"
    oci: "OciState"
    spec: "BundleSpec"
    annotations: "dict[str, str]"
    target: "Target"
    deadline: Deadline
    progress: Progress

    __slots__ = ("annotations", "deadline", "oci", "opts", "progress", "spec", "target")

    def __init__(
        self,
        opts: "HookOptions",
        oci: "OciState",
        spec: "BundleSpec",
        annotations: dict[str, str],
        target: "Target",
        deadline: Deadline,
        progress: Progress,
    ) -> None:
        fields = {
            "opts": opts,
            "oci": oci,
            "spec": spec,
            "annotations": annotations,
            "target": target,
            "deadline": deadline,
            "progress": progress,
        }
        for name, value in fields.items():
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"Run is frozen: cannot set {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"Run is frozen: cannot delete {name!r}")


class LoggedDecision(Value):
    """One container decision as the structured log line shows it (path "hook")."""

    __slots__ = ("applied", "error", "log_format", "outcome", "target", "warnings")

    def __init__(
        self,
        outcome: str,
        target: "Target",
        log_format: "LogFormat" = "text",
        applied: dict | None = None,
        warnings: list[str] | None = None,
        error: str | None = None,
    ) -> None:
        self.outcome = outcome  # enforced | warned | refused
        self.target = target
        self.log_format = log_format
        self.applied = applied or {}  # what was set (the plan's record fields), if any
        self.warnings = warnings or []
        self.error = error


class Outcome(Value):
    """What the hook did; `lines` go to stderr (one line each)."""

    __slots__ = ("action", "container_id", "decision", "exit_code", "lines")

    def __init__(
        self,
        exit_code: int,
        action: str,
        lines: list[str] | None = None,
        container_id: str = "",
        decision: LoggedDecision | None = None,
    ) -> None:
        self.exit_code = exit_code
        self.action = action  # skipped | applied | verified | refused | failed
        self.lines = lines if lines is not None else []
        self.container_id = container_id
        # What the decision log line says (docs/operations.md); None: nothing to log.
        self.decision = decision
