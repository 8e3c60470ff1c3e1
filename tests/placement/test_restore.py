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
