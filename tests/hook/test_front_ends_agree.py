"""The plugin and the OCI hook, given the same SLA on the same node, leave the same values
in the container's cgroup (fake v1 and v2 trees; tests/vm/guest repeats it on a real v2).

Plugin path, as containerd runs it: CreateContainer (the core's decision, RT room on v1,
the adjustment), runc applying the adjustment's linux.resources (as `runc_apply` below
does on a fake tree), StartContainer (the direct writes). Hook path: `nri-sla hook`'s own
flow over a bundle whose config.json carries the same annotations and cgroupsPath.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from nri_plugin.config.loader import load_config
from nri_plugin.core.decision import decide
from nri_plugin.core.hosttopology import node_allocator
from nri_plugin.core.nodestate import NodeState
from nri_plugin.core.request import ContainerRequest
from nri_plugin.enforce.capabilities import detect_capabilities
from nri_plugin.enforce.cgpaths import CgroupFacts
from nri_plugin.errors import EXIT_OK, EXIT_STATUS, SlaFailure
from nri_plugin.hook.values import PREFIX, WARN
from nri_plugin.plan.rt_budget import RtBudget
from nri_plugin.plugin.adjustment import build_adjustment
from tests.support.cgroups import V2_FILES, make_v1_tree, make_v2_tree

CTR = "/kubepods/pod-a/ctr-1"
NAME = "io.kubernetes.cri.container-name"
CONFIG = "permissions:\n  realtime: ['*']\n"


def fake_tree(root: Path, version: int, rt_taken: int = 0) -> dict[str, Path]:
    """The container's dirs (and its ancestors, with the kernel's RT budget on v1).
    `rt_taken`: v1, a real-time group beside kubepods already holds this much runtime
    (us per 1 s) of the node's RT budget."""
    if version == 2:  # a bfq disk: io.bfq.weight is there
        return make_v2_tree(root).add_cgroup(CTR, {**V2_FILES, "io.bfq.weight": "default 100"})
    tree = make_v1_tree(root)
    if rt_taken:
        other = tree.add_cgroup("/rt-group")["cpu"]
        other.joinpath("cpu.rt_runtime_us").write_text(f"{rt_taken}\n")
    return tree.add_cgroup(CTR)


def snapshot(dirs: dict[str, Path], root: Path) -> dict[str, str]:
    """Every file of the container's dirs (and the RT budget of its ancestors)."""
    out = {
        f"{c}/{f.name}": f.read_text().strip() for c, d in dirs.items() for f in sorted(d.iterdir())
    }
    if "cpu" in dirs:
        for ancestor in (root / "cpu" / "kubepods", root / "cpu" / "kubepods" / "pod-a"):
            out[f"{ancestor.relative_to(root)}/cpu.rt_runtime_us"] = (
                ancestor.joinpath("cpu.rt_runtime_us").read_text().strip()
            )
    return out


def runc_apply(resources, dirs: dict[str, Path], version: int) -> None:
    """What runc writes for the linux.resources fields an nri-sla adjustment sets."""

    def put(controller: str, name: str, value: object) -> None:
        (dirs["unified" if version == 2 else controller] / name).write_text(f"{value}\n")

    cpu = resources.cpu
    if version == 1:
        if cpu.HasField("period"):
            put("cpu", "cpu.cfs_period_us", cpu.period.value)
        if cpu.HasField("quota"):
            put("cpu", "cpu.cfs_quota_us", cpu.quota.value)
        if cpu.HasField("realtime_period"):
            put("cpu", "cpu.rt_period_us", cpu.realtime_period.value)
        if cpu.HasField("realtime_runtime"):
            put("cpu", "cpu.rt_runtime_us", cpu.realtime_runtime.value)
        if resources.memory.HasField("limit"):
            put("memory", "memory.limit_in_bytes", resources.memory.limit.value)
    else:
        if cpu.HasField("quota") or cpu.HasField("period"):
            quota = cpu.quota.value if cpu.HasField("quota") else "max"
            put("cpu", "cpu.max", f"{quota} {cpu.period.value or 100000}")
        if resources.memory.HasField("limit"):
            put("memory", "memory.max", resources.memory.limit.value)
        for name, value in resources.unified.items():
            put("", name, value)
    if cpu.cpus:
        put("cpuset", "cpuset.cpus", cpu.cpus)
    if cpu.mems:
        put("cpuset", "cpuset.mems", cpu.mems)


def through_plugin(tmp_path: Path, version: int, annotations: dict[str, str], rt_taken: int = 0):
    root = tmp_path / "plugin"
    dirs = fake_tree(root, version, rt_taken)
    config = load_config(str(tmp_path / "config.yaml"))
    facts = CgroupFacts(version, "cgroupfs", root)
    node = NodeState(
        config,
        version,
        facts=facts,
        allocator=node_allocator(config),
        rt_budget=RtBudget(config.rt_budget * 0.95),
        capabilities=detect_capabilities(version),
    )
    decision = decide(
        node, ContainerRequest(annotations, "app", namespace="default", owner="ctr-1")
    )
    if decision.error is not None:
        return decision.error.exit_status, [str(decision.error)], None
    try:  # refused (hard mode, no RT room): CreateContainer answers the error
        plan, _ = node.make_rt_room(decision.plan, facts.container_paths(CTR))
    except SlaFailure as exc:
        return exc.exit_status, [str(exc)], snapshot(dirs, root)
    adjustment = build_adjustment(plan)
    runc_apply(adjustment.linux.resources, dirs, version)
    problems = node.write_plan(plan, CTR, scope="direct")
    return EXIT_OK, [*plan.warnings, *problems], snapshot(dirs, root)


def through_hook(tmp_path: Path, version: int, annotations: dict[str, str], h, rt_taken: int = 0):
    root = tmp_path / "hook"
    dirs = fake_tree(root, version, rt_taken)
    bundle = h.write_bundle(tmp_path / "bundle", {NAME: "app", **annotations}, CTR)
    out = h.run_inproc(
        h.state_json(bundle),
        cgroup_root=str(root),
        config=str(tmp_path / "config.yaml"),
        cache_dir="off",
    )
    lines = [line.removeprefix(WARN).removeprefix(PREFIX) for line in out.lines]
    if out.exit_code != EXIT_OK:
        return out.exit_code, lines, snapshot(dirs, root) if rt_taken else None
    return EXIT_OK, lines, snapshot(dirs, root)


SLAS = {
    "cpu and memory.max": "cpu: {limit: 0.5}\nmemory: {max: 64Mi}",
    "period, memory.high below max": "cpu: {limit: 2, period: 50ms}\n"
    "memory: {high: 48Mi, max: 64Mi}",
    "io weight": "io: {weight: 300}",
    "numa node 0": "numa: {nodes: '0'}\ncpu: {limit: 1}",
    "container key over pod key": None,  # see ANNOTATIONS
    "invalid: high above max": "memory: {high: 2Gi, max: 1Gi}",
    "invalid: unknown field": "cpu: {limits: 2}",
}
ANNOTATIONS = {
    "container key over pod key": {
        "sla.nri.io/pod": "cpu: {limit: 1}\nmemory: {max: 1Gi}",
        "sla.nri.io/container.app": "cpu: {limit: 0.25}",
    },
}
V1_ONLY = {
    "rt budget with ancestors": "cpu: {limit: 1, rt-runtime: 5ms, rt-period: 1s}",
    "soft memory.high (v1 soft limit)": "enforcement: soft\nmemory: {high: 32Mi}",
}
V2_ONLY = {"rt refused on v2": "cpu: {limit: 1, rt-runtime: 5ms}"}
# Valid SLAs a node refuses in hard mode, and what the message names.
REFUSED = {
    (2, "rt refused on v2"): "cgroup v2",
    (1, "period, memory.high below max"): "memory.high",
}
if not detect_capabilities(1).io_weight:  # v1 without BFQ on any disk (this host's /sys)
    REFUSED[1, "io weight"] = "io.weight"
CASES = (
    [(v, name) for v in (1, 2) for name in SLAS]
    + [(1, name) for name in V1_ONLY]
    + [(2, name) for name in V2_ONLY]
)


@pytest.mark.parametrize(("version", "case"), CASES)
def test_plugin_and_hook_write_the_same_values(tmp_path, h, version, case):
    (tmp_path / "config.yaml").write_text(CONFIG)
    text = {**SLAS, **V1_ONLY, **V2_ONLY}[case]
    annotations = ANNOTATIONS.get(case) or {"sla.nri.io/pod": text}
    plugin = through_plugin(tmp_path, version, annotations)
    hook = through_hook(tmp_path, version, annotations, h)
    assert hook == plugin
    if case.startswith("invalid"):
        assert plugin[0] == EXIT_STATUS["invalid"]
    elif (version, case) in REFUSED:
        assert plugin[0] == EXIT_STATUS["refused"] and REFUSED[version, case] in plugin[1][0]
    else:
        assert plugin[0] == EXIT_OK
        pristine = tmp_path / "pristine"
        assert plugin[2] != snapshot(fake_tree(pristine, version), pristine), (
            "the SLA changed nothing: the comparison would prove nothing"
        )


def test_io_max_on_a_real_disk_agrees(tmp_path, h):
    _dev, majmin = h.first_disk()
    sla = f"io:\n  max:\n    - {{device: '{majmin}', read-bps: 1Mi, write-iops: 300}}\n"
    for version in (1, 2):
        work = tmp_path / f"v{version}"
        work.mkdir()
        (work / "config.yaml").write_text(CONFIG)
        plugin = through_plugin(work, version, {"sla.nri.io/pod": sla})
        hook = through_hook(work, version, {"sla.nri.io/pod": sla}, h)
        assert hook == plugin and plugin[0] == EXIT_OK
        files = plugin[2]
        if version == 1:
            assert files["blkio/blkio.throttle.read_bps_device"] == f"{majmin} {1 << 20}"
        else:
            assert files["unified/io.max"].startswith(majmin)


@pytest.mark.parametrize("enforcement", ["hard", "soft"])
def test_no_rt_room_is_refused_or_dropped_alike(tmp_path, h, enforcement):
    """cgroup v1, a real-time group beside kubepods holding 90% of the node's 95%: the
    planner grants the container's 10% (the node-wide budget it keeps has room), but
    the ancestors cannot be raised to it. Both front-ends follow enforce.rt.rt_room:
    hard refuses (exit 1, the same message, no ancestor left raised), soft starts the
    container without RT, its other settings written, with the same warning."""
    (tmp_path / "config.yaml").write_text(CONFIG)
    sla = f"enforcement: {enforcement}\ncpu: {{limit: 1, rt-runtime: 100ms, rt-period: 1s}}"
    annotations = {"sla.nri.io/pod": sla}
    plugin = through_plugin(tmp_path, 1, annotations, rt_taken=900_000)
    hook = through_hook(tmp_path, 1, annotations, h, rt_taken=900_000)
    assert hook == plugin
    code, lines, files = plugin
    [line] = lines
    assert line.startswith("sla.nri.io/pod: cpu.rt-runtime: real-time budget exhausted"), line
    for ancestor in ("cpu/kubepods", "cpu/kubepods/pod-a"):
        assert files[f"{ancestor}/cpu.rt_runtime_us"] == "0"
    if enforcement == "hard":
        assert code == EXIT_STATUS["refused"]
    else:
        assert code == EXIT_OK
        assert files["cpu/cpu.rt_runtime_us"] == "0" and files["cpu/cpu.cfs_quota_us"] == "100000"


# -- the decision event: the same decision logs the same fields from both front-ends --------
POD_KEYS = {
    "io.kubernetes.cri.sandbox-name": "web-0",
    "io.kubernetes.cri.sandbox-namespace": "prod",
    "io.kubernetes.cri.container-type": "container",
}
# Every field of the event but the two that say which front-end and when.
EVENT_FIELDS = (
    "level",
    "logger",
    "msg",
    "pod",
    "container",
    "outcome",
    "applied",
    "warnings",
    "error",
)


def plugin_event(tmp_path: Path, version: int, annotations: dict[str, str]) -> dict:
    """The plugin's line for one CreateContainer (SlaPlugin's handler, as the stub calls
    it), in JSON as `nri-sla run --log-format json` writes it."""
    import contextlib
    import io
    import json

    from nri_plugin.nri.errors import RpcError
    from nri_plugin.nri.pb import nri_pb2 as pb
    from nri_plugin.ops.logsetup import setup_logging
    from nri_plugin.plugin import SlaPlugin

    root = tmp_path / "plugin"
    fake_tree(root, version)
    config = load_config(str(tmp_path / "config.yaml"))
    node = NodeState(
        config,
        version,
        facts=CgroupFacts(version, "cgroupfs", root),
        allocator=node_allocator(config),
        rt_budget=RtBudget(config.rt_budget * 0.95),
        capabilities=detect_capabilities(version),
    )
    pod = pb.PodSandbox(id="pod-a", name="web-0", namespace="prod", annotations=annotations)
    container = pb.Container(
        id="ctr-1",
        pod_sandbox_id="pod-a",
        name="app",
        state=pb.CONTAINER_CREATED,
        annotations=annotations,
    )
    container.linux.cgroups_path = CTR
    out = io.StringIO()
    setup_logging("json", "info", stream=out)
    with contextlib.suppress(RpcError):  # refused: the line says so
        SlaPlugin(node).create_container(pod, container)
    [line] = out.getvalue().splitlines()
    return json.loads(line)


def hook_event(tmp_path: Path, version: int, annotations: dict[str, str], h) -> dict:
    """The hook's line for the same container (NRI_SLA_HOOK_LOG), in JSON."""
    import io
    import json

    from nri_plugin.hook.run import emit

    root = tmp_path / "hook"
    fake_tree(root, version)
    bundle = h.write_bundle(tmp_path / "bundle", {NAME: "app", **POD_KEYS, **annotations}, CTR)
    out = h.run_inproc(
        h.state_json(bundle),
        cgroup_root=str(root),
        config=str(tmp_path / "config.yaml"),
        cache_dir="off",
    )
    log = tmp_path / "hook.log"
    emit(out, io.StringIO(), str(log))
    [line] = log.read_text().splitlines()
    return json.loads(line)


EVENT_CASES = [
    (2, "cpu and memory.max"),
    (1, "cpu and memory.max"),
    (2, "period, memory.high below max"),
    (1, "period, memory.high below max"),
    (1, "rt budget with ancestors"),
    (1, "soft memory.high (v1 soft limit)"),
    (2, "invalid: unknown field"),
    (2, "rt refused on v2"),
]


@pytest.mark.parametrize(("version", "case"), EVENT_CASES)
def test_the_same_decision_logs_the_same_fields(tmp_path, h, version, case):
    (tmp_path / "config.yaml").write_text(CONFIG + "log:\n  format: json\n")
    annotations = {"sla.nri.io/pod": {**SLAS, **V1_ONLY, **V2_ONLY}[case]}
    plugin = plugin_event(tmp_path, version, annotations)
    hook = hook_event(tmp_path, version, annotations, h)
    assert (plugin["path"], hook["path"]) == ("nri", "hook")
    assert set(plugin) - {"ts"} - set(EVENT_FIELDS) == {"path"}
    assert set(plugin) == set(hook)
    assert {k: hook.get(k) for k in EVENT_FIELDS} == {k: plugin.get(k) for k in EVENT_FIELDS}
    if plugin["outcome"] != "refused":  # what was applied, as both record it
        assert plugin["applied"]["enforcement"] in ("hard", "soft")
        assert plugin["applied"]["cgroup_version"] == version
