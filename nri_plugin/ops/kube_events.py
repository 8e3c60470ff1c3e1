"""Kubernetes Events (core/v1) about a pod, and what decides which of them reach the API
server, as the kubelet's event recorder decides it (client-go's tools/record: the same
rules, limits and keys; docs/operations.md, "Kubernetes Events").

`make_event` builds one Event object for a pod (and the container in it that the event is
about: `involvedObject.fieldPath`, as the kubelet writes it). `Correlator` then sorts it:

* counted: the same event (source, object, type, reason and message) seen before, while
  its record is still among the last 4096 kept, is not created again: the first one's
  `count` and `lastTimestamp` are PATCHed;
* aggregated: from the 10th distinct message with the same source, object, type and
  reason, each within 10 minutes of the last, they become one event "(combined from
  similar events): <the latest message>", its count PATCHed;
* spam-filtered: each source and object gets a token bucket of 25 events, refilled at
  one every 5 minutes; an event without a token is skipped.

Nothing here knows SLAs (the plugin writes the reasons and messages), or does I/O.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from nri_plugin.errors import ProgrammingError
from nri_plugin.ops.kube_api import InvolvedPod

COMPONENT = "nri-sla"  # source.component and reportingComponent
EVENT_TYPES = ("Normal", "Warning")
CACHE_ENTRIES = 4096  # records kept per kind (the kubelet's maxLruCacheEntries)
AGGREGATE_MAX = 10  # distinct messages of one reason before they are combined
AGGREGATE_SECONDS = 600.0  # ... within this much time of the last one
SPAM_BURST = 25  # events per source and object at once
SPAM_QPS = 1 / 300  # ... refilled at one every 5 minutes
COMBINED = "(combined from similar events): "
MESSAGE_LIMIT = 1024  # the events.k8s.io note limit, kept for core/v1 too
NAME_LIMIT = 253  # metadata.name: <pod>.<hex nanoseconds> within a DNS subdomain's length


def timestamp(seconds: float) -> str:
    """RFC 3339 in UTC to the second, as metav1.Time marshals."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def make_event(
    pod: InvolvedPod, event_type: str, reason: str, message: str, *, host: str, now: float
) -> dict[str, Any]:
    """One new Event object (count 1) about `pod`, from nri-sla on node `host`."""
    if event_type not in EVENT_TYPES:
        raise ProgrammingError(f"event type {event_type!r} is not one of {', '.join(EVENT_TYPES)}")
    if len(message) > MESSAGE_LIMIT:
        message = message[: MESSAGE_LIMIT - 3] + "..."
    stamp = timestamp(now)
    suffix = f".{int(now * 1e9):x}"
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": pod.name[: NAME_LIMIT - len(suffix)] + suffix,
            "namespace": pod.namespace,
        },
        "involvedObject": pod.reference(),
        "reason": reason,
        "message": message,
        "type": event_type,
        "source": {"component": COMPONENT, "host": host},
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
        "reportingComponent": COMPONENT,
        "reportingInstance": host,
    }


def _object_key(event: dict[str, Any]) -> tuple[str, ...]:
    source, obj = event["source"], event["involvedObject"]
    return (
        source["component"],
        source["host"],
        obj["kind"],
        obj["namespace"],
        obj["name"],
        obj["uid"],
        obj["apiVersion"],
    )


def _event_key(event: dict[str, Any]) -> tuple[str, ...]:
    """The same event: its object (with the container), type, reason and message."""
    return (
        *_object_key(event),
        event["involvedObject"].get("fieldPath", ""),
        event["type"],
        event["reason"],
        event["message"],
    )


def _aggregate_key(event: dict[str, Any]) -> tuple[str, ...]:
    """Similar events: the same but for the message (nor the container: the kubelet's
    key leaves the field path out too)."""
    return (
        *_object_key(event),
        event["type"],
        event["reason"],
        event["reportingComponent"],
        event["reportingInstance"],
    )


class TokenBucket:
    """`burst` tokens, refilled at `rate` per second (by `clock`, monotonic)."""

    def __init__(self, rate: float, burst: int, clock: Callable[[], float]) -> None:
        self.rate = rate
        self.burst = burst
        self.clock = clock
        self.tokens = float(burst)
        self.at = clock()

    def _refill(self) -> None:
        now = self.clock()
        self.tokens = min(float(self.burst), self.tokens + (now - self.at) * self.rate)
        self.at = now

    def try_take(self) -> bool:
        self._refill()
        if self.tokens < 1:
            return False
        self.tokens -= 1
        return True

    def wait(self) -> float:
        """Seconds until a token is there (0: take it now)."""
        self._refill()
        return 0.0 if self.tokens >= 1 else (1 - self.tokens) / self.rate


class _Lru(OrderedDict):
    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size

    def get_recent(self, key: object) -> Any:
        value = self.get(key)
        if value is not None:
            self.move_to_end(key)
        return value

    def put(self, key: object, value: object) -> None:
        self[key] = value
        self.move_to_end(key)
        if len(self) > self.size:
            self.popitem(last=False)


@dataclass(frozen=True, slots=True)
class Correlated:
    """What to send: a new `event` (POST), or its `patch` for the event named in it."""

    event: dict[str, Any]
    patch: dict[str, Any] | None


class Correlator:
    """The kubelet recorder's correlation (aggregate, count, spam-filter) of the events
    one process sends. `clock`: monotonic, for the windows and buckets. Used by one
    thread."""

    def __init__(
        self, clock: Callable[[], float] = time.monotonic, entries: int = CACHE_ENTRIES
    ) -> None:
        self.clock = clock
        self._similar = _Lru(entries)  # aggregate key -> [messages, last seen]
        self._seen = _Lru(entries)  # event key -> (count, firstTimestamp, name)
        self._spam = _Lru(entries)  # object key -> TokenBucket

    def correlate(self, event: dict[str, Any]) -> Correlated | None:
        """What to send for `event` (made by make_event); None: skipped (spam)."""
        event, key = self._aggregate(event)
        result = self._observe(event, key)
        bucket = self._spam.get_recent(_object_key(event))
        if bucket is None:
            bucket = TokenBucket(SPAM_QPS, SPAM_BURST, self.clock)
        self._spam.put(_object_key(event), bucket)
        return result if bucket.try_take() else None

    def _aggregate(self, event: dict[str, Any]) -> tuple[dict[str, Any], tuple[str, ...]]:
        now = self.clock()
        group = _aggregate_key(event)
        record = self._similar.get_recent(group)
        if record is None or now - record[1] > AGGREGATE_SECONDS:
            record = [set(), now]
        record[0].add(event["message"])
        record[1] = now
        self._similar.put(group, record)
        if len(record[0]) < AGGREGATE_MAX:
            return event, _event_key(event)
        record[0].pop()  # the set stays below the limit; every later one is combined
        return {**event, "message": COMBINED + event["message"]}, group

    def _observe(self, event: dict[str, Any], key: tuple[str, ...]) -> Correlated:
        seen = self._seen.get_recent(key)
        if seen is None:
            self._seen.put(key, (1, event["firstTimestamp"], event["metadata"]["name"]))
            return Correlated(event, None)
        count, first, name = seen
        count += 1
        self._seen.put(key, (count, first, name))
        event = {
            **event,
            "metadata": {**event["metadata"], "name": name},
            "firstTimestamp": first,
            "count": count,
        }
        # What the kubelet's two-way merge patch holds: the fields a repeat changes.
        patch = {
            "count": count,
            "lastTimestamp": event["lastTimestamp"],
            "message": event["message"],
        }
        return Correlated(event, patch)
