"""The simulator's OCI spec: CDI spec files parsed and resolved as containerd does, an NRI
adjustment applied whole and in order, and what the created container can open."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nri_plugin.errors import InvalidInput
from nri_plugin.nri.pb import nri_pb2 as pb
from nri_plugin.simulated.cdi import CdiRegistry, load_dir, parse_spec
from nri_plugin.simulated.ocispec import (
    NvidiaRuntime,
    apply_adjustment,
    openable_gpus,
    spec_from_request,
)
from nri_plugin.simulated.runtime import make_container, make_pod
from nri_plugin.topology.snapshot import load_snapshot

REPO = Path(__file__).resolve().parents[2]
INVENTORY = load_snapshot(REPO / "examples" / "dgx-like.yaml").inventory
UUID = "GPU-d0000000-0000-0000-0000-00000000000{}".format

# As `nvidia-ctk cdi generate` writes it: device nodes by path only (the runtime reads the
# host's node for major and minor), NVIDIA_VISIBLE_DEVICES=void for the legacy hook.
NVIDIA_YAML = f"""\
cdiVersion: 0.5.0
kind: nvidia.com/gpu
devices:
- name: "3"
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia3
- name: {UUID(3)}
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia3
containerEdits:
  env:
  - NVIDIA_VISIBLE_DEVICES=void
  deviceNodes:
  - path: /dev/nvidiactl
  mounts:
  - hostPath: /usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15
    containerPath: /usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15
    options: [ro, nosuid, nodev, bind]
"""


def fake_stat(path: str) -> os.stat_result:
    """The host's NVIDIA nodes: /dev/nvidiaN is (195, N), nvidiactl (195, 255); no other."""
    if path == "/dev/nvidiactl":
        minor = 255
    elif path.removeprefix("/dev/nvidia").isdigit():
        minor = int(path.removeprefix("/dev/nvidia"))
    else:
        raise FileNotFoundError(2, "No such file or directory", path)
    rdev = os.makedev(195, minor)
    return os.stat_result((0o20666, 0, 0, 1, 0, 0, 0, 0, 0, 0), {"st_rdev": rdev})


def registry() -> CdiRegistry:
    return CdiRegistry([parse_spec(NVIDIA_YAML, "nvidia.yaml", fake_stat)])


def gpu_container(*cdi: str, env: tuple[str, ...] = (), annotations=None) -> pb.Container:
    pod = make_pod("p", namespace="ml")
    return make_container(
        pod, "c", env=("PATH=/bin", *env), cdi_devices=cdi, annotations=annotations
    )


def test_a_real_style_spec_resolves_with_the_hosts_device_numbers():
    spec = spec_from_request(gpu_container("nvidia.com/gpu=3"), registry())
    assert [(d.path, d.major, d.minor) for d in spec.devices] == [
        ("/dev/nvidiactl", 195, 255),
        ("/dev/nvidia3", 195, 3),
    ]
    assert "NVIDIA_VISIBLE_DEVICES=void" in spec.env
    assert any(m.destination.endswith("libcuda.so.550.54.15") for m in spec.mounts)
    assert openable_gpus(spec, INVENTORY) == {3}


def test_a_directory_of_yaml_and_json_specs(tmp_path):
    (tmp_path / "nvidia.yaml").write_text(NVIDIA_YAML)
    (tmp_path / "vendor.json").write_text(
        '{"cdiVersion": "0.6.0", "kind": "example.com/fpga", "devices": [{"name": "a", '
        '"containerEdits": {"env": ["FPGA=a"], "deviceNodes": [{"path": "/dev/fpga0", '
        '"type": "c", "major": 240, "minor": 0}]}}]}'
    )
    (tmp_path / "notes.txt").write_text("not a spec")
    cdi = load_dir(tmp_path, fake_stat)
    assert cdi.kinds == ("example.com/fpga", "nvidia.com/gpu")
    spec = spec_from_request(gpu_container("example.com/fpga=a", f"nvidia.com/gpu={UUID(3)}"), cdi)
    assert "FPGA=a" in spec.env and openable_gpus(spec, INVENTORY) == {3}


def test_an_unknown_name_fails_the_creation():
    with pytest.raises(InvalidInput, match=r"unresolvable CDI devices nvidia\.com/gpu=9"):
        spec_from_request(gpu_container("nvidia.com/gpu=3", "nvidia.com/gpu=9"), registry())
    with pytest.raises(InvalidInput, match="not a qualified name"):
        spec_from_request(gpu_container("gpu3"), registry())


@pytest.mark.parametrize(
    "text, message",
    [
        ("kind: nvidia.com/gpu\ndevices: [{containerEdits: {}}]", "every device needs a name"),
        ("devices: []", "kind is missing"),
        ("kind: nvidia\n", "not a qualified name"),
        (
            "kind: a.com/b\ndevices: [{name: x, containerEdits: {deviceNodes: [{path: "
            "/dev/nope}]}}]",
            "/dev/nope",
        ),
        ("[1, 2", "not a CDI spec"),
    ],
)
def test_broken_spec_files_are_named(text, message):
    with pytest.raises(InvalidInput, match=message):
        parse_spec(text, "bad.yaml", fake_stat)


def test_cdi_annotations_are_resolved_too():
    ctr = gpu_container(annotations={"cdi.k8s.io/nvidia-device-plugin_x": "nvidia.com/gpu=3"})
    spec = spec_from_request(ctr, registry())
    assert spec.cdi_devices == ["nvidia.com/gpu=3"] and openable_gpus(spec, INVENTORY) == {3}


def test_an_adjustment_applies_whole_and_cannot_take_back_a_cdi_device():
    spec = spec_from_request(gpu_container("nvidia.com/gpu=3", env=("A=1", "B=2")), registry())
    adjust = pb.ContainerAdjustment(
        annotations={"x": "1", "-io.kubernetes.cri.container-name": ""},
        env=[
            pb.KeyValue(key="-A"),
            pb.KeyValue(key="B", value="3"),
            pb.KeyValue(key="C", value="4"),
        ],
        mounts=[
            pb.Mount(destination="/data", source="/srv", type="bind"),
            pb.Mount(destination="-/proc"),
        ],
        linux=pb.LinuxContainerAdjustment(
            devices=[pb.LinuxDevice(path="/dev/nvidia5", type="c", major=195, minor=5)],
            resources=pb.LinuxResources(cpu=pb.LinuxCPU(cpus="0-3", mems="0")),
        ),
    )
    apply_adjustment(spec, adjust, registry())
    assert spec.annotations["x"] == "1"
    assert "io.kubernetes.cri.container-name" not in spec.annotations
    assert [e for e in spec.env if e[0] in "ABC" and e[1] == "="] == ["B=3", "C=4"]
    assert any(m.destination == "/data" for m in spec.mounts)
    assert not any(m.destination == "/proc" for m in spec.mounts)
    assert (spec.resources.cpu.cpus, spec.resources.cpu.mems) == ("0-3", "0")
    # An added device node opens one more GPU; nothing removes the CDI grant's.
    assert openable_gpus(spec, INVENTORY) == {3, 5}


def test_the_adjustments_cdi_devices_come_after_the_requests():
    spec = spec_from_request(gpu_container(), registry())
    assert openable_gpus(spec, INVENTORY) == set()
    apply_adjustment(
        spec,
        pb.ContainerAdjustment(CDI_devices=[pb.CDIDevice(name="nvidia.com/gpu=3")]),
        registry(),
    )
    assert spec.cdi_devices == ["nvidia.com/gpu=3"] and openable_gpus(spec, INVENTORY) == {3}


@pytest.mark.parametrize(
    "env, runtime, expected",
    [
        (
            "NVIDIA_VISIBLE_DEVICES=0,GPU-d0000000-0000-0000-0000-000000000002",
            NvidiaRuntime(),
            {0, 2},
        ),
        ("NVIDIA_VISIBLE_DEVICES=all", NvidiaRuntime(), set(range(8))),
        ("NVIDIA_VISIBLE_DEVICES=void", NvidiaRuntime(), set()),
        ("NVIDIA_VISIBLE_DEVICES=all", NvidiaRuntime(accept_env=False), set()),
    ],
)
def test_the_legacy_runtime_reads_the_env(env, runtime, expected):
    spec = spec_from_request(gpu_container(env=(env,)), None)
    assert openable_gpus(spec, INVENTORY, runtime) == expected


def test_device_list_mounts_win_over_the_env():
    ctr = gpu_container(env=("NVIDIA_VISIBLE_DEVICES=/var/run/nvidia-container-devices",))
    ctr.mounts.append(
        pb.Mount(
            destination=f"/var/run/nvidia-container-devices/{UUID(6)}",
            source="/dev/null",
            type="bind",
        )
    )
    spec = spec_from_request(ctr, None)
    assert openable_gpus(spec, INVENTORY) == {6}
    assert openable_gpus(spec, INVENTORY, NvidiaRuntime(accept_mounts=False)) == set()


def test_control_nodes_are_no_gpu():
    ctr = gpu_container()
    ctr.linux.devices.extend(
        [
            pb.LinuxDevice(path="/dev/nvidiactl", type="c", major=195, minor=255),
            pb.LinuxDevice(path="/dev/nvidia-modeset", type="c", major=195, minor=254),
        ]
    )
    assert openable_gpus(spec_from_request(ctr, None), INVENTORY) == set()
