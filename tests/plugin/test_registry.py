"""The registry of the plugin's containers: one entry per reported container, every
grant counted, GPUs two containers can open found and each pair reported once."""

from __future__ import annotations

from nri_plugin.plan.model import ContainerPlan
from nri_plugin.plugin.registry import ContainerEntry, ContainerRegistry, GrantedGpus

MIG = ("MIG-1", "0000:07:00.0")  # (uuid, parent GPU identity)


def entry(cid: str, whole=(), migs=(), plan=None, owed=False) -> ContainerEntry:
    return ContainerEntry(
        cid,
        f"pod-{cid}",
        "ns",
        f"p{cid}",
        "c",
        "created",
        GrantedGpus(frozenset(whole), frozenset(migs)),
        plan,
        owed,
    )


def test_plans_and_owed_writes_follow_the_entries():
    reg = ContainerRegistry()
    plan = ContainerPlan("hard", 2, memory_max=1 << 20)
    reg.add(entry("a", plan=plan, owed=True))
    reg.add(entry("b"))  # no SLA: still an entry
    assert len(reg) == 2 and [(e.id, e.decided_plan) for e in reg if e.decided_plan] == [
        ("a", plan)
    ]
    assert [e.id for e in reg if e.writes_owed] == ["a"] and not reg.get("a").started
    assert reg.remove("a").decided_plan is plan and reg.remove("a") is None
    assert len(reg) == 1 and reg.get("b").decided_plan is None


def test_a_synchronize_marks_the_containers_created_unenforced():
    reg = ContainerRegistry()
    reg.replace([entry("a"), entry("b"), entry("c")], unenforced=["b", "c"])
    assert [e.id for e in reg if e.unenforced] == ["b", "c"]
    reg.add(entry("b"))  # a retried CreateContainer: answered now, so enforced
    reg.remove("c")
    assert [e.id for e in reg if e.unenforced] == []


def test_shared_gpus_and_mig_devices():
    reg = ContainerRegistry()
    reg.add(entry("a", whole={"0000:07:00.0", "0000:0f:00.0"}))
    reg.add(entry("b", whole={"0000:0f:00.0"}))  # the kubelet gave b one of a's
    reg.add(entry("c", migs={MIG}))  # a MIG device on a's first GPU
    reg.add(entry("d", migs={("MIG-2", "0000:47:00.0")}))
    reg.add(entry("e", migs={("MIG-2", "0000:47:00.0")}))
    shared = {s.device: s.containers for s in reg.shared()}
    assert shared == {"0000:07:00.0": ("a", "c"), "0000:0f:00.0": ("a", "b"), "MIG-2": ("d", "e")}


def test_each_pair_is_reported_once_while_both_live():
    reg = ContainerRegistry()
    reg.add(entry("a", whole={"g0"}))
    reg.add(entry("b", whole={"g0"}))
    first = reg.new_shared_pairs(reg.shared())
    assert [(s.device, a.id, b.id) for s, a, b in first] == [("g0", "a", "b")]
    assert reg.new_shared_pairs(reg.shared()) == []
    reg.add(entry("c", whole={"g0"}))
    assert [(a.id, b.id) for _, a, b in reg.new_shared_pairs(reg.shared())] == [
        ("a", "c"),
        ("b", "c"),
    ]
    reg.remove("b")
    reg.add(entry("b", whole={"g0"}))  # a new container b: its pairs are new again
    assert len(reg.new_shared_pairs(reg.shared())) == 2
    reg.replace([entry("a", whole={"g0"})])
    assert reg.shared() == [] and reg.new_shared_pairs(reg.shared()) == []


def test_no_grant_shares_nothing():
    reg = ContainerRegistry()
    reg.add(entry("a"))
    reg.add(entry("b"))
    assert reg.shared() == [] and not reg.get("a").gpus


def test_containers_of_one_pod_share_its_strings():
    def of_pod(cid: str, pod_name: str) -> ContainerEntry:
        # Built as the plugin builds them: each protobuf read makes a new string.
        return ContainerEntry(
            cid,
            "".join(("pod-", "x")),
            "".join(("n", "s")),
            "".join(list(pod_name)),
            "c",
            "created",
        )

    reg = ContainerRegistry()
    reg.add(of_pod("a", "web"))
    reg.add(of_pod("b", "web"))
    assert reg.get("a").pod_name is reg.get("b").pod_name
    reg.replace([of_pod("a", "web"), of_pod("b", "web"), of_pod("c", "other")])
    a, b, c = (reg.get(cid) for cid in "abc")
    assert a.pod_id is b.pod_id and a.namespace is b.namespace and a.pod_name is b.pod_name
    # One pod id, another name (a runtime's own bug): each keeps what it was told.
    assert (c.pod_id, c.pod_name) == ("pod-x", "other") and c.pod_name is not a.pod_name
    assert sorted(reg.members("pod-x")) == ["a", "b", "c"]


def test_pod_members_follow_adds_removes_and_replaces():
    # One container kept as a tuple of one, a set from the second on (registry.py).
    def of_pod(cid: str, pod: str) -> ContainerEntry:
        return ContainerEntry(cid, pod, "ns", pod, "c", "created")

    reg = ContainerRegistry()
    reg.add(of_pod("a", "p"))
    assert list(reg.members("p")) == ["a"]
    reg.add(of_pod("a", "p"))  # a retried CreateContainer
    assert list(reg.members("p")) == ["a"]
    for cid in "bcd":
        reg.add(of_pod(cid, "p"))
    reg.add(of_pod("e", "q"))
    assert sorted(reg.members("p")) == ["a", "b", "c", "d"]
    assert list(reg.members("q")) == ["e"]
    reg.remove("b")
    reg.add(of_pod("c", "q"))  # the same id, now in another pod
    assert sorted(reg.members("p")) == ["a", "d"]
    assert sorted(reg.members("q")) == ["c", "e"]
    for cid in "ade":
        reg.remove(cid)
    assert list(reg.members("p")) == [] and list(reg.members("q")) == ["c"]
    reg.remove("c")
    assert list(reg.members("q")) == [] and reg._by_pod == {}
    reg.replace([of_pod("x", "p"), of_pod("y", "p"), of_pod("z", "r")])
    assert sorted(reg.members("p")) == ["x", "y"] and list(reg.members("r")) == ["z"]
    assert list(reg.members("")) == []
