"""Where the container is: its own cgroup, found one way by the cached and the cold path.

Where its process is (/proc/<pid>/cgroup) whenever the state has a pid the hook's /proc
can see, because that is where the runtime put it: runc takes a relative cgroupsPath from
its own cgroup, and a spec's path is only what was asked for. Held to that
linux.cgroupsPath when there is one: a reused pid names another container's cgroup
(enforce.cgpaths.container_cgroup_of refuses it). Else linux.cgroupsPath. Either way the
container's own cgroup, never one that holds other processes' cgroups.
"""

from nri_plugin.enforce.cgpaths import container_cgroup_of
from nri_plugin.enforce.errors import EnforceError
from nri_plugin.errors import InvalidInput
from nri_plugin.hookspec import IN_CONTAINER_STAGES

TYPE_CHECKING = False  # typing costs start-up time; only checkers need it
if TYPE_CHECKING:
    from nri_plugin.enforce.cgpaths import CgroupFacts, CgroupPaths
    from nri_plugin.hook.values import Run


def process_pid(run: "Run") -> int | None:
    """The container's pid as the hook's /proc shows it: the state's, except at stages run
    inside the container's namespaces (hookspec.IN_CONTAINER_STAGES)."""
    return None if run.opts.stage in IN_CONTAINER_STAGES else run.oci.pid


def locatable(run: "Run") -> bool:
    """Whether container_cgroup can find the cgroup (and so a decision can be cached)."""
    return process_pid(run) is not None or bool(run.spec.cgroups_path)


def container_cgroup(run: "Run", facts: "CgroupFacts") -> "CgroupPaths":
    """The container's cgroup dirs under `facts`' hierarchies; InvalidInput when the
    runtime's input does not lead to an existing cgroup of the container's own."""
    if not locatable(run):
        raise InvalidInput(
            "config.json has no linux.cgroupsPath and the state has no "
            f"pid usable at the {run.opts.stage} stage: cannot find the "
            "container's cgroup"
        )
    pid, wanted = process_pid(run), run.spec.cgroups_path
    try:
        if pid is None:
            paths = facts.container_paths(wanted or "")
        else:
            found = facts.process_paths(pid, run.opts.proc_root)
            paths = container_cgroup_of(found, wanted, pid) if wanted else found
    except EnforceError as exc:
        raise InvalidInput(f"container cgroup: {exc}") from None
    missing = paths.missing()
    if missing:
        raise InvalidInput(
            f"container cgroup {missing[0]} does not exist (hook stage too "
            "early? use createRuntime, prestart or poststart)"
        )
    others = paths.others_below()
    if others:
        # A pod, QoS or kubepods cgroup (or the root) named as the container's: the SLA's
        # limits would bind every container below it. The runtime's input is wrong.
        raise InvalidInput(
            f"container cgroup {paths.cgroups_path}: {others} below it holds "
            "other processes: not a container's own cgroup (a pod or slice "
            "cgroup?); refusing to write limits over them"
        )
    return paths
