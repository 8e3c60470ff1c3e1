"""What a Synchronize's restore takes and gives back (core.restore): the live
containers the runtime reports, and what restore rebuilt and rejected.

A module of their own: the OCI hook's one-shot NodeState never restores, and creating
these three dataclasses cost its cold run ~2.5% of its instructions (docs/hook.md
"Start-up cost").
"""

from __future__ import annotations

from dataclasses import dataclass, field

from nri_plugin.enforce.rt import RtChange
from nri_plugin.plan.model import ContainerPlan


@dataclass(slots=True)
class LiveContainer:
    """A container the runtime reports as created, running or paused (Synchronize).
    Never changed once made; not frozen, as one is made for every live container of
    every Synchronize and a frozen dataclass's __init__ costs four times a plain one's."""

    id: str
    namespace: str | None  # its pod's namespace; None: the runtime sent no pod for it
    record: str | None  # its `applied` annotation: nri-sla's record (None: none)
    created_at: int = 0  # unix ns; of two conflicting claims the earlier container wins
    cpus: str = ""  # its cpuset as the runtime reports it ("": not reported)
    pod: str = ""  # its pod's id: what it holds counts against that pod's caps again
    cgroups_path: str = ""  # its OCI linux.cgroupsPath: where its RT budget lives
    # Its CPU request now, in millicores (None: none set): a resize while nri-sla was away
    # holds from the restore on (core.restore gives back exclusive CPUs above it).
    request_millis: int | None = None
    started: bool = True  # False: created, not started yet (StartContainer owes its writes)


@dataclass(frozen=True)
class Rejection:
    """A record restore did not take (or, in `Restored.out_of_policy`, took although the
    node config no longer allows it): `problem` is the metric label (unauthenticated,
    invalid, conflict; policy), `message` says why."""

    container: str
    problem: str
    message: str


@dataclass
class Restored:
    """What restore rebuilt: the plans read back (container id -> plan), the records it
    ignored, the records it took although the node config no longer allows what they
    grant, and the owners it released because their containers are gone."""

    plans: dict[str, ContainerPlan] = field(default_factory=dict)
    rejected: list[Rejection] = field(default_factory=list)
    out_of_policy: list[Rejection] = field(default_factory=list)
    released: tuple[str, ...] = ()
    rt_given_back: list[RtChange] = field(default_factory=list)
    # Container id -> exclusive CPUs its record held above its request now (a resize
    # while nri-sla was away), given back.
    cpus_given_back: dict[str, frozenset[int]] = field(default_factory=dict)
