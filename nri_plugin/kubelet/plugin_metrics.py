"""The Prometheus series of `nri-sla device-plugin` (docs/device-plugin.md, "Metrics"), in
a registry of their own, served by nri_plugin.ops.metrics_http like `nri-sla run`'s
(which reads `registry` and `is_registered`). Labels are resource names the plugin itself
advertises and fixed words: no value a kubelet request carries becomes a label."""

from __future__ import annotations

import threading
from collections.abc import Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge

from nri_plugin import __version__
from nri_plugin.ops.metrics import NAMESPACE

PREFIX = "device_plugin"
OUTCOMES = ("ok", "invalid", "failed")  # of an Allocate or a registration attempt


class DevicePluginMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._lock = threading.Lock()
        self._registered: dict[str, bool] = {}

        def counter(name: str, text: str, labels: tuple[str, ...]) -> Counter:
            return Counter(
                f"{PREFIX}_{name}", text, labels, namespace=NAMESPACE, registry=self.registry
            )

        def gauge(name: str, text: str, labels: tuple[str, ...]) -> Gauge:
            return Gauge(
                f"{PREFIX}_{name}", text, labels, namespace=NAMESPACE, registry=self.registry
            )

        self.registrations = counter(
            "registrations",
            "Register calls to the kubelet, by resource and outcome (ok, failed)",
            ("resource", "outcome"),
        )
        self.registered = gauge(
            "registered",
            "1 while the resource is registered with the kubelet, else 0",
            ("resource",),
        )
        self.allocations = counter(
            "allocations",
            "Allocate calls, by resource and outcome (ok, invalid: refused "
            "request, failed: a device node missing)",
            ("resource", "outcome"),
        )
        self.allocated_devices = counter(
            "allocated_devices",
            "Devices handed out by Allocate calls that succeeded",
            ("resource",),
        )
        self.preferred_allocations = counter(
            "preferred_allocations", "GetPreferredAllocation calls answered", ("resource",)
        )
        self.devices = gauge(
            "devices",
            "Devices advertised now, by resource and health (Healthy, Unhealthy)",
            ("resource", "health"),
        )
        self.lists_sent = counter(
            "lists", "Device lists sent on ListAndWatch streams", ("resource",)
        )
        self.inventory_failures = counter(
            "inventory_read_failures",
            "GPU inventory rescans that failed (the last list is kept)",
            (),
        )
        gauge(
            "build_info", "Always 1; the version label says which nri-sla runs", ("version",)
        ).labels(version=__version__).set(1)

    @property
    def is_registered(self) -> bool:
        """Every resource registered (the HTTP server's /readyz)."""
        with self._lock:
            return bool(self._registered) and all(self._registered.values())

    def registration(self, resource: str, ok: bool) -> None:
        self.registrations.labels(resource=resource, outcome="ok" if ok else "failed").inc()
        self.registered.labels(resource=resource).set(1 if ok else 0)
        with self._lock:
            self._registered[resource] = ok

    def allocation(self, resource: str, outcome: str, devices: int = 0) -> None:
        self.allocations.labels(resource=resource, outcome=outcome).inc()
        if devices:
            self.allocated_devices.labels(resource=resource).inc(devices)

    def advertised(self, counts: Mapping[str, tuple[int, int]]) -> None:
        """Resource -> (healthy, unhealthy) devices now."""
        for resource, (healthy, unhealthy) in counts.items():
            self.devices.labels(resource=resource, health="Healthy").set(healthy)
            self.devices.labels(resource=resource, health="Unhealthy").set(unhealthy)
