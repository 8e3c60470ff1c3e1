"""Typed errors of the enforcement layer.

Every failure that reaches a caller is one of these, carrying enough context (path, value,
reason) to become a CreateContainer error or a hook's stderr line without a traceback.
"""

from __future__ import annotations

TYPE_CHECKING = False  # `typing` and `pathlib` cost the OCI hook start-up time
if TYPE_CHECKING:
    from pathlib import Path


class EnforceError(Exception):
    """Base class: anything nri_plugin.enforce refuses or fails to do."""


class CgroupFactsError(EnforceError):
    """The node's cgroup setup could not be detected or was given wrongly."""


class CgroupPathError(EnforceError):
    """A cgroups path is malformed or would leave its hierarchy."""

    def __init__(self, cgroups_path: str, reason: str) -> None:
        self.cgroups_path = cgroups_path
        self.reason = reason
        super().__init__(f"cgroups path {cgroups_path!r}: {reason}")


class DeviceError(EnforceError):
    """A block device named in an SLA does not exist or is not usable for io limits."""

    def __init__(self, device: str, reason: str) -> None:
        self.device = device
        self.reason = reason
        super().__init__(f"io device {device!r}: {reason}")


class CgroupWriteError(EnforceError):
    """Writing (or reading back) one cgroup file failed."""

    def __init__(self, path: Path | str, value: str, reason: str) -> None:
        from pathlib import Path  # only when a write fails; see TYPE_CHECKING above

        self.path = Path(path)
        self.value = value
        self.reason = reason
        super().__init__(f"cannot write {value!r} to {self.path}: {reason}")


class RtBudgetError(EnforceError):
    """The real-time budget cannot be made available to a container."""
