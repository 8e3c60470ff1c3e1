"""Typed errors of the enforcement layer.

Every failure that reaches a caller is one of these, carrying enough context (path, value,
reason) to become a CreateContainer error or a hook's stderr line without a traceback.
Each is under the root of its kind (nri_plugin.errors), which alone sets the kind.
"""

from nri_plugin.errors import InternalFailure, InvalidInput, Refused, SlaFailure


class EnforceError(SlaFailure):
    """Anything nri_plugin.enforce refuses or fails to do: one name for a caller to catch
    them by. Never raised itself: it has no kind; its subclasses take theirs from their
    kind's root."""


class CgroupFactsError(EnforceError, InternalFailure):
    """The node's cgroup setup could not be detected or was given wrongly."""


class CgroupPathError(EnforceError, InvalidInput):
    """A cgroups path is malformed or would leave its hierarchy (the runtime's input)."""

    def __init__(self, cgroups_path: str, detail: str) -> None:
        self.cgroups_path = cgroups_path
        self.detail = detail  # `reason` stays the metric label
        super().__init__(f"cgroups path {cgroups_path!r}: {detail}")


class DeviceError(EnforceError, Refused):
    """A block device named in an SLA does not exist or is not usable for io limits."""

    reason = "device"

    def __init__(self, device: str, detail: str) -> None:
        self.device = device
        self.detail = detail
        super().__init__(f"io device {device!r}: {detail}")


class CgroupWriteError(EnforceError, Refused):
    """Writing (or reading back) one cgroup file failed."""

    reason = "cgroup"

    def __init__(self, path: str, value: str, detail: str) -> None:
        self.path = str(path)
        self.value = value
        self.detail = detail
        super().__init__(f"cannot write {value!r} to {self.path}: {detail}")


class RtBudgetError(EnforceError, Refused):
    """The real-time budget cannot be made available to a container. The message names
    only the container's own budget and the node's limit; `operator_note` has what the
    other groups take (the operator's log, never the pod's events)."""

    def __init__(self, message: str, operator_note: str = "") -> None:
        self.operator_note = operator_note
        super().__init__(message)

    reason = "budget"
