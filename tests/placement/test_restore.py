"""Records in `sla.nri.io/applied` and rebuilding an allocator from them."""

import json

import pytest

from nri_plugin.plan.allocator import Allocator
from nri_plugin.plan.placement_values import PlacementError
from nri_plugin.plan.placement_values import PlacementRequest as Req


def test_record_is_small_json(dgx):
    p = dgx.allocate(Req("a", gpu_count=4, topology="nvlink", exclusive_cpus=4))
    record = p.to_record()
    text = json.dumps(record, separators=(",", ":"))
    assert len(text) < 300
    assert record["exclusive"] == "6-7,22-23" and record["mems"] == "0"
    assert json.loads(text) == record


def test_restore_rebuilds_the_same_state(dgx_node):
    before = Allocator(*dgx_node)
    placements = {
        "a": before.allocate(Req("a", gpu_count=2, exclusive_cpus=2)),
        "b": before.allocate(Req("b", gpu_count=1, shared_gpus=True)),
        "c": before.allocate(Req("c", numa_nodes=(1,))),
    }
    after = Allocator(*dgx_node)
    for owner, p in placements.items():
        restored = after.restore(owner, json.loads(json.dumps(p.to_record())))
        assert restored == p  # gpus, cpus, mems, exclusive CPUs, shared flag
    assert after.gpus_in_use() == before.gpus_in_use()
    assert after.exclusive_cpus_in_use() == before.exclusive_cpus_in_use()
    assert after.shared_cpus() == before.shared_cpus()
    # and the next decision is the same on both
    assert after.allocate(Req("d", gpu_count=2)) == before.allocate(Req("d", gpu_count=2))


def test_restore_refuses_double_booking_and_changes_nothing(dgx):
    a = dgx.allocate(Req("a", gpu_count=1, exclusive_cpus=2))
    with pytest.raises(PlacementError, match="GPU 0 is already held by a"):
        dgx.restore("b", {"gpus": ["0"]})
    with pytest.raises(PlacementError, match="exclusive CPUs 7,23 are already held by a"):
        dgx.restore("b", {"exclusive": "7,23"})
    assert dgx.owners() == ("a",)
    assert dgx.placement_of("a") == a
    # restoring the owner itself (a replayed Synchronize) is fine
    assert dgx.restore("a", a.to_record()) == a


def test_restore_shared_next_to_shared(dgx):
    dgx.allocate(Req("a", gpu_count=1, shared_gpus=True))
    dgx.restore("b", {"gpus": ["0"], "shared": True})
    assert dgx.gpus_in_use() == {0: ("a", "b")}
    with pytest.raises(PlacementError, match="already held"):
        dgx.restore("c", {"gpus": ["0"]})


def test_restore_mig(mig):
    p = mig.allocate(Req("a", mig_profile="2g.20gb"))
    mig.release("a")
    assert mig.restore("a", p.to_record()) == p
    with pytest.raises(PlacementError, match="is already held by a"):
        mig.restore("b", p.to_record())


@pytest.mark.parametrize(("record", "text"), [
    ({"gpus": ["GPU-gone"]}, "GPU GPU-gone is not on this node"),
    ({"mig": "MIG-gone"}, "MIG device MIG-gone is not on this node"),
    ({"exclusive": "7-"}, "exclusive: invalid CPU list"),
    ("gpus=0", "must be a mapping"),
])
def test_bad_records(dgx, record, text):
    with pytest.raises(PlacementError, match=text):
        dgx.restore("a", record)


def test_release(dgx):
    dgx.allocate(Req("a", gpu_count=2, exclusive_cpus=2))
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
    from nri_plugin.topology import load_inventory, read_topology

    sysfs = build_sysfs(tmp_path / "sys", nodes=2, cores_per_node=8, threads=2,
                        pci=dgx_like_pci())
    alloc = Allocator(read_topology(sysfs), load_inventory("sysfs", sysfs_root=sysfs))
    a = alloc.allocate(Req("a", gpu_count=2, topology="any"))
    b = alloc.allocate(Req("b", gpu_count=2, topology="any"))
    assert a.to_record()["gpus"][0].startswith("0000:")  # bus ids, not indices
    gone = a.gpus[0]
    shutil.rmtree(sysfs / "bus/pci/devices" / gone.pci_bus_id)
    change = alloc.rescan(load_inventory("sysfs", sysfs_root=sysfs))
    assert [(g.pci_bus_id, holders) for g, holders in change.vanished] == [
        (gone.pci_bus_id, ("a",))]
    assert alloc.missing_gpus() == {gone.pci_bus_id: ("a",)}
    # b's GPUs moved to new indices, still b's; the free ones are the 7 listed less 3 held
    inv = alloc.inventory
    assert {inv.find(g.pci_bus_id).index for g in b.gpus} == {
        i for i, owners in alloc.gpus_in_use().items() if owners == ("b",)}
    with pytest.raises(PlacementError):
        alloc.allocate(Req("c", gpu_count=5))
    assert len(alloc.allocate(Req("c", gpu_count=4)).gpus) == 4
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
