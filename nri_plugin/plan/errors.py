"""The planning layer's failures: what a node cannot grant, a record it cannot use."""

from nri_plugin.errors import InvalidInput, Refused


class PlanError(Refused):
    """A planning failure that names the annotation key, the field and what is allowed;
    `reason` (the metric label) says which kind of shortfall. Hard mode refuses the
    container with it when a requested setting cannot be applied exactly."""

    def __init__(
        self, key: str, field_path: str, message: str, reason: str = "unsupported"
    ) -> None:
        self.key = key
        self.reason = reason  # metric label
        self.field = field_path
        self.message = message
        super().__init__(f"{key}: {field_path}: {message}" if field_path else f"{key}: {message}")


class PlacementError(Refused):
    """A request that cannot be placed (hard mode) or is malformed, or a grant that lacks
    what the SLA asks; the message says what is free, granted or missing."""

    reason = "placement"

    def __init__(self, message: str, field: str = "gpu") -> None:
        self.message = message
        self.field = field
        super().__init__(message)


class RecordError(InvalidInput, ValueError):
    """A record nri-sla does not trust or cannot use; `problem` says which (the metric
    label): "unauthenticated" (no valid MAC for this container) or "invalid"."""

    problem = "invalid"


class UnauthenticatedRecord(RecordError):
    problem = "unauthenticated"


class RtBudgetExceeded(Refused):
    """The node's RT budget cannot take a grant; the message names only the grant and
    the budget's size (what others hold goes to the operator's log)."""

    reason = "budget"
