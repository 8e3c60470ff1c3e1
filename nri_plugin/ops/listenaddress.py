"""The listen address of the metrics server and of the probe listener ("HOST:PORT",
":PORT", "[IPv6]:PORT"; "" turns the listener off), in a module of its own: checking it
must not import http.server and prometheus_client's exposition (nri_plugin.ops.metrics_http),
which a plugin without a metrics endpoint never loads."""

from __future__ import annotations

from dataclasses import dataclass

from nri_plugin.ops.metrics import MetricsError


@dataclass(frozen=True)
class ListenAddress:
    host: str
    port: int


def parse_address(address: str, what: str = "metrics address") -> ListenAddress | None:
    """Parse a listen address (`what` names it in errors): "HOST:PORT", ":PORT" (all
    interfaces), "[::1]:PORT". "" disables the server (None). Port 0 picks a free port
    (tests)."""
    address = address.strip()
    if not address:
        return None
    host, sep, port_text = address.rpartition(":")
    if not sep:
        raise MetricsError(
            f'{what} {address!r} must be HOST:PORT, :PORT or [IPv6]:PORT ("" disables the server)'
        )
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise MetricsError(f"{what} {address!r}: put an IPv6 host in brackets, e.g. [::1]:9477")
    if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise MetricsError(f"{what} {address!r}: port must be 0..65535")
    return ListenAddress(host=host or "0.0.0.0", port=int(port_text))
