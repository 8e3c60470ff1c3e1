"""How GPUs a device plugin chose reach the container, in the three modes: cdi, env,
devices (`nri-sla device-plugin`'s Allocate; the NRI plugin and hook never inject)."""

import os
import stat
from types import SimpleNamespace

import pytest

from nri_plugin.plan.errors import PlacementError
from nri_plugin.plan.gpu_injection import ChosenGpus, DeviceNode, GpuInjection, gpu_injection
from nri_plugin.topology.gpus import Gpu, MigInstance

UVM_MAJOR = 508
CAPS_MAJOR = 511


def whole(alloc, *indexes: int) -> ChosenGpus:
    return ChosenGpus(tuple(alloc.inventory.gpus[i] for i in indexes))


def one_mig(alloc, name: str) -> ChosenGpus:
    gpu, mig = alloc.inventory.find_mig(name)
    return ChosenGpus((gpu,), mig)


@pytest.fixture
def fake_dev(tmp_path):
    """A /dev with real character device nodes (mknod needs root and CAP_MKNOD)."""
    dev = tmp_path / "dev"
    (dev / "nvidia-caps").mkdir(parents=True)
    nodes = {f"nvidia{i}": (195, i) for i in range(8)}
    nodes |= {
        "nvidiactl": (195, 255),
        "nvidia-uvm": (UVM_MAJOR, 0),
        "nvidia-uvm-tools": (UVM_MAJOR, 1),
    }
    nodes |= {f"nvidia-caps/nvidia-cap{m}": (CAPS_MAJOR, m) for m in (21, 22, 30, 31)}
    try:
        for name, (major, minor) in nodes.items():
            os.mknod(dev / name, 0o666 | stat.S_IFCHR, os.makedev(major, minor))
            os.chmod(dev / name, 0o666)  # mknod's mode is filtered by the umask
    except PermissionError:
        pytest.skip("mknod of character devices needs root with CAP_MKNOD")
    os.chmod(dev / "nvidia-caps/nvidia-cap21", 0o400)
    return dev


def test_cdi_by_uuid_and_by_index(dgx, mig):
    p = whole(dgx, 0, 1)
    inj = gpu_injection(p, "cdi")
    assert inj.cdi_devices == (
        "nvidia.com/gpu=GPU-d0000000-0000-0000-0000-000000000000",
        "nvidia.com/gpu=GPU-d0000000-0000-0000-0000-000000000001",
    )
    assert inj.env == {} and inj.devices == ()
    assert gpu_injection(p, "cdi", cdi_names="index").cdi_devices == (
        "nvidia.com/gpu=0",
        "nvidia.com/gpu=1",
    )
    m = one_mig(mig, "0:1")  # 2g.20gb
    assert gpu_injection(m, "cdi").cdi_devices == (f"nvidia.com/gpu={m.mig.uuid}",)
    assert gpu_injection(m, "cdi", cdi_names="index").cdi_devices == ("nvidia.com/gpu=0:1",)


def test_env(dgx, mig):
    p = whole(dgx, 4, 5)
    assert gpu_injection(p, "env") == GpuInjection(
        env={
            "NVIDIA_VISIBLE_DEVICES": "GPU-d0000000-0000-0000-0000-000000000004,"
            "GPU-d0000000-0000-0000-0000-000000000005"
        }
    )
    m = one_mig(mig, "0:0")  # 3g.40gb
    assert gpu_injection(m, "env").env == {"NVIDIA_VISIBLE_DEVICES": m.mig.uuid}


def test_env_without_uuids_uses_indexes():
    p = ChosenGpus((Gpu(0, "", "0000:07:00.0", 0), Gpu(1, "", "0000:0f:00.0", 0)))
    assert gpu_injection(p, "env").env == {"NVIDIA_VISIBLE_DEVICES": "0,1"}


def test_devices_read_from_the_host(dgx, fake_dev):
    p = whole(dgx, 4, 5)
    inj = gpu_injection(p, "devices", dev_root=fake_dev)
    assert [d.path for d in inj.devices] == [
        "/dev/nvidia4",
        "/dev/nvidia5",
        "/dev/nvidiactl",
        "/dev/nvidia-uvm",
        "/dev/nvidia-uvm-tools",
    ]
    assert inj.devices[0] == DeviceNode("/dev/nvidia4", "c", 195, 4, 0o666, 0, 0)
    assert inj.devices[3].major == UVM_MAJOR
    assert inj.env["NVIDIA_VISIBLE_DEVICES"].count("GPU-") == 2


def test_devices_for_mig_include_the_capability_nodes(mig, fake_dev):
    p = one_mig(mig, "0:0")  # 3g.40gb: caps minors 21 (gi) and 22 (ci)
    inj = gpu_injection(p, "devices", dev_root=fake_dev)
    caps = [d for d in inj.devices if "nvidia-caps" in d.path]
    assert [(d.path, d.major, d.minor) for d in caps] == [
        ("/dev/nvidia-caps/nvidia-cap21", CAPS_MAJOR, 21),
        ("/dev/nvidia-caps/nvidia-cap22", CAPS_MAJOR, 22),
    ]
    assert caps[0].file_mode == 0o400  # the host's mode is kept
    assert inj.devices[0].path == "/dev/nvidia0"  # the parent GPU


def test_missing_uvm_tools_is_skipped_but_a_gpu_node_is_an_error(dgx, fake_dev):
    (fake_dev / "nvidia-uvm-tools").unlink()
    p = whole(dgx, 0)
    assert "/dev/nvidia-uvm-tools" not in [
        d.path for d in gpu_injection(p, "devices", fake_dev).devices
    ]
    (fake_dev / "nvidia0").unlink()
    with pytest.raises(PlacementError, match=r"dev/nvidia0 does not exist \(is the NVIDIA "):
        gpu_injection(p, "devices", fake_dev)


def test_regular_file_is_not_a_device(dgx, tmp_path):
    for name in ("nvidia0", "nvidiactl"):
        (tmp_path / name).write_text("")
    with pytest.raises(PlacementError, match="nvidia0 is not a character device"):
        gpu_injection(whole(dgx, 0), "devices", tmp_path)


def test_stat_function_is_injectable(dgx, tmp_path):
    seen = []

    def fake_stat(path):
        seen.append(path)
        return SimpleNamespace(
            st_mode=stat.S_IFCHR | 0o660, st_rdev=os.makedev(195, 7), st_uid=0, st_gid=44
        )

    inj = gpu_injection(whole(dgx, 0), "devices", tmp_path, fake_stat)
    assert seen[0] == str(tmp_path / "nvidia0")
    assert inj.devices[0] == DeviceNode("/dev/nvidia0", "c", 195, 7, 0o660, 0, 44)


def test_mig_without_caps_minors_cannot_use_devices_mode(dgx_node):
    gpu = dgx_node[1].gpus[0]
    p = ChosenGpus(gpus=(gpu,), mig=MigInstance("MIG-x", "1g.10gb", 0, 1, 0))
    with pytest.raises(PlacementError, match="use gpu injection mode cdi or env"):
        gpu_injection(p, "devices", stat_fn=lambda _: None)


def test_nothing_to_inject():
    for mode in ("cdi", "env", "devices"):
        assert gpu_injection(ChosenGpus(), mode).empty


@pytest.mark.parametrize(
    ("kwargs", "text"),
    [
        ({"mode": "nvidia"}, "mode 'nvidia' is not one of cdi, env, devices"),
        ({"mode": "cdi", "cdi_names": "pci"}, "CDI naming 'pci' is not one of uuid, index"),
    ],
)
def test_bad_modes(kwargs, text):
    with pytest.raises(PlacementError, match=text):
        gpu_injection(ChosenGpus(), **kwargs)
