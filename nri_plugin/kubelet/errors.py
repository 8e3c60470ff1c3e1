"""The one failure of talking to the kubelet's gRPC APIs."""

from __future__ import annotations

from nri_plugin.errors import InternalFailure


class KubeletApiError(InternalFailure):
    """The kubelet could not be asked or answered something unusable: its socket is
    missing, it did not answer in time, it refused the call, or its answer is over
    nri-sla's bounds. The message names the socket and what failed, on one line."""
