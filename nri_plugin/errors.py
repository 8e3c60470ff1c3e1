"""SlaFailure: the one root of every failure that decides a container's fate.

Its `kind` says whose fault it is, and everything else follows from the kind:

* invalid  - the input is wrong: an SLA annotation, the node config, what the runtime
             handed over (state, bundle, cgroups path). The author of that input fixes it.
* refused  - the input is valid but this node cannot honour it (hard mode): a policy, a
             missing feature, no placement, a cgroup write the kernel refused.
* internal - nri-sla or the system failed: a bug, a timeout, an unreadable /proc.
* unavailable - commands only: what the command needs is taken or not there (no plugin
             answering on the status socket, its path held by another); nothing is wrong
             with the input. Never a container's decision.

The class is the category: each kind has one root below SlaFailure (InvalidInput, Refused,
InternalFailure, Unavailable) that sets it, every failure class derives from exactly one of
them, and none sets `kind` again (tests/test_errors.py walks them all). A layer that
wants one name for all of its failures (`except EnforceError`) gives them a common base
with no kind, never raised itself, next to the root of each one's kind.

The OCI hook's exit status is EXIT_STATUS[kind]; the plugin answers the runtime with the
status code its front-end maps the kind to; `reason` is the metric's one-word label.
Every `nri-sla` command exits with the same table (EXIT_*, docs/operations.md "Exit
statuses"); a failure that reaches the command line is one line on stderr (one_line).
Lean on purpose (no imports): the OCI hook loads it on every container start.
"""

INVALID = "invalid"
REFUSED = "refused"
INTERNAL = "internal"
UNAVAILABLE = "unavailable"
KINDS = (INVALID, REFUSED, INTERNAL, UNAVAILABLE)

EXIT_OK = 0  # enforced, verified or nothing to do; soft-mode warnings may be on stderr
EXIT_REFUSED = 1  # hard mode: the SLA cannot be honoured exactly; the container must not run
EXIT_INVALID = 2  # bad input: the SLA annotation, the command line, the runtime's state
EXIT_INTERNAL = 3  # a bug, a system failure or a timeout (hard mode; soft mode warns, exits 0)
# Commands only: what the command needs is taken or not there (the metrics port in use,
# no plugin answering on the status socket); nothing is wrong with the input.
EXIT_UNAVAILABLE = 4
EXIT_STATUS = {
    REFUSED: EXIT_REFUSED,
    INVALID: EXIT_INVALID,
    INTERNAL: EXIT_INTERNAL,
    UNAVAILABLE: EXIT_UNAVAILABLE,
}


class SlaFailure(Exception):
    """Base of every nri-sla failure; raised only through the root of its kind."""

    kind: str  # set once, by the kind's root below
    reason: str  # metric label (nri_sla_decisions_total{reason=...})

    @property
    def exit_status(self) -> int:
        return EXIT_STATUS[self.kind]


def one_line(text: str, limit: int = 4000) -> str:
    """`text` on one bounded line: runc embeds the hook's stderr in its own one-line error
    and an operator greps a command's; a YAML snippet or an exception may carry newlines."""
    flat = " ".join(text.split("\n")).replace("\r", " ")
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


class InvalidInput(SlaFailure):
    """Input nri-sla cannot use, named with where it came from."""

    kind = INVALID
    reason = "invalid"


class Refused(SlaFailure):
    """A valid SLA this node cannot honour exactly (hard mode)."""

    kind = REFUSED
    reason = "unsupported"


class InternalFailure(SlaFailure):
    """A bug or a system failure; hard mode refuses, soft mode warns."""

    kind = INTERNAL
    reason = "internal"


class ProgrammingError(ValueError):
    """A caller broke a function's contract (a value the code, not the input, chose is
    outside what the function takes): a bug in nri-sla, never the operator's or the pod's.
    Outside SlaFailure on purpose: the code that handles failures (refuses, warns, counts a
    shortfall) must not take a bug for one; `decide` and the front-ends' last resort report
    it as internal with its traceback."""


class DamagedState(InternalFailure):
    """A document nri-sla stored for itself (the OCI hook's decision cache, the plugin's RT
    ledger) does not read back as it was written: damaged, or from another version. Its
    reader treats it as absent."""


class Unavailable(SlaFailure):
    """What a command needs is taken or not there (exit status 4); the input is fine."""

    kind = UNAVAILABLE
    # No container decision is ever this; should one reach the decisions metric, a label
    # it knows (tests/ops/test_metrics.py), not a new series.
    reason = "internal"
