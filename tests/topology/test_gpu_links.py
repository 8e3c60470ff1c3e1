"""NVLink link counts per peer and PCIe distances: NVML, sysfs, snapshots, the CLI."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from nri_plugin.commands.inventory import render_table
from nri_plugin.simulated.hardware import (
    DGX1V_LINKS,
    FakeNvml,
    build_pci_tree,
    build_sysfs,
    dgx1v_gpus,
    nvswitch_gpus,
    pcie_pairs_gpus,
)
from nri_plugin.topology.cpus import read_topology
from nri_plugin.topology.errors import InventoryError, SnapshotError
from nri_plugin.topology.gpus import Gpu
from nri_plugin.topology.inventory import load_inventory
from nri_plugin.topology.pcie import level_of_nvml, level_of_paths
from nri_plugin.topology.snapshot import load_snapshot, save_snapshot

MACHINES = {"dgx1v": dgx1v_gpus, "nvswitch": nvswitch_gpus, "pcie-pairs": pcie_pairs_gpus}


def machine_sysfs(tmp_path: Path, name: str) -> Path:
    sysfs = build_sysfs(tmp_path / "sys", nodes=2, cores_per_node=4, threads=2)
    return build_pci_tree(sysfs, MACHINES[name]())


def test_dgx1v_link_counts_per_peer(tmp_path):
    inv = load_inventory(
        "nvml", sysfs_root=machine_sysfs(tmp_path, "dgx1v"), nvml=FakeNvml(dgx1v_gpus())
    )
    for (a, b), n in DGX1V_LINKS.items():
        assert inv.gpus[a].links_to(b) == inv.gpus[b].links_to(a) == n
    assert inv.gpus[0].nvlink_links == ((1, 1), (2, 1), (3, 2), (4, 2))
    assert inv.gpus[0].nvlink_peers == {1, 2, 3, 4}  # derived from the links
    assert inv.gpus[0].links_to(5) == 0
    assert all(sum(n for _, n in g.nvlink_links) == 6 for g in inv.gpus)  # 6 per V100


def test_nvswitch_peers_get_every_link_into_common_switches(tmp_path):
    inv = load_inventory(
        "nvml", sysfs_root=machine_sysfs(tmp_path, "nvswitch"), nvml=FakeNvml(nvswitch_gpus())
    )
    assert all(g.nvlink_links == tuple((p, 12) for p in range(8) if p != g.index) for g in inv.gpus)


@pytest.mark.parametrize("name", sorted(MACHINES))
def test_pcie_levels_agree_between_nvml_and_the_sysfs_tree(tmp_path, name):
    sysfs = machine_sysfs(tmp_path, name)
    from_nvml = load_inventory("nvml", sysfs_root=sysfs, nvml=FakeNvml(MACHINES[name]()))
    old_driver = FakeNvml(MACHINES[name]())
    old_driver.nvmlDeviceGetTopologyCommonAncestor = None  # NVML without the call
    fallback = load_inventory("nvml", sysfs_root=sysfs, nvml=old_driver)
    sysfs_only = load_inventory("sysfs", sysfs_root=sysfs)
    levels = [g.pcie_levels for g in from_nvml.gpus]
    assert levels == [g.pcie_levels for g in fallback.gpus]
    assert levels == [g.pcie_levels for g in sysfs_only.gpus]
    assert all(len(g.pcie_levels) == 7 for g in from_nvml.gpus)


def test_pcie_pairs_levels(tmp_path):
    inv = load_inventory("sysfs", sysfs_root=machine_sysfs(tmp_path, "pcie-pairs"))
    g0 = inv.gpus[0]
    assert [g0.pcie_level(p) for p in range(1, 8)] == ["switch", "numa", "numa"] + ["system"] * 4
    assert g0.pcie_level(0) is None


def test_dgx1v_switch_pairs_share_a_host_bridge(tmp_path):
    inv = load_inventory("sysfs", sysfs_root=machine_sysfs(tmp_path, "dgx1v"))
    assert [inv.gpus[0].pcie_level(p) for p in (1, 2, 4)] == ["switch", "hostbridge", "system"]


@pytest.mark.parametrize(
    ("value", "level"),
    [
        (0, "switch"),
        (10, "switch"),
        (20, "switch"),
        (30, "hostbridge"),
        (40, "numa"),
        (50, "system"),
        (60, None),
    ],
)
def test_nvml_levels(value, level):
    assert level_of_nvml(value) == level


def test_paths_without_a_numa_node_cannot_tell_across_root_complexes():
    a, b = (
        ("pci0000:00", "0000:00:01.0", "0000:01:00.0"),
        ("pci0000:80", "0000:80:01.0", "0000:81:00.0"),
    )
    assert level_of_paths(a, b, None, 0) is None
    assert level_of_paths(a, b, 0, 0) == "numa"
    assert level_of_paths(a, (), 0, 0) is None


def test_gpu_values_keep_peers_and_links_consistent():
    assert Gpu(0, "", "0000:01:00.0", 0, nvlink_peers=frozenset({1})).nvlink_links == ((1, 1),)
    with pytest.raises(InventoryError, match="differ from the peers of its links"):
        Gpu(0, "", "0000:01:00.0", 0, nvlink_peers=frozenset({2}), nvlink_links=((1, 2),))
    with pytest.raises(InventoryError, match="at least 1 link"):
        Gpu(0, "", "0000:01:00.0", 0, nvlink_links=((1, 0),))
    with pytest.raises(InventoryError, match="'bus' is not one of switch"):
        Gpu(0, "", "0000:01:00.0", 0, pcie_levels=((1, "bus"),))


def test_snapshot_roundtrip_keeps_links_and_pcie(tmp_path):
    sysfs = machine_sysfs(tmp_path, "dgx1v")
    inv = load_inventory("nvml", sysfs_root=sysfs, nvml=FakeNvml(dgx1v_gpus()))
    path = tmp_path / "node.yaml"
    save_snapshot(path, read_topology(sysfs), inv)
    raw = yaml.safe_load(path.read_text())
    assert raw["gpus"][0]["nvlink_links"] == [[1, 1], [2, 1], [3, 2], [4, 2]]
    assert raw["gpus"][0]["pcie"] == {"switch": [1], "hostbridge": [2, 3], "system": [4, 5, 6, 7]}
    assert load_snapshot(path).inventory.gpus == inv.gpus


def _snapshot(tmp_path, gpu):
    path = tmp_path / "s.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "version": 1,
                "cpus": {"online": "0-1"},
                "gpus": [{"index": 0, "pci_bus_id": "0000:01:00.0", **gpu}],
            }
        )
    )
    return path


def test_old_snapshots_mean_one_link_per_peer(tmp_path):
    gpu = load_snapshot(_snapshot(tmp_path, {"nvlink_peers": [1, 2]})).inventory.gpus[0]
    assert gpu.nvlink_links == ((1, 1), (2, 1)) and gpu.pcie_levels == ()


@pytest.mark.parametrize(
    ("gpu", "message"),
    [
        ({"nvlink_links": [[1]]}, r"gpus\[0\]\.nvlink_links\[0\]: expected \[peer index, links"),
        ({"nvlink_links": [[1, 0]]}, r"nvlink_links\[0\]: expected \[peer index, links >= 1\]"),
        (
            {"nvlink_peers": [2], "nvlink_links": [[1, 1]]},
            r"gpus\[0\]: GPU 0: NVLink peers \[2\] differ",
        ),
        ({"nvlink_peers": ["x"]}, r"nvlink_peers\[0\]: expected a GPU index, got 'x'"),
        ({"pcie": {"bus": [1]}}, r"gpus\[0\]\.pcie: 'bus' is not one of switch, hostbridge"),
        ({"pcie": {"switch": 1}}, r"pcie\.switch: expected a list of GPU indexes"),
    ],
)
def test_bad_link_facts_name_the_field(tmp_path, gpu, message):
    with pytest.raises(SnapshotError, match=message):
        load_snapshot(_snapshot(tmp_path, gpu))


def test_inventory_table_shows_link_counts_and_switch_peers(tmp_path):
    # render_table, not main(): main quietens the topology logger for later tests
    sysfs = machine_sysfs(tmp_path, "dgx1v")
    out = render_table(
        read_topology(sysfs), load_inventory("nvml", sysfs_root=sysfs, nvml=FakeNvml(dgx1v_gpus()))
    )
    assert "NVLink peers  PCIe switch" in out
    row = next(line for line in out.splitlines() if "GPU-e0" in line)
    assert "1,2,3x2,4x2" in row and row.split()[-2] == "1"


def test_flat_sysfs_without_bridges_tells_no_pcie_distance(dgx_sysfs):
    # bus/pci/devices entries that are plain directories (no link into /sys/devices)
    inv = load_inventory("sysfs", sysfs_root=dgx_sysfs)
    assert len(inv.gpus) == 8 and all(g.pcie_levels == () for g in inv.gpus)
