import subprocess
import sys
from pathlib import Path

import pytest

from nri_plugin.simulated.hardware import build_sysfs
from nri_plugin.topology.cpus import read_topology
from nri_plugin.topology.errors import TopologyError


@pytest.mark.parametrize(("nodes", "threads"), [(1, 1), (1, 2), (2, 1), (2, 2), (4, 1), (4, 2)])
def test_nodes_and_smt(tmp_path, nodes, threads):
    root = build_sysfs(tmp_path, nodes=nodes, cores_per_node=4, threads=threads)
    topo = read_topology(root)
    assert len(topo.online) == nodes * 4 * threads
    assert topo.node_ids == tuple(range(nodes))
    assert len(topo.cores) == nodes * 4
    assert topo.threads_per_core == threads
    # every CPU in exactly one node, every core inside one node
    assert sum(len(n.cpus) for n in topo.nodes) == len(topo.online)
    for node in topo.nodes:
        assert len(topo.node_cores(node.id)) == 4
        assert node.distances[node.id] == 10
    if nodes > 1:
        assert topo.node(0).distances[1] == 21


def test_smt_numbering_like_linux(tmp_path):
    topo = read_topology(build_sysfs(tmp_path, nodes=2, cores_per_node=4, threads=2))
    assert topo.node(0).cpus == frozenset({0, 1, 2, 3, 8, 9, 10, 11})
    assert topo.core_of(1) == frozenset({1, 9})
    assert topo.node_of(12) == 1


def test_no_node_dirs_is_one_node(tmp_path):
    topo = read_topology(build_sysfs(tmp_path, nodes=1, cores_per_node=6, numa_dirs=False))
    assert topo.node_ids == (0,)
    assert topo.node(0).cpus == topo.online == frozenset(range(6))


def test_offline_cpus_are_left_out(tmp_path):
    topo = read_topology(build_sysfs(tmp_path, nodes=2, cores_per_node=2, threads=2, offline=[6]))
    assert 6 not in topo.online
    assert 6 not in topo.node(0).cpus | topo.node(1).cpus
    assert topo.core_of(2) == frozenset({2})  # its sibling 6 is offline


def test_older_kernels_without_core_cpus_list(tmp_path):
    root = build_sysfs(tmp_path, nodes=1, cores_per_node=2, threads=2)
    for f in root.glob("devices/system/cpu/cpu*/topology/core_cpus_list"):
        f.unlink()
    assert read_topology(root).core_of(0) == frozenset({0, 2})


def test_reserved_is_kept(tmp_path):
    topo = read_topology(build_sysfs(tmp_path, cores_per_node=4), reserved=[0, 99])
    assert topo.reserved == frozenset({0})


def test_missing_sysfs_is_a_clear_error(tmp_path):
    with pytest.raises(TopologyError, match="online"):
        read_topology(tmp_path)


def test_garbage_cpulist_names_the_file(tmp_path):
    root = build_sysfs(tmp_path)
    (root / "devices/system/cpu/online").write_text("zero\n")
    with pytest.raises(TopologyError, match="devices/system/cpu/online"):
        read_topology(root)


def test_unknown_node_lookup_lists_nodes(tmp_path):
    topo = read_topology(build_sysfs(tmp_path, nodes=2, cores_per_node=1))
    with pytest.raises(TopologyError, match=r"NUMA node 5 does not exist \(nodes: 0"):
        topo.node(5)


def test_this_machine():
    if not Path("/sys/devices/system/cpu/online").exists():
        pytest.skip("needs a Linux /sys")
    topo = read_topology()
    assert topo.online
    assert set().union(*(n.cpus for n in topo.nodes)) == topo.online


def test_hook_path_imports_stay_light():
    # the OCI hook imports placement on every container start: no YAML, NVML or logging
    code = (
        "import sys, nri_plugin.plan.allocator; "
        "print(sorted(m for m in ('yaml', 'pynvml', 'logging') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-I", "-c", code], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"
