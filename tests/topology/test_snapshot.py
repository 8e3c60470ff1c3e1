from pathlib import Path

import pytest
import yaml

from nri_plugin.errors import INVALID
from nri_plugin.topology.cpus import read_topology
from nri_plugin.topology.errors import SnapshotError
from nri_plugin.topology.inventory import load_inventory
from nri_plugin.topology.snapshot import load_snapshot, save_snapshot

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_roundtrip_keeps_every_fact(tmp_path, dgx_sysfs, mig_nvml, mig_proc):
    topo = read_topology(dgx_sysfs)
    inv = load_inventory(sysfs_root=dgx_sysfs, nvml=mig_nvml, proc_root=mig_proc)
    path = tmp_path / "node.yaml"
    save_snapshot(path, topo, inv)
    snap = load_snapshot(path)
    assert snap.topology == topo
    assert snap.topology.node(1).distances == topo.node(1).distances
    assert snap.inventory.gpus == inv.gpus
    assert snap.inventory.source == "snapshot"
    assert load_inventory("snapshot", snapshot=path).gpus == inv.gpus


@pytest.mark.parametrize(
    "name",
    [
        "dgx-like.yaml",
        "pcie-box.yaml",
        "mig-box.yaml",
        "dgx1v.yaml",
        "nvswitch-box.yaml",
        "pcie-pairs.yaml",
    ],
)
def test_shipped_examples_load(name):
    snap = load_snapshot(EXAMPLES / name)
    assert snap.inventory.gpus
    assert snap.topology.online


def test_dgx_example_facts():
    snap = load_snapshot(EXAMPLES / "dgx-like.yaml")
    assert len(snap.inventory.gpus) == 8
    assert snap.topology.threads_per_core == 2
    assert {g.numa_node for g in snap.inventory.gpus} == {0, 1}


def _write(tmp_path, data):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"version": 2, "cpus": {"online": "0"}}, r"version: 2 is not supported \(allowed: 1\)"),
        ({"version": 1, "cpus": {"online": "x"}}, r"cpus\.online: invalid CPU list"),
        ({"version": 1}, r"\.cpus: missing"),
        (
            {"version": 1, "cpus": {"online": "0-1"}, "gpus": [{"index": "a"}]},
            r"gpus\[0\]\.index: expected int, got 'a'",
        ),
        (
            {
                "version": 1,
                "cpus": {"online": "0-1"},
                "gpus": [{"index": 0, "pci_bus_id": "slot 1"}],
            },
            r"gpus\[0\]\.pci_bus_id: 'slot 1' is not a PCI address",
        ),
        # Another file given by mistake says what it is.
        ([1, 2], "a YAML list, not a node snapshot"),
        (
            {"apiVersion": "v1", "kind": "Pod"},
            "a Kubernetes Pod manifest, not a node snapshot "
            r"\(expected what `nri-sla inventory --save`",
        ),
    ],
)
def test_bad_snapshots_name_the_field(tmp_path, data, message):
    # The operator's file, so invalid (exit status 2), never an internal failure.
    with pytest.raises(SnapshotError, match=message) as caught:
        load_snapshot(_write(tmp_path, data))
    assert caught.value.kind == INVALID


def test_unreadable_and_invalid_yaml(tmp_path):
    with pytest.raises(SnapshotError, match="cannot read inventory snapshot"):
        load_snapshot(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: [\n")
    with pytest.raises(SnapshotError, match="not valid YAML"):
        load_snapshot(bad)
