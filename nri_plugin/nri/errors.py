"""Typed errors of the NRI transport; every one names what went wrong, not just where."""

from __future__ import annotations

import enum


class Code(enum.IntEnum):
    """gRPC status codes as ttrpc carries them in Status.code."""

    OK = 0
    CANCELED = 1
    UNKNOWN = 2
    INVALID_ARGUMENT = 3
    DEADLINE_EXCEEDED = 4
    NOT_FOUND = 5
    ALREADY_EXISTS = 6
    PERMISSION_DENIED = 7
    RESOURCE_EXHAUSTED = 8
    FAILED_PRECONDITION = 9
    ABORTED = 10
    OUT_OF_RANGE = 11
    UNIMPLEMENTED = 12
    INTERNAL = 13
    UNAVAILABLE = 14
    DATA_LOSS = 15
    UNAUTHENTICATED = 16

    @property
    def pretty(self) -> str:
        """The name as containerd prints it: `InvalidArgument`, `Unknown`, ..."""
        if self is Code.CANCELED:
            return "Canceled"
        return "".join(part.capitalize() for part in self.name.split("_"))


def code_name(code: int) -> str:
    try:
        return Code(code).pretty
    except ValueError:
        return f"Code({code})"


class NriError(Exception):
    """Base of every error raised by nri_plugin.nri."""


class RpcError(NriError):
    """A call ended with a non-OK status (from the peer, or a local deadline)."""

    def __init__(self, code: int, message: str, method: str = "") -> None:
        self.code = int(code)
        self.message = message
        self.method = method
        where = f"{method}: " if method else ""
        super().__init__(f"{where}rpc error: code = {code_name(code)} desc = {message}")


class ConnectionClosed(NriError):
    """The peer closed the socket (or it failed) while we needed it."""


class RemoteProtocolError(NriError):
    """The peer broke the NRI/ttrpc protocol in a way no single call can be failed for:
    the connection must end. Raised by NriCore.receive_data; the core is closed after it."""


class LocalProtocolError(NriError):
    """Our own code misused the protocol core (answering a call that is not open, calling
    a service of the wrong side, using a closed core): a bug here, not in the peer."""


class ConnectionExhausted(NriError):
    """The connection cannot go on and is ended; a new one starts afresh (the service
    reconnects): our stream ids ran out (ttrpc ids are odd, increasing and 32-bit, and a
    peer takes a wrapped id as reused), or the peer stopped reading while our unsent
    bytes passed the cap."""


class RegistrationError(NriError):
    """RegisterPlugin failed or did not complete within the registration timeout."""


class PluginConfigError(NriError, ValueError):
    """Bad plugin identity or options (name, index, socket), caught before connecting."""
