"""cgroup_writes(scope="runtime") is what the adjustment has the runtime write: the drift
watch reads these files back, so they must be exactly the adjustment's settings, and
with the direct writes they make up everything ("all")."""

from __future__ import annotations

import pytest

from nri_plugin.enforce.plan_writes import cgroup_writes
from nri_plugin.errors import ProgrammingError
from nri_plugin.plan.model import ContainerPlan, IoLimit
from nri_plugin.plugin.adjustment import build_adjustment

NVME = IoLimit(259, 0, read_bps=1 << 20)
SDA = IoLimit(8, 0, write_iops=100)


def plan(version: int, **fields) -> ContainerPlan:
    base = dict(
        enforcement="hard",
        cgroup_version=version,
        cpu_quota=150_000,
        cpu_period=100_000,
        cpus="0-3",
        mems="0",
        memory_max=1 << 30,
        io_weight=500,
    )
    if version == 1:
        base.update(rt_runtime=5000, rt_period=1_000_000, memory_soft_limit=1 << 29)
    else:
        base.update(memory_high=3 << 28)
    base.update(fields)
    return ContainerPlan(**base)


def adjustment_files(p: ContainerPlan) -> dict[str, str]:
    """The files runc writes for the adjustment's resources (runc's own mapping)."""
    res = build_adjustment(p).linux.resources
    cpu = res.cpu
    files: dict[str, str] = {}
    if p.cgroup_version == 1:
        files["cpu.cfs_period_us"] = str(cpu.period.value)
        files["cpu.cfs_quota_us"] = str(cpu.quota.value)
        if cpu.HasField("realtime_runtime"):
            files["cpu.rt_period_us"] = str(cpu.realtime_period.value)
            files["cpu.rt_runtime_us"] = str(cpu.realtime_runtime.value)
        files["memory.limit_in_bytes"] = str(res.memory.limit.value)
    else:
        files["cpu.max"] = f"{cpu.quota.value} {cpu.period.value}"
        files["memory.max"] = str(res.memory.limit.value)
        files.update(res.unified)
    files["cpuset.cpus"], files["cpuset.mems"] = cpu.cpus, cpu.mems
    return files


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("devices", [(), (NVME,), (NVME, SDA)])
@pytest.mark.parametrize("bfq", [False, True])
def test_runtime_scope_is_the_adjustment_and_completes_direct(version, devices, bfq):
    p = plan(version, io_max=devices)
    runtime = cgroup_writes(p, "runtime", bfq)
    direct = cgroup_writes(p, "direct", bfq)
    assert {w.file: w.value for w in runtime} == adjustment_files(p)
    assert not set(runtime) & set(direct)
    together, everything = set(runtime) | set(direct), set(cgroup_writes(p, "all", bfq))
    if version == 2 and bfq:
        # The hook writes the weight to io.bfq.weight; the adjustment carries io.weight.
        assert {w.file for w in together ^ everything} == {"io.weight", "io.bfq.weight"}
    else:
        assert together == everything


def test_an_unknown_scope_is_refused():
    with pytest.raises(ProgrammingError, match="'all', 'direct' or 'runtime'"):
        cgroup_writes(plan(2), "everything")
