"""The core's failures about the node's own state: its record key, a record that
conflicts with what an earlier container holds, a reservation used after it closed."""

from nri_plugin.errors import InternalFailure, InvalidInput
from nri_plugin.plan.errors import RecordError


class RecordKeyError(InvalidInput):
    """The record key cannot be created or read, or its file is not one nri-sla trusts:
    the node's state, which its operator fixes (`nri-sla run` exits 2)."""


class NoRecordKey(RecordKeyError):
    """There is no key file (yet): the plugin creates one, the hook trusts no record."""


class RecordConflict(RecordError):
    """A trusted record claiming GPUs or exclusive CPUs an earlier container holds."""

    problem = "conflict"


class ReservationClosed(InternalFailure):
    """A reservation committed and then rolled back, or rolled back and then committed:
    a bug in its caller, never what a container asked."""
