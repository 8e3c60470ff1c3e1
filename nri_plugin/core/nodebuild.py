"""build_node: the plugin's NodeState for this host (or a replayed inventory snapshot /
a fake sysfs), its books made from what the host is found to be. Apart from NodeState so
that the class says what a node holds, not how one is found."""

from __future__ import annotations

from pathlib import Path

from nri_plugin.config.values import NodeConfig
from nri_plugin.core.hosttopology import inventory_reader, node_allocator
from nri_plugin.core.nodestate import NodeState
from nri_plugin.enforce.capabilities import detect_capabilities
from nri_plugin.enforce.cgroupdetect import detect_cgroup_facts
from nri_plugin.enforce.rt_ledger import LEDGER_FILE, RtLedger
from nri_plugin.plan.rt_budget import RtBudget, kernel_rt_share
from nri_plugin.topology.watched import WatchedInventory


def build_node(
    config: NodeConfig,
    *,
    cgroup_version: int | None = None,
    inventory_file: str | None = None,
    sysfs_root: str = "/sys",
    detect: bool = True,
    record_key: bytes | None = None,
) -> NodeState:
    """The plugin's NodeState for this host (or a replayed inventory snapshot / fake sysfs).

    detect=False: plan only (explain), no cgroup facts read from the host beyond the
    version.
    """
    cg = config.cgroup
    facts = None
    if detect or cgroup_version is None:
        facts = detect_cgroup_facts(cg.root, cg.driver, cgroup_version or cg.version or "auto")
        cgroup_version = facts.version
    gpus = WatchedInventory.of(inventory_reader(config, sysfs_root, inventory_file))
    inventory = gpus.read()
    return NodeState(
        config,
        cgroup_version,
        facts=facts,
        allocator=node_allocator(
            config, sysfs_root, inventory_file=inventory_file, inventory=inventory
        ),
        rt_budget=RtBudget(config.rt_budget * kernel_rt_share()),
        rt_ledger=(
            RtLedger(Path(config.state_dir) / LEDGER_FILE)
            if detect and cgroup_version == 1
            else None
        ),
        capabilities=detect_capabilities(cgroup_version, sysfs_root),
        record_key=record_key,
        gpus=gpus,
    )
