import logging
from pathlib import Path

import pytest

from nri_plugin.simulated.hardware import (
    NVML_ERROR_LIBRARY_NOT_FOUND,
    NVML_ERROR_NOT_SUPPORTED,
    NVML_ERROR_UNKNOWN,
    FakeGpu,
    FakeNvml,
    build_sysfs,
)
from nri_plugin.topology.errors import InventoryError
from nri_plugin.topology.gpus import normalize_bus_id
from nri_plugin.topology.inventory import InventoryReader, load_inventory
from nri_plugin.topology.nvml_gpus import import_pynvml


def test_dgx_like_through_nvml(dgx_sysfs, dgx_nvml):
    inv = load_inventory(sysfs_root=dgx_sysfs, nvml=dgx_nvml)
    assert inv.source == "nvml" and inv.degraded_reason is None
    assert [g.index for g in inv.gpus] == list(range(8))
    assert [g.numa_node for g in inv.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert inv.gpus[0].nvlink_peers == {1, 2, 3, 4}
    assert inv.gpus[5].nvlink_peers == {1, 4, 6, 7}
    assert inv.gpus[2].pci_bus_id == "0000:47:00.0"  # NVML's 8-digit domain normalised
    assert inv.gpus[3].uuid.startswith("GPU-")
    assert inv.gpus[0].memory_bytes == 80 * 1024**3
    assert not any(g.mig_enabled for g in inv.gpus)
    assert dgx_nvml.initialized == 0  # nvmlShutdown was called


def test_pcie_box_numa_from_sysfs_when_nvml_cannot_tell(pcie_sysfs, pcie_nvml):
    inv = load_inventory(sysfs_root=pcie_sysfs, nvml=pcie_nvml)
    assert [g.numa_node for g in inv.gpus] == [0, 0, 1, 1]
    assert all(not g.nvlink_peers for g in inv.gpus)


def test_mig_instances_with_profiles_and_caps(dgx_sysfs, mig_nvml, mig_proc):
    inv = load_inventory(sysfs_root=dgx_sysfs, nvml=mig_nvml, proc_root=mig_proc)
    gpu0, gpu1 = inv.gpus
    assert gpu0.mig_enabled and not gpu1.mig_enabled
    assert [m.profile for m in gpu0.mig_instances] == ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]
    small = gpu0.mig_instances[2]
    assert (small.gi_id, small.ci_id, small.index, small.gpu_index) == (9, 0, 2, 0)
    assert small.caps_minors == (84, 85)  # gi access, ci access from mig-minors
    assert small.memory_bytes == 10 * 1024**3
    assert inv.find_mig(small.uuid) == (gpu0, small)
    assert inv.find_mig("0:3") == (gpu0, gpu0.mig_instances[3])


def test_nvswitch_links_make_every_gpu_a_peer(dgx_sysfs):
    switches = ["00000000:C0:00.0", "00000000:C1:00.0"]
    gpus = [
        FakeGpu(
            uuid=f"GPU-{i}",
            bus=f"00000000:{0x10 + i:02X}:00.0",
            numa=i // 2,
            minor=i,
            links=switches,
        )
        for i in range(4)
    ]
    inv = load_inventory(sysfs_root=dgx_sysfs, nvml=FakeNvml(gpus))
    assert [g.nvlink_peers for g in inv.gpus] == [frozenset({0, 1, 2, 3} - {i}) for i in range(4)]


def test_find_by_index_uuid_and_bus_id(dgx_sysfs, dgx_nvml):
    inv = load_inventory(sysfs_root=dgx_sysfs, nvml=dgx_nvml)
    g = inv.gpus[2]
    assert inv.find("2") is g
    assert inv.find(g.uuid.upper().replace("GPU-", "gpu-")) is g
    assert inv.find("00000000:47:00.0") is g
    assert inv.find("47:00.0") is g
    assert inv.find("9") is None and inv.find("GPU-nope") is None and inv.find("x") is None


def test_auto_degrades_to_sysfs_with_a_reason(dgx_sysfs, caplog):
    broken = FakeNvml([], fail_init=NVML_ERROR_LIBRARY_NOT_FOUND)
    with caplog.at_level(logging.WARNING):
        inv = load_inventory(sysfs_root=dgx_sysfs, nvml=broken)
    assert inv.source == "sysfs"
    assert "NVML unavailable" in inv.degraded_reason
    assert "falling back to sysfs" in caplog.text
    assert [g.pci_bus_id for g in inv.gpus][:2] == ["0000:07:00.0", "0000:0f:00.0"]
    assert [g.numa_node for g in inv.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    # No UUIDs: a record names each GPU by its bus id (its index changes if one goes).
    assert all(g.uuid == "" and g.ref == g.pci_bus_id for g in inv.gpus)


def test_no_nvml_warning_on_a_node_without_gpus_and_one_per_reader(dgx_sysfs, tmp_path, caplog):
    bare = build_sysfs(tmp_path / "bare", nodes=1, cores_per_node=2, threads=1)
    broken = FakeNvml([], fail_init=NVML_ERROR_LIBRARY_NOT_FOUND)
    with caplog.at_level(logging.WARNING):
        inv = load_inventory(sysfs_root=bare, nvml=broken)
    assert (inv.gpus, inv.source) == ((), "sysfs") and "NVML unavailable" in inv.degraded_reason
    assert caplog.records == []  # nothing for the operator to fix
    reader = InventoryReader(sysfs_root=dgx_sysfs, nvml=broken)
    with caplog.at_level(logging.WARNING):
        for _ in range(3):  # the plugin's rescans
            assert len(reader.read().gpus) == 8
    assert [r.getMessage().count("falling back to sysfs") for r in caplog.records] == [1]


def test_one_gpu_failing_before_nvml_ever_worked_is_unknown_not_sysfs(dgx_sysfs, dgx_nvml):
    # NVML answered (it counted the GPUs): one GPU's failing call marks that GPU alone
    dgx_nvml.gpus[3].errors = {"nvmlDeviceGetUUID": NVML_ERROR_UNKNOWN}
    inv = load_inventory(sysfs_root=dgx_sysfs, nvml=dgx_nvml)
    assert inv.source == "nvml" and len(inv.gpus) == 8
    assert [g.health.state for g in inv.gpus] == ["healthy"] * 3 + ["unknown"] + ["healthy"] * 4
    assert "1 of 8" in inv.degraded_reason
    # never read well: a placeholder with its bus id, never offered whole
    gpu3 = inv.gpus[3]
    assert (gpu3.uuid, gpu3.pci_bus_id, gpu3.mig_unknown) == ("", "0000:4e:00.0", True)
    assert not gpu3.offered_whole and all(g.offered_whole for g in inv.gpus if g is not gpu3)
    assert inv.gpus[0].nvlink_peers == {1, 2, 3, 4}  # the others keep their NVLinks
    assert dgx_nvml.initialized == 0


def test_lost_gpu_is_unhealthy(dgx_sysfs, dgx_nvml):
    dgx_nvml.gpus[5].lost = True
    inv = load_inventory(sysfs_root=dgx_sysfs, nvml=dgx_nvml)
    assert inv.gpus[5].health.state == "unhealthy" and "lost" in inv.gpus[5].health.reason
    assert inv.gpus[5].pci_bus_id == ""  # not even its handle: NVML knows only its index


def test_after_nvml_worked_a_failure_keeps_the_last_good_read(dgx_sysfs, mig_nvml, mig_proc):
    reader = InventoryReader(sysfs_root=dgx_sysfs, nvml=mig_nvml, proc_root=mig_proc)
    good = reader.read()
    gpu0, gpu1 = good.gpus
    # one GPU's call fails: that GPU keeps its last good facts, marked unknown
    mig_nvml.gpus[0].errors = {"nvmlDeviceGetUUID": NVML_ERROR_UNKNOWN}
    inv = reader.read()
    assert inv.source == "nvml" and len(inv.gpus) == 2
    assert inv.gpus[0].mig_enabled and inv.gpus[0].mig_instances == gpu0.mig_instances
    assert inv.gpus[0].uuid == gpu0.uuid and inv.gpus[0].health.state == "unknown"
    assert inv.gpus[1] == gpu1  # the rest of the fresh read
    # NVML fails as a whole: the last good read, every GPU unknown, never sysfs
    mig_nvml.fail_init = NVML_ERROR_LIBRARY_NOT_FOUND
    inv = reader.read()
    assert inv.source == "nvml" and "last good read" in inv.degraded_reason
    assert [g.uuid for g in inv.gpus] == [gpu0.uuid, gpu1.uuid]
    assert [g.health.state for g in inv.gpus] == ["unknown", "unknown"]
    assert inv.gpus[0].mig_enabled and not any(g.offered_whole for g in inv.gpus)
    # NVML back: the fresh read again
    mig_nvml.fail_init = None
    mig_nvml.gpus[0].errors = {}
    assert reader.read().gpus == good.gpus


def test_mig_mode_unreadable_is_never_whole(dgx_sysfs, mig_nvml, mig_proc):
    mig_nvml.gpus[1].errors = {"nvmlDeviceGetMigMode": NVML_ERROR_UNKNOWN}
    reader = InventoryReader(sysfs_root=dgx_sysfs, nvml=mig_nvml, proc_root=mig_proc)
    first = reader.read().gpus[1]  # never read before: MIG off as far as NVML said, unknown
    assert first.uuid and not first.mig_enabled and first.mig_unknown
    assert first.health.state == "unknown" and "MIG mode" in first.health.reason
    assert not first.offered_whole
    # the last good read said MIG: still MIG (with its instances) while unreadable
    mig_nvml.gpus[1].errors = {}
    assert reader.read().gpus[0].mig_enabled
    mig_nvml.gpus[0].errors = {"nvmlDeviceGetMigMode": NVML_ERROR_UNKNOWN}
    gpu0 = reader.read().gpus[0]
    assert gpu0.mig_enabled and len(gpu0.mig_instances) == 4 and gpu0.mig_unknown


def test_mig_mode_not_supported_is_no_mig(dgx_sysfs, dgx_nvml):
    # pre-Ampere GPUs answer NOT_SUPPORTED: no MIG, nothing unknown
    dgx_nvml.gpus[0].errors = {"nvmlDeviceGetMigMode": NVML_ERROR_NOT_SUPPORTED}
    gpu0 = load_inventory(sysfs_root=dgx_sysfs, nvml=dgx_nvml).gpus[0]
    assert gpu0.offered_whole and gpu0.health.healthy


def test_auto_without_the_nvidia_driver_never_loads_pynvml(dgx_sysfs, tmp_path, monkeypatch):
    # No /proc/driver/nvidia: NVML cannot answer, so pynvml is not imported for nothing
    # (the plugin's memory); the inventory is sysfs's, as when NVML fails.
    imports = []
    monkeypatch.setattr(
        "nri_plugin.topology.inventory.import_pynvml",
        lambda: imports.append(1) or FakeNvml([], fail_init=NVML_ERROR_LIBRARY_NOT_FOUND),
    )
    reader = InventoryReader(sysfs_root=dgx_sysfs, proc_root=tmp_path)
    inv = reader.read()
    assert inv.source == "sysfs" and len(inv.gpus) == 8 and imports == []
    assert "no NVIDIA kernel driver loaded" in inv.degraded_reason
    # the driver there: NVML is asked (and fails here: sysfs again, NVML's reason)
    (tmp_path / "driver/nvidia").mkdir(parents=True)
    inv = reader.read()
    assert imports == [1] and inv.source == "sysfs"
    assert "NVML error 12" in inv.degraded_reason


def test_explicit_nvml_source_raises(dgx_sysfs):
    broken = FakeNvml([], fail_init=NVML_ERROR_LIBRARY_NOT_FOUND)
    with pytest.raises(InventoryError, match="NVML unavailable"):
        load_inventory("nvml", sysfs_root=dgx_sysfs, nvml=broken)


def test_unknown_source():
    with pytest.raises(InventoryError, match="auto, nvml, sysfs, snapshot"):
        load_inventory("magic")


def test_real_pynvml_on_this_machine_degrades_cleanly():
    nvml = import_pynvml()
    try:
        nvml.nvmlInit()
    except nvml.NVMLError:
        pass
    else:
        nvml.nvmlShutdown()
        pytest.skip("this machine has a working NVML; the degrade path is not testable here")
    inv = load_inventory()
    assert inv.source == "sysfs"
    assert "NVML" in inv.degraded_reason
    assert isinstance(inv.gpus, tuple)


def test_sysfs_ignores_other_vendors_and_functions(tmp_path):
    root = build_sysfs(
        tmp_path,
        pci=[
            ("0000:07:00.0", 0x030200, 1),
            ("0000:07:00.1", 0x040300, 1),  # HDMI audio
            ("0000:65:00.0", 0x030000, -1),
        ],
    )
    other = root / "bus/pci/devices/0000:03:00.0"
    other.mkdir()
    (other / "vendor").write_text("0x8086\n")
    (other / "class").write_text("0x030000\n")
    proc = tmp_path / "proc/driver/nvidia/gpus/0000:65:00.0"
    proc.mkdir(parents=True)
    (proc / "information").write_text("Model: \t NVIDIA RTX A4000\nDevice Minor: \t 3\n")
    inv = load_inventory("sysfs", sysfs_root=root, proc_root=tmp_path / "proc")
    assert [(g.pci_bus_id, g.numa_node) for g in inv.gpus] == [
        ("0000:07:00.0", 1),
        ("0000:65:00.0", None),
    ]
    assert (inv.gpus[1].name, inv.gpus[1].minor, inv.gpus[0].minor) == ("NVIDIA RTX A4000", 3, None)
    assert inv.gpus[0].device_minor == 0


def test_no_pci_tree_means_no_gpus(tmp_path):
    assert load_inventory("sysfs", sysfs_root=Path(tmp_path)).gpus == ()


@pytest.mark.parametrize(
    ("text", "bus"),
    [
        ("00000000:07:00.0", "0000:07:00.0"),
        ("0000:B7:00.0", "0000:b7:00.0"),
        ("b7:00.0", "0000:b7:00.0"),
        ("GPU-1", None),
        ("07:00", None),
    ],
)
def test_normalize_bus_id(text, bus):
    assert normalize_bus_id(text) == bus
