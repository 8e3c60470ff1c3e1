"""A node's books rebuilt from the live containers' records (a Synchronize's restore).

Only the plugin restores (the OCI hook's one-shot node never does): this module is not on
the hook's path, so it imports what it uses at its top.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from operator import attrgetter
from pathlib import Path
from typing import Any

import nri_plugin.plan.rt_budget as budgets
from nri_plugin.config.values import NodeConfig
from nri_plugin.core.errors import RecordConflict
from nri_plugin.core.nodestate import NodeState, _cpu_dir
from nri_plugin.core.restored import LiveContainer, Rejection, Restored
from nri_plugin.errors import SlaFailure
from nri_plugin.plan.cpupool import ReportedCpusets
from nri_plugin.plan.errors import PlacementError, RecordError
from nri_plugin.plan.model import ContainerPlan
from nri_plugin.plan.record import RecordLimits, granted_permissions, parse_record, verified_text
from nri_plugin.topology.cpulist import format_cpulist, parse_cpulist
from nri_plugin.topology.errors import CpuListError

# A verified record text -> its plan and the permissions it needs (replicas share one).
Parsed = dict[str, tuple[ContainerPlan, tuple[str, ...]]]


def restore(node: NodeState, live: Iterable[LiveContainer]) -> Restored:
    """Make `node`'s allocations exactly what the live containers' records hold.

    Everything held before is let go first, so owners whose containers went away
    while the plugin was disconnected are released and nothing is taken twice. Then
    each record is taken again, earliest-created container first (ties by id): a
    record counts only when it verifies for its container, is well-formed and claims
    nothing an earlier container holds; a record that fails any of these is one
    Rejection, and never affects another container. A verified record granting what
    the node config no longer allows the pod's namespace (the config changed under
    running pods) is still taken: the container uses those GPUs, CPUs and RT time
    until it ends, so handing them to another would double them. It is reported
    (`out_of_policy`) so that the operator drains the pod.
    """
    ordered = sorted(live, key=attrgetter("created_at", "id"))
    held = {*node.rt_budget.owners(), *node.allocator.owners()}
    for owner in held:
        node.release(owner)
    node.cpu_pool.clear()  # the plugin has every live container join again
    result = Restored(released=tuple(sorted(held - {c.id for c in ordered})))
    limits = node.record_limits()
    parsed: Parsed = {}
    cpusets = ReportedCpusets((c.cpus for c in ordered), node.allocator.topology.online)
    for container in ordered:
        text = container.record
        if text is None:
            continue
        try:
            result.plans[container.id], breach = _take(
                node, container, text, limits, parsed, cpusets, result.cpus_given_back
            )
        except RecordError as exc:
            result.rejected.append(Rejection(container.id, exc.problem, str(exc)))
            continue
        if breach:
            result.out_of_policy.append(Rejection(container.id, "policy", breach))
    node.allocator.prune_missing()  # vanished GPUs no live record holds: gone
    result.rt_given_back = node.give_back_rt()
    return result


def _take(
    node: NodeState,
    container: LiveContainer,
    text: str,
    limits: RecordLimits,
    parsed: Parsed,
    cpusets: ReportedCpusets,
    given_back: dict[str, frozenset[int]],
) -> tuple[ContainerPlan, str]:
    """Re-take what one record holds, and what of it the node config no longer allows
    ("" when all is allowed); RecordError (nothing taken) when it must not be taken.
    Every record's MAC is checked; `parsed` spares parsing a verified text twice;
    `cpusets`: every live container's, which tell its exclusive CPUs still held;
    `given_back`: where the exclusive CPUs above its request now are noted."""
    signed = verified_text(text, container.id, node.record_key)
    known = parsed.get(signed)
    if known is None:
        plan = parse_record(signed, limits)[1]
        known = parsed[signed] = (plan, granted_permissions(plan))
    plan, permissions = known
    breach = _breach(node.config, permissions, container.namespace) if permissions else ""
    if plan.placement_record:
        try:
            node.allocator.restore(
                container.id, _still_held(plan.placement_record, container.cpus, cpusets)
            )
        except PlacementError as exc:  # unchanged: nothing to undo
            raise RecordConflict(f"{exc} (created earlier); this claim is ignored") from None
        # The request now rules, not the one the record was made for (a resize while
        # nri-sla was away): CPUs above it go back before any later record is taken.
        given = node._within_request(container.id, container.request_millis, container.namespace)
        if given:
            given_back[container.id] = given
    if plan.rt_runtime:
        # The kernel already gives the container this budget: counted even if the
        # node's share is exceeded (a tightened rt-budget), so that no new grant adds
        # to it; its ancestors keep their raise while it lives.
        node.rt_budget.hold(
            container.id,
            budgets.RtGrant(
                plan.rt_runtime, plan.rt_period_in_force, _rt_dir(node, container.cgroups_path)
            ),
        )
    return plan, breach


def _breach(config: NodeConfig, permissions: tuple[str, ...], ns: str | None) -> str:
    """What of `permissions` a restored record needs that namespace `ns` (None: no
    known pod) may no longer use; "" when it may use them all."""
    who = "a container of no known pod" if ns is None else f"namespace {ns!r}"
    return "; ".join(
        f"grants {permission}, which {who} may no longer use (node config "
        f"permissions.{permission}); held until the container ends"
        for permission in permissions
        if ns is None or not config.allows(permission, ns)
    )


def _rt_dir(node: NodeState, cgroups_path: str) -> Path | None:
    """The cpu cgroup dir of a container with this cgroups path, where an RT budget
    lives (cgroup v1); None: no such dir here."""
    if not cgroups_path or node.facts is None or node.cgroup_version != 1:
        return None
    try:
        return _cpu_dir(node.facts.container_paths(cgroups_path))
    except SlaFailure:
        return None  # no cpu hierarchy: nothing raised for it


def _still_held(
    record: Mapping[str, Any], reported: str, cpusets: ReportedCpusets
) -> Mapping[str, Any]:
    """A placement record as the container holds it now (the record is not rewritten
    when a resize down gives exclusive CPUs back): of the record's exclusive CPUs, those
    its reported cpuset holds. A cpuset of its exclusive CPUs alone holds none given
    back. One with CPUs beyond them (the shared pool too: soft mode clamped its exclusive
    CPUs, or a resize down and up again) holds the given-back ones as well, as the shared
    pool has them: of those, a CPU another live container's cpuset holds is shared, not
    its own. Never more than the record grants; `cpusets`: every live container's."""
    if not reported or "exclusive" not in record:
        return record
    try:
        now = parse_cpulist(reported)
        granted = parse_cpulist(str(record["exclusive"]))
    except CpuListError:
        return record  # the record's own check refuses it
    held = granted & now
    if not now <= granted:
        held -= cpusets.elsewhere(reported)
    kept = {k: v for k, v in record.items() if k not in ("exclusive", "cpus")}
    if held:
        kept["exclusive"] = kept["cpus"] = format_cpulist(held)
    elif record.get("aligned"):
        kept["cpus"] = format_cpulist(now)
    return kept
