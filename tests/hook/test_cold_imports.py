"""What a cold hook run (no cached decision: the core decides) loads, and what it must not.

The hook's OneShotNode imports the allocator, GPU inventory and RT budget where they are
first used, so a CPU/memory-only SLA pays for none of them; an SLA asking for placement
still loads the allocator (the control that this test sees lazy imports at all).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = str(Path(__file__).resolve().parents[2])
CTR = "/kubepods/pod-a/ctr-1"
# Runs the hook's main in-process and prints every module loaded (importlib.import_module,
# which the lazy package exports use, is invisible to -X importtime).
PROBE = (
    "import sys; sys.path.insert(0, sys.argv.pop(1)); "
    "from nri_plugin.hook.run import add_site_packages, main; add_site_packages(); "
    "status = main(sys.argv[1:]); print(' '.join(sorted(sys.modules))); "
    "sys.exit(status)"
)
CPU_MEMORY_SLA = (
    "cpu:\n  limit: 2.5\n  period: 100ms\nmemory:\n  high: 8Gi\n  max: 10Gi\nio:\n  weight: 500\n"
)
NOT_ON_A_CPU_MEMORY_RUN = (
    "nri_plugin.plan.allocator",
    "nri_plugin.plan.best_fit",
    "nri_plugin.plan.cpupool",
    "nri_plugin.plan.placement_values",
    "nri_plugin.plan.rt_budget",
    "nri_plugin.plan.runtime_gpus",
    "nri_plugin.enforce.rt_ledger",
    "nri_plugin.enforce.rt",
    "nri_plugin.topology.cpus",
    "nri_plugin.topology.gpus",
    "nri_plugin.topology.gpu_health",
    "nri_plugin.topology.health_monitor",
    "nri_plugin.topology.inventory",
    "nri_plugin.topology.nvml_gpus",
    "nri_plugin.topology.snapshot",
    "nri_plugin.topology.watched",
    "typing",
    "nri_plugin.core.restored",
    # the core logs through ops.corelog, which the hook silences without importing logging;
    # cgroup detection, mountinfo, blockdev and the capabilities take and return strings
    "logging",
    "pathlib",
    # the SLA and the node config are in the YAML subset text.yamlsubset reads
    "yaml",
)


def cold_run_modules(tmp_path: Path, h, sla: str) -> set[str]:
    root = tmp_path / "cg"
    h.fake_v2_tree(root, CTR)
    config = tmp_path / "config.yaml"
    config.write_text(f"enforcement: hard\nstate-dir: {tmp_path / 'state'}\n")
    bundle = h.write_bundle(
        tmp_path / "bundle",
        {
            "io.kubernetes.cri.container-type": "container",
            "io.kubernetes.cri.container-name": "app",
            "sla.nri.io/pod": sla,
        },
        CTR,
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-I",
            "-S",
            "-c",
            PROBE,
            REPO,
            "--config",
            str(config),
            "--cgroup-root",
            str(root),
            "--cache-dir",
            str(tmp_path / "cache"),
        ],
        input=h.state_json(bundle),
        capture_output=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    modules = set(proc.stdout.decode().split())
    assert "nri_plugin.hook.cold" in modules and "nri_plugin.plan.planner" in modules
    return modules


def test_a_cpu_memory_sla_loads_no_allocator_gpu_or_rt_modules(tmp_path, h):
    modules = cold_run_modules(tmp_path, h, CPU_MEMORY_SLA)
    assert sorted(modules & set(NOT_ON_A_CPU_MEMORY_RUN)) == []


@pytest.mark.parametrize("section", ["numa:\n  nodes: '0'\n", "cpu:\n  exclusive: 1\n"])
def test_a_placement_sla_loads_the_allocator(tmp_path, h, section):
    modules = cold_run_modules(tmp_path, h, "memory:\n  max: 64Mi\n" + section)
    assert {"nri_plugin.plan.allocator", "nri_plugin.topology.cpus"} <= modules
    # topology.cpus reads sysfs with os.path; the placement values are value.Frozen, and
    # the allocator's lock is _thread's
    lean = {"logging", "pathlib", "yaml", "dataclasses", "typing", "threading"}
    assert not lean & modules
