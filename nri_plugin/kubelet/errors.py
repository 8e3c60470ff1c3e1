"""The kubelet layer's failures: talking to the kubelet's gRPC APIs, and what nri-sla's
device plugin can advertise."""

from __future__ import annotations

from nri_plugin.errors import InternalFailure, InvalidInput


class KubeletApiError(InternalFailure):
    """The kubelet could not be asked or answered something unusable: its socket is
    missing, it did not answer in time, it refused the call, or its answer is over
    nri-sla's bounds. The message names the socket and what failed, on one line."""


class MigLayoutError(InvalidInput):
    """The GPUs' MIG layout does not fit the MIG strategy (one line naming both)."""
