"""decide: one ContainerRequest -> SLA -> plan, as one frozen Decision. Never raises.

Deciding takes nothing from the node's books: the plan names what the container would
hold, and the plugin takes it when it admits the container (NodeState.admit, a
core.reservation); the OCI hook's one-shot node keeps no books to take from.

The plugin and the OCI hook both call it; every failure becomes a Decision carrying an
SlaFailure, whose kind (invalid / refused / internal) decides the hook's exit status,
the plugin's error status and, with its reason, the decision metric. An exception that
is no SlaFailure (a bug) becomes an `internal` one, its traceback logged once.
"""

from __future__ import annotations

from collections.abc import Mapping

from nri_plugin.config.values import NodeConfig
from nri_plugin.core.inputs import RUNNING, DecisionInputs, NodeInputs, digest, inputs_for
from nri_plugin.core.request import ContainerRequest
from nri_plugin.errors import InternalFailure, SlaFailure
from nri_plugin.granted import GrantedResources
from nri_plugin.ops.corelog import CoreLogger
from nri_plugin.plan.context import PlanContext
from nri_plugin.plan.grants import refit_plan
from nri_plugin.plan.model import ContainerPlan
from nri_plugin.plan.planner import plan_container
from nri_plugin.sla.errors import SlaError
from nri_plugin.sla.model import Sla
from nri_plugin.sla.parse import sla_for_container
from nri_plugin.value import Frozen, replace

OUTCOMES = ("enforced", "warned", "refused", "skipped")
REUSABLE_LIMIT = 512  # remembered reusable decisions per node

TYPE_CHECKING = False  # `typing` costs the OCI hook start-up time; only checkers need it
if TYPE_CHECKING:
    from nri_plugin.core.node import OneShotNode
    from nri_plugin.core.nodestate import NodeState

    DecidingNode = NodeState | OneShotNode  # the plugin's node or the hook's

log = CoreLogger("nri_sla.core")  # no `logging` on the hook's cold run (ops.corelog)


class Decision(Frozen):
    """The outcome for one container: enforced, warned, refused or skipped (no SLA).
    Frozen: a reusable decision is handed to every replica; a front-end that changes the
    plan (RT room) makes its own copy (replace)."""

    outcome: str
    plan: ContainerPlan | None = None
    error: SlaFailure | None = None
    sla: Sla | None = None  # what the annotations asked for, once parsed
    # What it was decided from, when it holds for every container with these inputs.
    inputs: DecisionInputs | None = None

    @property
    def reason(self) -> str:
        """One word for the metric: "ok", or why it was refused or warned."""
        if self.error is not None:
            return self.error.reason
        if self.plan is not None and self.plan.reasons:
            return self.plan.reasons[0]
        return "ok"

    @property
    def reusable(self) -> bool:
        """Remembered by its inputs: the same for every replica (see _reusable)."""
        return self.inputs is not None

    @property
    def warnings(self) -> tuple[str, ...]:
        return self.plan.warnings if self.plan is not None else ()

    @property
    def error_text(self) -> str | None:
        return str(self.error) if self.error is not None else None


def decide(node: DecidingNode, request: ContainerRequest, parsed: Sla | None = None) -> Decision:
    """Run annotations -> SLA -> plan for one container. Never raises.

    `parsed`: the request's SLA when the front-end has parsed it already (parse_sla under
    this node's config: the OCI hook needs its enforcement mode before it plans), so the
    annotations are not parsed twice; None: parsed here.
    The OCI hook verifies GPU SLAs as the plugin does: neither adds a GPU. A failure that
    is no SlaFailure is a bug: the container gets an `internal` failure (hard mode
    refuses, the hook's soft mode warns) and the operator the traceback, once.
    """
    try:
        return _remembered(node, request, parsed)
    except Exception as exc:
        log.error("deciding container %s failed", request.owner or request.name, exc_info=True)
        return Decision(
            "refused",
            error=InternalFailure(
                f"internal error while deciding the SLA: {exc.__class__.__name__}: {exc}"
            ),
        )


def _remembered(node: DecidingNode, request: ContainerRequest, parsed: Sla | None) -> Decision:
    """A replica's decision from the reusable ones, else a new one (remembered when
    reusable)."""
    inputs = inputs_for(
        request.annotations,
        node.prefix,
        request.name,
        request.namespace,
        request.granted.key(),
        node_inputs(node),
        request.nri_version,
    )
    known = node.reusable.get(inputs) if inputs is not None else None
    if known is not None:  # a replica: the same frozen decision, nothing reserved for it
        return known
    decision = _decide(node, request, inputs, parsed)
    if decision.inputs is not None:
        if len(node.reusable) >= REUSABLE_LIMIT:
            node.reusable.clear()  # bounded: many distinct SLAs only cost a re-plan
        node.reusable[decision.inputs] = decision  # the inputs, when reusable
    return decision


def node_inputs(node: DecidingNode) -> NodeInputs:
    """The node's part of its decisions' inputs, made once per config object (a reload
    assigns a new one): the config's every value, the cgroup version and capabilities,
    and the running process's code."""
    made_for, inputs = node.inputs
    if made_for is not node.config or inputs is None:
        inputs = NodeInputs(
            digest(repr(node.config)), (str(node.cgroup_version), repr(node.capabilities)), RUNNING
        )
        node.inputs = (node.config, inputs)
    return inputs


def _reusable(sla: Sla, plan: ContainerPlan) -> bool:
    """A plan that depends only on its DecisionInputs: no allocator, RT budget, block
    device or pod input. Such a decision is the same for every replica, so decide()
    remembers it."""
    cpu_ok = sla.cpu is None or (not sla.cpu.exclusive and sla.cpu.rt_runtime_us is None)
    return cpu_ok and sla.gpu is None and sla.numa is None and (sla.io is None or not sla.io.max)


def _decide(
    node: DecidingNode,
    request: ContainerRequest,
    inputs: DecisionInputs | None,
    parsed: Sla | None,
) -> Decision:
    sla = parsed
    if sla is None:
        try:
            sla = parse_sla(node.config, request.annotations, request.name)
        except SlaError as exc:
            return Decision("refused", error=exc)
    if sla is None:
        return Decision("skipped")
    owner, pod = request.owner, request.pod
    try:
        ctx = PlanContext(
            cgroup_version=node.cgroup_version,
            namespace=request.namespace,
            config=node.config,
            owner=owner,
            allocator=node.allocator_for(sla),
            rt_budget=node.rt_budget,
            nri_version=request.nri_version,
            resolve_device=node.resolve_device,
            io_weight_supported=node.capabilities.io_weight,
            granted=request.granted,
            pod_usage=node.pod_usage(pod, owner),
            kubelet_gpu_ids=request.kubelet_gpu_ids,
            cpu_floors=node.cpu_floors(owner),
        )
        plan = plan_container(sla, ctx)
    except SlaFailure as exc:  # PlanError, or a placement/inventory failure
        return Decision("refused", error=exc, sla=sla)
    return Decision(
        "warned" if plan.warnings else "enforced",
        plan=plan,
        sla=sla,
        inputs=inputs if _reusable(sla, plan) else None,
    )


def recheck(
    node: DecidingNode, plan: ContainerPlan, granted: GrantedResources, *, namespace: str
) -> ContainerPlan:
    """UpdateContainer: the runtime's limits changed (a kubelet resize), so the plan is
    measured against the new ones and returned clamped to them, its warnings added, in
    either mode. Never refused: a runtime whose plugin fails UpdateContainer keeps the
    container's old resources, so a refused resize down would leave the container above
    the limits Kubernetes now accounts for it (docs/reliability.md, "Resizes"); hard mode
    is a promise at creation, and a resize below the SLA is the pod owner's (or the
    kubelet's) own doing. `plan` is the one decided at creation, so a limit raised again
    gives the SLA's own values back."""
    ctx = PlanContext(
        cgroup_version=plan.cgroup_version, namespace=namespace, config=node.config, granted=granted
    )
    fitted, shortfalls = refit_plan(plan, ctx)
    if not shortfalls:
        return plan
    key = plan.key or node.prefix
    return replace(
        fitted,
        warnings=(*plan.warnings, *(s.render(key) for s in shortfalls)),
        reasons=(*plan.reasons, *(s.reason for s in shortfalls)),
    )


def parse_sla(
    config: NodeConfig, annotations: Mapping[str, str], container_name: str
) -> Sla | None:
    """The container's SLA under the node's prefix and default enforcement; None: no SLA.
    Raises SlaError naming the annotation key, the field and the allowed values."""
    return sla_for_container(
        annotations,
        container_name,
        default_enforcement=config.enforcement,
        prefix=config.annotation_prefix,
    )
