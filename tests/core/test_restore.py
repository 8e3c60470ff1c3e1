"""core.restore.restore parses each verified record text once (replicas' records differ in
their MAC only) and still checks every container's MAC: a body it parsed for one
container is no pass for another container's copy."""

from __future__ import annotations

from nri_plugin.core.restore import restore
from nri_plugin.core.restored import LiveContainer
from nri_plugin.plan.model import ContainerPlan
from nri_plugin.plan.record import encode_record
from tests.support.plugin_helpers import plain_node

KEY = bytes(range(32))


def test_replicas_share_one_parsed_plan_and_a_copied_record_is_still_refused():
    node = plain_node(record_key=KEY)
    plan = ContainerPlan("hard", 2, cpu_quota=50_000, cpu_period=100_000, memory_max=1 << 30)
    records = {cid: encode_record(plan, "nri", cid, KEY) for cid in ("a", "b")}
    live = [
        LiveContainer("a", "default", records["a"], 1),
        LiveContainer("b", "default", records["b"], 2),
        LiveContainer("c", "default", records["a"], 3),
    ]  # a's, copied
    restored = restore(node, live)
    assert restored.plans["a"] == plan and restored.plans["b"] is restored.plans["a"]
    (rejected,) = restored.rejected
    assert (rejected.container, rejected.problem) == ("c", "unauthenticated")
