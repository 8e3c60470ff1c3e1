"""GPUs with one accountant, against a real containerd: a container opens exactly the GPUs
the kubelet granted it, whatever nri-sla's `gpu.injection` mode and however the grant is
passed (CRI CDI devices of either NVIDIA kind, or device nodes).

The GPUs are fakes (e2e_gpu.py: mknod'ed nodes with the NVIDIA major, CDI specs in the
cluster's `cdi_spec_dirs`, the dgx-like inventory's GPUs); containerd resolves the CDI
names and runc makes the nodes and the device cgroup for real. What a container can open
is read from its final OCI spec (`crictl inspect`: linux.devices and the device cgroup
rules) and from the kernel's devices.list (cgroup v1).
"""

from __future__ import annotations

import pytest

from nri_plugin.topology.cpulist import format_cpulist
from tests.e2e.e2e_gpu import KINDS, FakeGpus, host_has_two_cpus
from tests.e2e.e2e_service import SlaService

pytestmark = pytest.mark.e2e

MODES = ("cdi", "env", "devices")
TWO = {"sla.nri.io/pod": "gpu: {count: 2}\n"}
SHARED_METRIC = "nri_sla_gpus_shared"
EVERY_GPU_ENV = {"envs": [{"key": "NVIDIA_VISIBLE_DEVICES", "value": "0,1,2,3,4,5,6,7"}]}


@pytest.fixture
def gpus(cluster) -> FakeGpus:
    if not host_has_two_cpus():
        pytest.skip("needs 2 CPUs: the fake GPUs' two NUMA nodes get one half each")
    return FakeGpus.make(cluster.base)


@pytest.fixture
def gpu_plugin(cluster, plugins, sla_plugin_argv, gpus):
    """gpu_plugin(mode) -> the started SlaService with `gpu.injection: mode`, the fake
    GPUs' inventory and the default permissions (no GPU without a grant, nothing above
    the runtime's limits)."""
    def start(mode: str = "cdi", **overrides) -> SlaService:
        service = SlaService(cluster, plugins, sla_plugin_argv, gpus=gpus)
        service.configure(gpu={"injection": mode}, permissions={}, **overrides)
        service.start()
        return service
    return start


def assert_opens(gpus: FakeGpus, pc, indexes: tuple[int, ...]) -> None:
    """Container `pc` can open exactly GPUs `indexes`: its nodes, the spec's device rules,
    the kernel's devices.list all say so."""
    access = gpus.access(pc)
    expected = gpus.minors(indexes)
    assert access.nodes == expected, "device nodes in linux.devices"
    assert access.rules == expected, "device cgroup rules in the spec"
    assert access.kernel in (None, expected), "devices.list of the container's cgroup"


def assert_aligned(cluster, gpus: FakeGpus, pc, indexes: tuple[int, ...]) -> None:
    """cpuset.cpus is the granted GPUs' NUMA node's CPUs; mems its memory (node 0 only
    has memory, see e2e_gpu.py)."""
    (node,) = {gpus.by_index(i).numa_node for i in indexes}
    cpus = cluster.cgroup_file(pc, "cpuset", "cpuset.cpus")
    assert cpus == format_cpulist(gpus.node_cpus[node])
    if node == 0:
        assert cluster.cgroup_file(pc, "cpuset", "cpuset.mems") == "0"


@pytest.mark.parametrize("mode", MODES)
def test_a_container_opens_exactly_its_grant(cluster, gpus, gpu_plugin, mode):
    gpu_plugin(mode)
    # pod name: (how the kubelet passes the grant, GPUs granted). Not GPUs 0 and 1 first:
    # a plugin that chose GPUs itself would pick that free NVLink pair, and show here.
    grants = {
        "cdi-toolkit-kind": (gpus.cdi_grant(KINDS[0], (2, 3)), (2, 3)),
        "cdi-device-plugin-kind": (gpus.cdi_grant(KINDS[1], (4, 5)), (4, 5)),
        "device-nodes": (gpus.device_grant((0, 1)), (0, 1)),
    }
    for name, (grant, granted) in grants.items():
        pc = cluster.run_pod(name, TWO, grant=grant)
        assert_opens(gpus, pc, granted)
        assert_aligned(cluster, gpus, pc, granted)
        assert gpus.access(pc).visible_env is None  # nri-sla wrote no env
    # A pod without an SLA keeps what it was granted, nothing more.
    plain = cluster.run_pod("no-sla", {}, grant=gpus.cdi_grant(KINDS[1], (6,)))
    assert_opens(gpus, plain, (6,))


@pytest.mark.parametrize("mode", MODES)
def test_env_naming_gpus_is_no_grant(cluster, gpus, gpu_plugin, mode):
    plugin = gpu_plugin(mode)
    plain = cluster.run_pod("env-only", {}, grant=EVERY_GPU_ENV)
    assert_opens(gpus, plain, ())
    assert gpus.access(plain).visible_env == "0,1,2,3,4,5,6,7"  # the tenant's, unchanged
    # The plugin says that the env was the only evidence, and counted it as no grant.
    print("evidence: plugin log:", *plugin.current.wait_output(
        rf"not a grant.*{plain.container_id}"))

    soft = cluster.run_pod("env-soft", {"sla.nri.io/pod": "enforcement: soft\n"
                                        "gpu: {count: 2}\n"}, grant=EVERY_GPU_ENV)
    assert_opens(gpus, soft, ())
    warnings = cluster.spec_annotations(soft).get("sla.nri.io/warnings", "")
    print("evidence: warnings:", warnings)
    assert "gpu" in warnings

    with pytest.raises(cluster.Error) as hard:
        cluster.run_pod("env-hard", TWO, grant=EVERY_GPU_ENV)
    print("evidence: refused:", hard.value)
    assert "sla.nri.io/pod: gpu: no device plugin granted this container a GPU" in str(
        hard.value)
    assert "NVIDIA_VISIBLE_DEVICES" in str(hard.value)  # named, and not taken as a grant

    # The env pods hold nothing: a real grant of every GPU goes through.
    every = cluster.run_pod("every", {"sla.nri.io/pod": "gpu: {count: 8, align: false}\n"},
                            grant=gpus.cdi_grant(KINDS[0], tuple(range(8))))
    assert_opens(gpus, every, tuple(range(8)))
    assert "Traceback" not in plugin.current.output()


def test_a_gpu_held_without_an_sla_is_never_given_to_another(cluster, gpus, gpu_plugin):
    plugin = gpu_plugin("cdi")
    holder = cluster.run_pod("holder", {}, grant=gpus.device_grant((3,)))
    assert_opens(gpus, holder, (3,))
    trainer = cluster.run_pod("trainer", TWO, grant=gpus.cdi_grant(KINDS[1], (6, 7)))
    assert_opens(gpus, trainer, (6, 7))
    with pytest.raises(cluster.Error) as ungranted:
        cluster.run_pod("ungranted", {"sla.nri.io/pod": "gpu: {count: 1}\n"})
    print("evidence: refused:", ungranted.value)
    assert "no device plugin granted this container a GPU" in str(ungranted.value)
    assert shared_gpus(plugin) == 0
    assert "shared" not in plugin.current.output()

    # The control: the kubelet itself grants GPU 3 a second time. nri-sla neither caused
    # it nor can undo it (NRI cannot remove a device), but it reports it.
    second = cluster.run_pod("second-holder", {}, grant=gpus.device_grant((3,)))
    assert_opens(gpus, second, (3,))
    gpu3 = gpus.by_index(3)
    (line,) = plugin.current.wait_output(rf"GPU shared by two containers.*"
                                         rf"({gpu3.uuid}|{gpu3.pci_bus_id})")
    print("evidence: plugin log:", line)
    assert second.container_id in line and holder.container_id in line
    assert shared_gpus(plugin) == 1

    # A restarted plugin learns every holder again from Synchronize, SLA or not.
    plugin.stop()
    plugin.start()
    plugin.current.wait_output(r"synchronized: 4 pods, 3 containers")
    assert shared_gpus(plugin) == 1


def shared_gpus(service: SlaService) -> float:
    """nri-sla's count of GPUs that two live containers can open."""
    samples = service.scrape()
    found = {name: v for (name, labels), v in samples.values.items() if "shared" in name}
    print("evidence: metrics:", found)
    return samples.get(SHARED_METRIC) or 0.0


@pytest.mark.parametrize("kind", KINDS)
def test_an_sla_its_grant_does_not_satisfy_is_refused(cluster, gpus, gpu_plugin, kind):
    gpu_plugin("cdi")
    asks = {  # SLA: (GPUs granted, the field that names the lack)
        "gpu: {count: 4}\n": ((0, 1), "gpu.count"),
        "gpu: {count: 2, topology: nvlink, align: false}\n": ((0, 5), "gpu.topology"),
        "gpu: {count: 2, topology: numa, align: false}\n": ((1, 4), "gpu.topology"),
    }
    for n, (sla, (granted, field)) in enumerate(asks.items()):
        grant = gpus.cdi_grant(kind, granted)
        with pytest.raises(cluster.Error) as refused:
            cluster.run_pod(f"hard-{n}", {"sla.nri.io/pod": sla}, grant=grant)
        message = str(refused.value)
        print("evidence: refused:", message)
        assert "crictl create" in message and f"sla.nri.io/pod: {field}" in message
        for index in granted:  # the message names what was granted
            assert gpus.by_index(index).uuid in message
        soft = cluster.run_pod(f"soft-{n}", {"sla.nri.io/pod": "enforcement: soft\n" + sla},
                               grant=grant)
        assert_opens(gpus, soft, granted)
        warnings = cluster.spec_annotations(soft).get("sla.nri.io/warnings", "")
        print("evidence: warnings:", warnings)
        assert field in warnings
