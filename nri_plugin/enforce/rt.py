"""Make room for a container's real-time budget in the cgroup v1 cpu hierarchy.

Kernel rule (CONFIG_RT_GROUP_SCHED, checked on every cpu.rt_runtime_us/rt_period_us write):
for every group, the sum of its children's shares runtime/period must not exceed its own
share, no group may exceed the global sched_rt_runtime_us/sched_rt_period_us, and runtime
may not exceed period. Shares are compared in the kernel's fixed point (ratio << 20), so we
compute in the same units and never disagree with it by a rounding step.

New cgroups start with rt_runtime_us = 0, and neither kubelet nor runc raises the pod's or
QoS class's budget, so runc's write of the container's cpu.rt_runtime_us fails with EINVAL
unless someone raised every ancestor first. raise_rt_ancestors is that someone: bottom-up it
computes what each ancestor needs (its other children's shares + the new child's), then
writes the raises top-down (a parent must grow before its child may).
"""

from __future__ import annotations

import errno
import math
import os
from dataclasses import dataclass
from pathlib import Path

from nri_plugin.enforce.cgpaths import CgroupPaths
from nri_plugin.enforce.errors import EnforceError, RtBudgetError
from nri_plugin.plan.errors import PlanError

TYPE_CHECKING = False  # `typing` costs the OCI hook start-up time; only checkers need it
if TYPE_CHECKING:  # fractions costs ~7 ms to import; the hook only pays when RT is asked
    from collections.abc import Callable, Mapping
    from fractions import Fraction

BW_SHIFT = 20
RUNTIME_FILE = "cpu.rt_runtime_us"
PERIOD_FILE = "cpu.rt_period_us"


@dataclass(frozen=True)
class RtChange:
    """One ancestor whose cpu.rt_runtime_us nri-sla changed."""

    path: Path
    old_us: int
    new_us: int


def to_ratio(period_us: int, runtime_us: int) -> int:
    """The kernel's share of a group: (runtime << 20) / period; unlimited (-1) is 1 << 20."""
    if runtime_us < 0:
        return 1 << BW_SHIFT
    if period_us <= 0:
        return 0
    return (runtime_us << BW_SHIFT) // period_us


def runtime_for_ratio(period_us: int, ratio: int) -> int:
    """The smallest runtime whose share, as the kernel computes it, reaches ratio."""
    runtime = -(-ratio * period_us >> BW_SHIFT)  # ceiling of ratio*period / 2^20
    runtime = max(runtime - 1, 0)
    while to_ratio(period_us, runtime) < ratio:
        runtime += 1
    return runtime


def _read_int(path: Path) -> int:
    try:
        return int(path.read_text().strip())
    except OSError as e:
        raise RtBudgetError(f"cannot read {path}: {e.strerror}") from None
    except ValueError:
        raise RtBudgetError(f"{path} does not hold an integer") from None


def _share(cgroup: Path) -> int:
    return to_ratio(_read_int(cgroup / PERIOD_FILE), _read_int(cgroup / RUNTIME_FILE))


def _children_shares(
    cgroup: Path, exclude: str = "", pending: Mapping[Path, tuple[int, int]] | None = None
) -> tuple[int, Fraction]:
    """Sum of the children's shares: kernel fixed point, and exact (runtime/period).
    `pending`: container dirs (-> runtime, period) whose budget nri-sla granted but runc
    may not have written yet (or whose dir does not exist yet): each counts with the larger
    of what it has and what it was granted."""
    from fractions import Fraction

    pending = pending or {}
    fixed, exact = 0, Fraction(0)
    seen = set()
    for entry in cgroup.iterdir():
        if entry.name != exclude and entry.is_dir() and not entry.is_symlink():
            period = _read_int(entry / PERIOD_FILE)
            runtime = _read_int(entry / RUNTIME_FILE)
            granted = pending.get(entry)
            if granted is not None and to_ratio(granted[1], granted[0]) > to_ratio(period, runtime):
                runtime, period = granted
            seen.add(entry)
            fixed += to_ratio(period, runtime)
            exact += Fraction(max(runtime, 0), period) if period > 0 else 0
    for path, (runtime, period) in pending.items():
        if path.parent == cgroup and path not in seen and path.name != exclude:
            fixed += to_ratio(period, runtime)
            exact += Fraction(runtime, period)
    return fixed, exact


def _runtime_covering(period: int, fixed: int, exact: Fraction) -> int:
    """The runtime (per `period`) a group needs for children whose shares sum to `fixed`
    (kernel fixed point) and `exact`. The kernel compares truncated fixed-point shares, so
    the minimal accepted value can be a microsecond under the exact sum (24999 for
    20000+5000); the exact ceiling is taken when larger, which is what an operator reading
    the files expects."""
    if fixed <= 0:
        return 0
    return max(runtime_for_ratio(period, fixed), math.ceil(exact * period))


def _ancestors(cpu_dir: Path, hierarchy_root: Path) -> list[Path]:
    root = hierarchy_root.resolve()
    target = cpu_dir.parent.resolve() / cpu_dir.name
    if not target.is_relative_to(root) or target == root:
        raise RtBudgetError(f"{cpu_dir} is not a cgroup below the cpu hierarchy {root}")
    chain = [root]
    for part in target.relative_to(root).parts[:-1]:
        chain.append(chain[-1] / part)
    for node in chain:
        if not (node / RUNTIME_FILE).exists():
            raise RtBudgetError(
                f"{node} has no {RUNTIME_FILE} (missing cgroup, or kernel without "
                "CONFIG_RT_GROUP_SCHED)"
            )
    return chain


def _fmt_share(ratio: int) -> str:
    return f"{ratio * 100 / (1 << BW_SHIFT):.2f}%"


def plan_rt_ancestors(
    cpu_dir: Path, runtime_us: int, period_us: int, hierarchy_root: Path
) -> list[RtChange]:
    """What raise_rt_ancestors would write, top-down, without writing anything."""
    if period_us <= 0 or runtime_us < 0 or runtime_us > period_us:
        raise RtBudgetError(
            f"rt-runtime {runtime_us}us / rt-period {period_us}us: need 0 <= runtime <= period"
        )
    from fractions import Fraction

    chain = _ancestors(cpu_dir, hierarchy_root)
    root = chain[0]
    global_share = _share(root)
    need = to_ratio(period_us, runtime_us)
    need_exact = Fraction(runtime_us, period_us)
    child = cpu_dir.name
    changes: list[RtChange] = []
    for node in reversed(chain):
        fixed, exact = _children_shares(node, child)
        required = fixed + need
        required_exact = exact + need_exact
        period = _read_int(node / PERIOD_FILE)
        runtime = _read_int(node / RUNTIME_FILE)
        have = to_ratio(period, runtime)
        if node == root:
            if required > have:
                raise RtBudgetError(
                    f"real-time budget exhausted: {runtime_us}us per {period_us}us does not "
                    f"fit in what the node allows real-time groups ({_fmt_share(have)} of "
                    "CPU time in all) now",
                    f"{cpu_dir} needs {runtime_us}us per {period_us}us, which brings the "
                    f"groups under {root} to {_fmt_share(required)} of CPU time; the node "
                    f"allows {_fmt_share(have)} (cpu.rt_runtime_us {runtime} / "
                    f"cpu.rt_period_us {period})",
                )
            break
        if required > have:
            new = _runtime_covering(period, required, required_exact)
            if new > period or required > global_share:
                raise RtBudgetError(
                    f"real-time budget exhausted: {runtime_us}us per {period_us}us does not "
                    f"fit in what the node allows real-time groups ({_fmt_share(global_share)}"
                    " of CPU time in all) now",
                    f"{node} would need {_fmt_share(required)} ({new}us per {period}us), "
                    f"more than the node allows ({_fmt_share(global_share)})",
                )
            changes.append(RtChange(node, runtime, new))
            have = to_ratio(period, new)
            runtime = new
        need = have
        need_exact = Fraction(max(runtime, 0), period)
        child = node.name
    changes.reverse()  # top-down: parents first
    return changes


def read_runtime(cgroup: Path) -> int:
    """The group's cpu.rt_runtime_us; RtBudgetError when it cannot be read."""
    return _read_int(cgroup / RUNTIME_FILE)


def needed_runtime(cgroup: Path, pending: Mapping[Path, tuple[int, int]]) -> int:
    """The least cpu.rt_runtime_us the kernel lets `cgroup` hold (in its own period): what
    its children take, the `pending` containers below it counted as granted."""
    fixed, exact = _children_shares(cgroup, pending=pending)
    return _runtime_covering(_read_int(cgroup / PERIOD_FILE), fixed, exact)


def write_runtime(cgroup: Path, value: int) -> None:
    from cgroupspy.controllers import CpuController  # lazy: cheap, but only RT pays

    class _Ref:
        full_path = os.fsencode(cgroup)

    CpuController(_Ref()).rt_runtime_us = value


def raise_rt_ancestors(
    cpu_dir: Path, runtime_us: int, period_us: int, hierarchy_root: Path
) -> list[RtChange]:
    """Raise each ancestor's cpu.rt_runtime_us as far as needed (never lower), so that a
    later write of runtime_us/period_us into cpu_dir succeeds. Returns what changed; on a
    failed write, undoes the raises already made and raises RtBudgetError."""
    changes = plan_rt_ancestors(cpu_dir, runtime_us, period_us, hierarchy_root)
    done: list[RtChange] = []
    for change in changes:
        try:
            write_runtime(change.path, change.new_us)
        except OSError as e:
            release_rt_ancestors(done)
            hint = " (another group took the budget meanwhile?)" if e.errno == errno.EINVAL else ""
            raise RtBudgetError(
                f"cannot raise the real-time budget of {change.path}: {e.strerror}{hint}",
                f"{change.path / RUNTIME_FILE} from {change.old_us} to {change.new_us}: "
                f"{e.strerror}",
            ) from None
        done.append(change)
    return done


def release_rt_ancestors(changes: list[RtChange]) -> list[RtChange]:
    """Best effort undo of raise_rt_ancestors, bottom-up (children shrink before parents).
    A value still needed by other groups is left as it is. Returns what was restored."""
    restored = []
    for change in reversed(changes):
        try:
            write_runtime(change.path, change.old_us)
        except OSError:
            continue
        restored.append(change)
    return restored


def make_rt_room(paths: CgroupPaths, runtime_us: int, period_us: int) -> list[RtChange]:
    """raise_rt_ancestors for a container's cgroup (v1): what both front-ends call before
    the container's own cpu.rt_runtime_us is written."""
    return raise_rt_ancestors(
        Path(paths.dir("cpu")), runtime_us, period_us, Path(paths.roots["cpu"])
    )


def rt_room(
    paths: CgroupPaths,
    rt: tuple[int, int],
    enforcement: str,
    key: str,
    note: Callable[[str], None] | None = None,
) -> tuple[list[RtChange], str | None]:
    """The one rule for making room for a container's real-time budget, which both
    front-ends follow (the plugin's NodeState.make_rt_room, the hook's
    actions.apply_writes): on cgroup v1, before the container's own cpu.rt_runtime_us
    (`rt` = (runtime, period) in us) is written, every ancestor's budget is raised as far
    as it needs (make_rt_room; the kernel refuses a child budget its parents lack).

    Returns (the raises made, to undo; None). When there is no room: hard mode refuses
    the container (PlanError, reason "budget", naming `key` and cpu.rt-runtime); soft
    mode returns ([], the warning) and the container runs without RT: the caller drops
    its RT settings (cpu.rt_runtime_us and cpu.rt_period_us) and keeps the rest.
    `note` gets what the other groups take (RtBudgetError.operator_note): the
    operator's log, never the pod's message. cgroup v2 (no RT groups) and a budget of 0
    change nothing: ([], None)."""
    if paths.version != 1 or not rt[0]:
        return [], None
    try:
        return make_rt_room(paths, rt[0], rt[1]), None
    except EnforceError as exc:
        if note is not None and isinstance(exc, RtBudgetError) and exc.operator_note:
            note(exc.operator_note)
        if enforcement == "hard":
            raise PlanError(key, "cpu.rt-runtime", str(exc), "budget") from exc
        return [], f"{key}: cpu.rt-runtime: {exc}"
