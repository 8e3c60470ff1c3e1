"""GPUs with one accountant, against a real containerd: a container opens exactly the GPUs
the kubelet granted it, whatever nri-sla's `gpu.injection` mode and however the grant is
passed (CRI CDI devices of either NVIDIA kind, or device nodes); MIG devices granted as
their access nodes, as CDI names and as NVIDIA's DRA driver's names are MIG devices;
time-sliced replicas of one GPU are shared by design; a privileged container is a system
holder, not a grant.

The GPUs are fakes (e2e_gpu.py: mknod'ed nodes with the NVIDIA major, CDI specs in the
cluster's `cdi_spec_dirs`, the dgx-like inventory's GPUs); containerd resolves the CDI
names and runc makes the nodes and the device cgroup for real. What a container can open
is read from its final OCI spec (`crictl inspect`: linux.devices and the device cgroup
rules) and from the kernel's devices.list (cgroup v1).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest

from nri_plugin.simulated.deviceplugin import DevicePlugin
from nri_plugin.simulated.kubelet import Kubelet
from nri_plugin.simulated.podresources_server import PodResourcesServer
from nri_plugin.topology.cpulist import format_cpulist
from nri_plugin.topology.snapshot import load_snapshot
from tests.e2e.e2e_cluster import NAMESPACE
from tests.e2e.e2e_gpu import KINDS, MIG_DEVICES, FakeGpus, host_has_two_cpus
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
def mig_gpus(cluster) -> FakeGpus:
    if not host_has_two_cpus():
        pytest.skip("needs 2 CPUs: the fake GPUs' two NUMA nodes get one half each")
    return FakeGpus.make(cluster.base, mig=True)


@pytest.fixture
def gpu_plugin(cluster, plugins, sla_plugin_argv, gpus):
    """gpu_plugin(mode) -> the started SlaService with `gpu.injection: mode`, the fake
    GPUs' inventory and the default permissions (no GPU without a grant, nothing above
    the runtime's limits)."""

    def start(mode: str = "cdi", **overrides) -> SlaService:
        service = SlaService(cluster, plugins, sla_plugin_argv, gpus=gpus)
        service.configure(**{"gpu": {"injection": mode}, "permissions": {}} | overrides)
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
    print(
        "evidence: plugin log:", *plugin.current.wait_output(rf"not a grant.*{plain.container_id}")
    )

    soft = cluster.run_pod(
        "env-soft", {"sla.nri.io/pod": "enforcement: soft\ngpu: {count: 2}\n"}, grant=EVERY_GPU_ENV
    )
    assert_opens(gpus, soft, ())
    warnings = cluster.spec_annotations(soft).get("sla.nri.io/warnings", "")
    print("evidence: warnings:", warnings)
    assert "gpu" in warnings

    with pytest.raises(cluster.Error) as hard:
        cluster.run_pod("env-hard", TWO, grant=EVERY_GPU_ENV)
    print("evidence: refused:", hard.value)
    assert "sla.nri.io/pod: gpu: no device plugin granted this container a GPU" in str(hard.value)
    assert "NVIDIA_VISIBLE_DEVICES" in str(hard.value)  # named, and not taken as a grant

    # The env pods hold nothing: a real grant of every GPU goes through.
    every = cluster.run_pod(
        "every",
        {"sla.nri.io/pod": "gpu: {count: 8, align: false}\n"},
        grant=gpus.cdi_grant(KINDS[0], tuple(range(8))),
    )
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
    (line,) = plugin.current.wait_output(
        rf"GPU shared by two containers.*"
        rf"({gpu3.uuid}|{gpu3.pci_bus_id})"
    )
    print("evidence: plugin log:", line)
    assert second.container_id in line and holder.container_id in line
    assert shared_gpus(plugin) == 1

    # A restarted plugin learns every holder again from Synchronize, SLA or not.
    plugin.stop()
    plugin.start()
    plugin.current.wait_output(r"synchronized: 4 pods, 3 containers")
    plugin.current.wait_output(r"GPU shared by two containers")  # published after it
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
        soft = cluster.run_pod(
            f"soft-{n}", {"sla.nri.io/pod": "enforcement: soft\n" + sla}, grant=grant
        )
        assert_opens(gpus, soft, granted)
        warnings = cluster.spec_annotations(soft).get("sla.nri.io/warnings", "")
        print("evidence: warnings:", warnings)
        assert field in warnings


def test_mig_devices_granted_as_access_nodes_and_cdi_names(
    cluster, plugins, sla_plugin_argv, mig_gpus
):
    """Fake MIG devices of GPU 7 (mknod'ed /dev/nvidia-caps nodes): granted as device
    nodes (NVIDIA's passDeviceSpecs), as a CDI name (its cdi-cri strategy) and as the DRA
    driver's CDI names, each meets a hard MIG SLA; three containers on three MIG devices
    of one GPU share nothing; a MIG SLA the grant does not meet is refused naming only
    this container's MIG device."""
    plugin = SlaService(cluster, plugins, sla_plugin_argv, gpus=mig_gpus)
    plugin.configure(gpu={"injection": "cdi"}, permissions={})
    plugin.start()
    small, large = (
        {"sla.nri.io/pod": "gpu: {mig: 1g.10gb}\n"},
        {"sla.nri.io/pod": "gpu: {mig: 2g.20gb}\n"},
    )
    pods = {
        "mig-nodes": (small, mig_gpus.mig_device_grant(0), 0),
        "mig-cdi": (small, mig_gpus.mig_cdi_grant(KINDS[1], 1), 1),
        "mig-dra": (large, mig_gpus.dra_grant(2), 2),
    }
    for name, (sla, grant, mig) in pods.items():
        pc = cluster.run_pod(name, sla, grant=grant)
        assert mig_gpus.caps_minors(pc) == frozenset(MIG_DEVICES[mig][3])
        record = json.loads(cluster.spec_annotations(pc)["sla.nri.io/applied"])
        print("evidence: record:", record.get("placement_record"))
        assert record["placement_record"]["migs"] == [MIG_DEVICES[mig][0]]
    assert shared_gpus(plugin) == 0
    assert "GPU shared by two" not in plugin.current.output()
    with pytest.raises(cluster.Error) as refused:
        cluster.run_pod("mig-short", small, grant=mig_gpus.mig_device_grant(2))
    print("evidence: refused:", refused.value)
    assert (
        "asks for a MIG 1g.10gb device; none is granted (granted: MIG 2g.20gb "
        f"{MIG_DEVICES[2][0]}" in str(refused.value)
    )
    assert MIG_DEVICES[0][0] not in str(refused.value)  # nobody else's device
    assert "Traceback" not in plugin.current.output()


def test_time_sliced_replicas_are_shared_by_design(cluster, gpus, gpu_plugin):
    """NVIDIA's device plugin with time-slicing (2 replicas per GPU, renamed
    nvidia.com/gpu.shared, cdi-cri strategy): two pods get replicas of GPU 0, both as
    the GPU's CDI name; the kubelet's PodResources (served here from the simulated
    kubelet's books) says GPU-...::n. Both hard SLAs are met, no sharing alarm."""
    inventory = load_snapshot(gpus.inventory).inventory
    kubelet = Kubelet(
        DevicePlugin(inventory, "cdi-cri", replicas=2, resource="nvidia.com/gpu.shared")
    )
    with tempfile.TemporaryDirectory(prefix="nri-sla-pr") as d:
        socket = str(Path(d) / "kubelet.sock")
        with PodResourcesServer(kubelet, socket):
            plugin = gpu_plugin("cdi", gpu={"injection": "cdi", "podresources-socket": socket})
            made = []
            for name in ("sliced-a", "sliced-b"):
                grant = kubelet.admit(name, NAMESPACE, name, "work", 1)
                print("evidence: kubelet grant:", grant.device_ids)
                cri = {"CDI_devices": [{"name": n} for n in grant.allocation.cdi_devices]}
                made.append(
                    cluster.run_pod(name, {"sla.nri.io/pod": "gpu: {count: 1}\n"}, grant=cri)
                )
            for pc in made:
                assert_opens(gpus, pc, (0,))
            (line,) = plugin.current.wait_output(r"GPU replicas shared by design")
            print("evidence: plugin log:", line)
            assert shared_gpus(plugin) == 0
            assert "GPU shared by two" not in plugin.current.output()


def run_privileged(cluster, name: str, annotations: dict[str, str], grant: dict):
    """A privileged pod and container (as DCGM or a device plugin runs): containerd gives
    it every host device and a device cgroup that allows them all."""
    files = cluster.pod_files(name, annotations, grant=grant)
    for path, key in ((files.pod, "linux"), (files.container, "linux")):
        doc = json.loads(path.read_text())
        doc.setdefault(key, {}).setdefault("security_context", {})["privileged"] = True
        path.write_text(json.dumps(doc))
    pod_id = cluster.run_sandbox(files)
    cid = cluster.create_container(pod_id, files)
    cluster.crictl("start", cid)
    return cluster.inspect(pod_id, cid)


def test_a_privileged_container_beside_a_gpu_pod(cluster, gpus, gpu_plugin):
    """A privileged container that sees every GPU node is a system holder: it holds no
    GPU and shares none; the GPU pod beside it gets its SLA; its own GPU SLA finds no
    grant."""
    plugin = gpu_plugin("cdi")
    every = gpus.device_grant(tuple(range(8)))
    system = run_privileged(cluster, "dcgm", {}, every)
    rules = system.inspect["info"]["runtimeSpec"]["linux"]["resources"].get("devices")
    print("evidence: privileged device cgroup rules:", rules)
    trainer = cluster.run_pod(
        "trainer", {"sla.nri.io/pod": "gpu: {count: 1}\n"}, grant=gpus.cdi_grant(KINDS[1], (2,))
    )
    assert_opens(gpus, trainer, (2,))
    assert_aligned(cluster, gpus, trainer, (2,))
    assert shared_gpus(plugin) == 0
    assert "GPU shared by two" not in plugin.current.output()
    print(
        "evidence: plugin log:",
        *plugin.current.wait_output(rf"system holder.*{system.container_id}"),
    )
    with pytest.raises(cluster.Error) as refused:
        run_privileged(cluster, "greedy", {"sla.nri.io/pod": "gpu: {count: 1}\n"}, every)
    print("evidence: refused:", refused.value)
    assert "no device plugin granted this container a GPU" in str(refused.value)
