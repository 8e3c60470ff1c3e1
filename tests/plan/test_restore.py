"""Records in `sla.nri.io/applied` and rebuilding an allocator from them."""

import json

import pytest

from nri_plugin.plan.allocator import Allocator
from nri_plugin.plan.errors import PlacementError
from nri_plugin.plan.placement_values import PlacementRequest as Req
from tests.support.grant_helpers import granted


def test_record_is_small_json(dgx):
    p = dgx.allocate(granted(dgx, "a", 0, 1, 2, 3, topology="nvlink", exclusive_cpus=4))
    record = p.to_record()
    text = json.dumps(record, separators=(",", ":"))
    assert len(text) < 300
    assert record["exclusive"] == "6-7,22-23" and record["mems"] == "0"
    assert json.loads(text) == record


def test_restore_rebuilds_the_same_state(dgx_node):
    before = Allocator(*dgx_node)
    placements = {
        "a": before.allocate(granted(before, "a", 0, 1, exclusive_cpus=2)),
        "b": before.allocate(granted(before, "b", 1)),  # the kubelet gave GPU 1 twice
        "c": before.allocate(Req("c", numa_nodes=(1,))),
    }
    after = Allocator(*dgx_node)
    for owner, p in placements.items():
        restored = after.restore(owner, json.loads(json.dumps(p.to_record())))
        assert restored == p  # gpus, cpus, mems, exclusive CPUs
    assert after.gpus_in_use() == before.gpus_in_use() == {0: ("a",), 1: ("a", "b")}
    assert after.exclusive_cpus_in_use() == before.exclusive_cpus_in_use()
    assert after.shared_cpus() == before.shared_cpus()
    # and the next decision is the same on both
    request = granted(after, "d", 2, exclusive_cpus=2)
    assert after.allocate(request) == before.allocate(request)


def test_restore_refuses_taken_exclusive_cpus_and_changes_nothing(dgx):
    a = dgx.allocate(granted(dgx, "a", 0, exclusive_cpus=2))
    with pytest.raises(PlacementError, match="exclusive CPUs 7,23 are already held by a"):
        dgx.restore("b", {"gpus": ["1"], "exclusive": "7,23"})
    assert dgx.owners() == ("a",) and dgx.gpus_in_use() == {0: ("a",)}
    assert dgx.placement_of("a") == a
    # restoring the owner itself (a replayed Synchronize) is fine
    assert dgx.restore("a", a.to_record()) == a


def test_records_from_before_issue_18_are_held_until_the_container_ends(dgx, mig):
    """nri-sla chose these GPUs (exclusive, shared, or aligned to the runtime's): the
    container can open them, so it holds them, whoever else holds them too."""
    dgx.allocate(granted(dgx, "a", 0))
    b = dgx.restore("b", {"gpus": ["0"], "shared": True})
    c = dgx.restore("c", {"gpus": ["0", "1"], "runtime": True, "mems": "0"})
    assert [g.index for g in b.gpus] == [0] and c.mems == {0}
    assert dgx.gpus_in_use() == {0: ("a", "b", "c"), 1: ("c",)}
    assert "shared" not in c.to_record() and "runtime" not in c.to_record()
    uuid = mig.inventory.gpus[0].mig_instances[1].uuid
    p = mig.restore("m", {"mig": uuid})  # the old one-device form
    assert p.to_record() == {"migs": [uuid]} and mig.gpus_in_use() == {0: ("m",)}
    dgx.release("c")
    assert dgx.gpus_in_use() == {0: ("a", "b")}


def test_restore_mig(mig):
    p = mig.allocate(granted(mig, "a", migs=("0:1",), mig_profile="2g.20gb"))
    mig.release("a")
    assert mig.restore("a", p.to_record()) == p
    assert mig.restore("b", p.to_record()).migs == p.migs  # two holders: both recorded
    assert list(mig.migs_in_use().values()) == [("a", "b")]


@pytest.mark.parametrize(
    ("record", "text"),
    [
        ({"gpus": ["GPU-gone"]}, "GPU GPU-gone is not on this node"),
        ({"mig": "MIG-gone"}, "MIG device MIG-gone is not on this node"),
        ({"migs": ["MIG-gone"]}, "MIG device MIG-gone is not on this node"),
        ({"exclusive": "7-"}, "exclusive: invalid CPU list"),
        ("gpus=0", "must be a mapping"),
    ],
)
def test_bad_records(dgx, record, text):
    with pytest.raises(PlacementError, match=text):
        dgx.restore("a", record)


def test_release(dgx):
    dgx.allocate(granted(dgx, "a", 0, 1, exclusive_cpus=2))
    assert dgx.release("a") is True
    assert dgx.release("a") is False
    assert dgx.gpus_in_use() == {} and dgx.exclusive_cpus_in_use() == {}
    assert dgx.shared_cpus() == dgx.topology.online


def test_rescan_follows_gpus_by_bus_id_when_sysfs_renumbers(tmp_path):
    """A sysfs inventory (no UUIDs) numbers GPUs by bus order: one leaving renumbers the
    rest. Holdings follow each GPU, the vanished one stays its holder's, records name
    bus ids and restore takes them back."""
    import shutil

    from nri_plugin.simulated.hardware import build_sysfs, dgx_like_pci
    from nri_plugin.topology.cpus import read_topology
    from nri_plugin.topology.inventory import load_inventory

    sysfs = build_sysfs(tmp_path / "sys", nodes=2, cores_per_node=8, threads=2, pci=dgx_like_pci())
    alloc = Allocator(read_topology(sysfs), load_inventory("sysfs", sysfs_root=sysfs))
    a = alloc.allocate(granted(alloc, "a", 0, 1))
    b = alloc.allocate(granted(alloc, "b", 2, 3))
    assert a.to_record()["gpus"][0].startswith("0000:")  # bus ids, not indices
    gone = a.gpus[0]
    shutil.rmtree(sysfs / "bus/pci/devices" / gone.pci_bus_id)
    change = alloc.rescan(load_inventory("sysfs", sysfs_root=sysfs))
    assert [(g.pci_bus_id, holders) for g, holders in change.vanished] == [
        (gone.pci_bus_id, ("a",))
    ]
    assert alloc.missing_gpus() == {gone.pci_bus_id: ("a",)}
    # b's GPUs moved to new indices, still b's; a new grant names the renumbered GPUs
    inv = alloc.inventory
    assert {inv.find(g.pci_bus_id).index for g in b.gpus} == {
        i for i, owners in alloc.gpus_in_use().items() if owners == ("b",)
    }
    assert len(alloc.allocate(granted(alloc, "c", 3, 4, 5, 6)).gpus) == 4
    # a restart of the records on the same allocator (Synchronize) keeps a's vanished GPU
    records = {o: alloc.placement_of(o).to_record() for o in ("a", "b", "c")}
    for owner in records:
        alloc.release(owner)
    for owner, record in records.items():
        alloc.restore(owner, record)
    alloc.prune_missing()
    assert alloc.missing_gpus() == {gone.pci_bus_id: ("a",)}
    alloc.release("a")
    alloc.prune_missing()
    assert alloc.missing_gpus() == {}
