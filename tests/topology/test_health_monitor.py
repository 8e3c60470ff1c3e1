"""GpuHealthMonitor over the fake NVML: XID events, lost GPUs, NVML failing."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from nri_plugin.errors import ProgrammingError
from nri_plugin.simulated.hardware import (
    NVML_ERROR_LIBRARY_NOT_FOUND,
    NVML_ERROR_UNKNOWN,
    FakeNvml,
    dgx_like_gpus,
    mig_box_gpus,
)
from nri_plugin.topology.gpu_health import GpuHealth, unknown
from nri_plugin.topology.health_monitor import GpuHealthMonitor
from nri_plugin.topology.inventory import InventoryReader, load_inventory
from nri_plugin.value import replace


def watched(sysfs, nvml):
    inventory = load_inventory(sysfs_root=sysfs, nvml=nvml)
    monitor = GpuHealthMonitor(nvml)
    monitor.track(inventory)
    return inventory, monitor


def changes(records):
    return [
        (r.fields["gpu"], r.fields["health"], r.fields["reason"])
        for r in records
        if r.getMessage() == "GPU health changed"
    ]


def test_critical_xid_makes_a_gpu_unhealthy_for_good_application_xids_do_not(
    dgx_sysfs, dgx_nvml, caplog
):
    caplog.set_level(logging.INFO, logger="nri_sla.topology.health")
    inventory, monitor = watched(dgx_sysfs, dgx_nvml)
    assert not monitor.poll(500)  # nothing yet; the first wait got the timeout asked
    assert dgx_nvml.waits == [500]
    gpu2, gpu5 = inventory.gpus[2], inventory.gpus[5]
    dgx_nvml.queue_xid(dgx_nvml.gpus[5], 31)  # the application faulted: GPU fine
    dgx_nvml.queue_xid(dgx_nvml.gpus[2], 79)  # fallen off the bus
    dgx_nvml.queue_xid(dgx_nvml.gpus[2], 48)  # double-bit ECC error, same GPU
    change = monitor.poll(0)
    assert [(k, h.state, h.reason) for k, _, h in change.changed] == [
        (gpu2.identity, "unhealthy", "XID 79")
    ]
    health = monitor.health()
    assert health[gpu2.identity].state == "unhealthy" and health[gpu5.identity].healthy
    assert monitor.health_of(gpu2).reason == "XID 79"
    # logged once, by its UUID; the application XID logged but no change
    assert changes(caplog.records) == [(gpu2.uuid, "unhealthy", "XID 79")]
    assert any(
        r.getMessage().startswith("GPU application error") and r.fields["xid"] == 31
        for r in caplog.records
    )
    # for good: a fresh, healthy inventory read does not clear it
    monitor.track(load_inventory(sysfs_root=dgx_sysfs, nvml=dgx_nvml))
    assert not monitor.poll(0) and not monitor.health()[gpu2.identity].healthy
    applied = monitor.apply(inventory)
    assert [g.offered_whole for g in applied.gpus] == [True, True, False] + [True] * 5


def test_xid_on_a_mig_device_names_the_instance(dgx_sysfs, caplog):
    nvml = FakeNvml(mig_box_gpus())
    inventory, monitor = watched(dgx_sysfs, nvml)
    nvml.queue_xid(nvml.gpus[0], 94, gi=3, ci=0)  # contained ECC error in one instance
    (change,) = monitor.poll(0).changed
    assert change[0] == inventory.gpus[0].identity
    assert change[2].reason == "XID 94 on MIG GPU instance 3 compute instance 0"


def test_a_gpu_lost_while_watched_is_unhealthy(dgx_sysfs, dgx_nvml):
    inventory, monitor = watched(dgx_sysfs, dgx_nvml)
    monitor.poll(0)  # the session is open
    dgx_nvml.gpus[6].lost = True
    (change,) = monitor.poll(0).changed
    assert change[0] == inventory.gpus[6].identity and "lost" in change[2].reason


def test_a_lost_gpu_is_healthy_again_once_a_read_finds_it(dgx_sysfs, dgx_nvml):
    reader = InventoryReader("nvml", sysfs_root=dgx_sysfs, nvml=dgx_nvml)  # as the plugins
    inventory = reader.read()
    monitor = GpuHealthMonitor(dgx_nvml)
    monitor.track(inventory)
    monitor.poll(0)
    dgx_nvml.gpus[6].lost = True
    monitor.poll(0)
    key = inventory.gpus[6].identity
    # still lost: a read (its last good facts, lost) and later polls keep it unhealthy
    monitor.track(reader.read())
    assert not monitor.poll(0) and monitor.health()[key].state == "unhealthy"
    dgx_nvml.gpus[6].lost = False  # reset, back on the bus
    assert not monitor.poll(0)  # answering a probe is not enough: a read says so
    change = monitor.track(reader.read())
    assert [(k, now.state) for k, _, now in change.changed] == [(key, "healthy")]
    assert not monitor.poll(0) and monitor.health()[key].healthy  # a new session


def test_the_inventory_reads_unknown_gpus(dgx_sysfs, dgx_nvml):
    inventory, monitor = watched(dgx_sysfs, dgx_nvml)
    dgx_nvml.gpus[1].errors = {"nvmlDeviceGetUUID": NVML_ERROR_UNKNOWN}
    change = monitor.track(load_inventory(sysfs_root=dgx_sysfs, nvml=dgx_nvml))
    assert [(k, was.state, now.state) for k, was, now in change.changed] == [
        (inventory.gpus[1].identity, "healthy", "unknown")
    ]
    dgx_nvml.gpus[1].errors = {}
    assert (
        monitor.track(load_inventory(sysfs_root=dgx_sysfs, nvml=dgx_nvml)).changed[0][2].healthy
    )  # readable again: healthy again (not an event)


def test_new_gpus_are_news_only_when_not_healthy(dgx_sysfs, dgx_nvml):
    inventory = load_inventory(sysfs_root=dgx_sysfs, nvml=dgx_nvml)
    odd = replace(inventory.gpus[0], health=unknown("NVML: test"))
    change = GpuHealthMonitor(dgx_nvml).track(replace(inventory, gpus=(odd, *inventory.gpus[1:])))
    assert [(k, was) for k, was, _ in change.changed] == [(odd.identity, None)]


def test_nvml_unavailable_changes_nothing_and_says_so_once(dgx_sysfs, dgx_nvml, caplog):
    caplog.set_level(logging.WARNING, logger="nri_sla.topology.health")
    inventory, monitor = watched(dgx_sysfs, dgx_nvml)
    dgx_nvml.fail_init = NVML_ERROR_LIBRARY_NOT_FOUND
    assert not monitor.poll(0) and not monitor.poll(0)
    assert all(h.healthy for h in monitor.health().values())
    assert [r.getMessage() for r in caplog.records] == ["GPU health: NVML cannot be watched"]
    dgx_nvml.fail_init = None
    dgx_nvml.queue_xid(dgx_nvml.gpus[0], 119)  # GSP timeout
    assert monitor.poll(0).changed[0][0] == inventory.gpus[0].identity
    monitor.close()
    assert dgx_nvml.initialized == 0


def test_gpus_without_xid_events_stay_watched_for_loss(dgx_sysfs, caplog):
    caplog.set_level(logging.INFO, logger="nri_sla.topology.health")
    gpus = dgx_like_gpus()
    gpus[0].xid_events = False
    nvml = FakeNvml(gpus)
    _, monitor = watched(dgx_sysfs, nvml)
    assert not monitor.poll(0)
    assert any(r.getMessage() == "GPU health: no XID events for this GPU" for r in caplog.records)
    gpus[0].lost = True
    assert monitor.poll(0).changed[0][2].state == "unhealthy"


def test_a_session_that_fails_half_way_leaves_nvml_closed(dgx_sysfs, dgx_nvml):
    _, monitor = watched(dgx_sysfs, dgx_nvml)

    def count_fails():
        raise dgx_nvml.NVMLError(NVML_ERROR_UNKNOWN)

    dgx_nvml.nvmlDeviceGetCount = count_fails
    assert not monitor.poll(0)
    assert dgx_nvml.initialized == 0


def test_no_gpu_tracked_loads_no_nvml():
    loads = []
    monitor = GpuHealthMonitor(load=lambda: loads.append(1) or FakeNvml([]))
    assert not monitor.poll(0) and not monitor.poll(0)
    assert loads == [] and monitor.health() == {}


def test_a_poll_without_nvml_still_waits_what_it_was_asked(dgx_sysfs, dgx_nvml):
    """The device plugin polls in a loop with its interval as the timeout: without NVML
    (or without a GPU to watch) each poll must take that long, not return at once."""
    _, monitor = watched(dgx_sysfs, dgx_nvml)
    dgx_nvml.fail_init = NVML_ERROR_LIBRARY_NOT_FOUND
    started = time.monotonic()
    assert not monitor.poll(200)
    assert time.monotonic() - started >= 0.19
    threading.Timer(0.05, monitor.close).start()  # close() ends a wait at once
    started = time.monotonic()
    assert not monitor.poll(10_000)
    assert time.monotonic() - started < 5


def test_a_health_state_is_one_of_three():
    assert not GpuHealth("unknown", "NVML: timed out").healthy
    with pytest.raises(ProgrammingError, match="'lost' is not one of healthy, unhealthy, unknown"):
        GpuHealth("lost")
