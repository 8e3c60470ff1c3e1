"""Reading `nri-sla run`'s Prometheus endpoint from the e2e tests.

The plugin's own counters and gauges are what an operator sees, so the fault tests compare
them with what the node really holds (cgroup files, container specs).
"""

from __future__ import annotations

import math
import socket
import urllib.request
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families


def free_port() -> int:
    """A local TCP port nobody listens on now (the plugin binds it a moment later; the
    same port across plugin restarts, so a test can scrape whichever process runs)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass(frozen=True)
class Samples:
    """One scrape: (sample name, sorted labels) -> value."""

    values: dict[tuple[str, tuple[tuple[str, str], ...]], float]

    def get(self, name: str, **labels: str) -> float | None:
        return self.values.get((name, tuple(sorted(labels.items()))))

    def buckets(self, name: str, **labels: str) -> list[tuple[float, float]]:
        """A histogram's cumulative buckets (upper bound, count), +Inf last."""
        out = []
        for (sample, lbls), value in self.values.items():
            d = dict(lbls)
            le = d.pop("le", None)
            if sample == f"{name}_bucket" and le is not None and d == labels:
                out.append((float(le), value))
        return sorted(out)


def scrape(port: int, timeout: float = 10.0) -> Samples:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=timeout) as r:
        text = r.read().decode()
    values = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            values[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return Samples(values)


def ready(port: int) -> int:
    """HTTP status of /readyz (200 registered, 503 not)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as exc:
        return exc.code


def histogram_quantile(q: float, buckets: list[tuple[float, float]]) -> tuple[float, float]:
    """The q-quantile's bucket as (lower, upper) bound in the histogram's unit: all a
    histogram knows. Raises ValueError on an empty histogram."""
    total = buckets[-1][1] if buckets else 0
    if not total:
        raise ValueError("empty histogram")
    rank = q * total
    lower = 0.0
    for upper, count in buckets:
        if count >= rank:
            return lower, upper
        lower = upper
    return lower, math.inf


def per_bucket(buckets: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Cumulative buckets -> (upper bound, observations in that bucket alone), the
    non-empty ones."""
    out, below = [], 0.0
    for le, count in buckets:
        if count > below:
            out.append((le, count - below))
        below = count
    return out
