"""The OCI hook reads a GPU grant from config.json in the forms NVIDIA's stack leaves
there: a MIG device as its parent's node and its /dev/nvidia-caps access nodes (the
device plugin's passDeviceSpecs and CDI strategies, NVIDIA's DRA driver: the runtime
resolved them); a privileged container's device nodes are no grant; a volume at the
device-list path counts only as the device plugin's /dev/null mount."""

from __future__ import annotations

from pathlib import Path

import pytest

from nri_plugin.errors import EXIT_OK, EXIT_REFUSED
from nri_plugin.topology.snapshot import load_snapshot

CTR = "/kubepods/pod-a/ctr-1"
NAME = "io.kubernetes.cri.container-name"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
MIG_BOX = EXAMPLES / "mig-box.yaml"
DGX = EXAMPLES / "dgx-like.yaml"
MIGS = load_snapshot(MIG_BOX).inventory.gpus[0].mig_instances
CAPS_MAJOR = 511  # the kernel's choice (/proc/devices nvidia-caps): known by path


def node(path: str, major: int, minor: int) -> dict:
    return {"path": path, "type": "c", "major": major, "minor": minor}


def mig_nodes(*minors: int) -> list[dict]:
    return [
        node("/dev/nvidia0", 195, 0),
        node("/dev/nvidiactl", 195, 255),
        *(node(f"/dev/nvidia-caps/nvidia-cap{m}", CAPS_MAJOR, m) for m in minors),
    ]


@pytest.fixture
def hook(tmp_path, h):
    root = tmp_path / "cg"
    cdir = h.fake_v2_tree(root, CTR)

    def run(inventory: Path, sla: str, **grant):
        config = tmp_path / "config.yaml"
        config.write_text(f"state-dir: {tmp_path / 'state'}\ngpu: {{inventory: {inventory}}}\n")
        bundle = h.write_bundle(
            tmp_path / "bundle", {NAME: "app", "sla.nri.io/pod": sla}, CTR, **grant
        )
        return h.run_inproc(
            h.state_json(bundle), config=str(config), cgroup_root=str(root), cache_dir="off"
        )

    return cdir, run


def test_a_mig_device_from_its_access_nodes(hook):
    cdir, run = hook
    out = run(MIG_BOX, "gpu: {mig: 1g.10gb}", devices=mig_nodes(*MIGS[3].caps_minors))
    assert out.exit_code == EXIT_OK, out.lines
    assert (cdir / "cpuset.mems").read_text().strip() == "0"
    out = run(MIG_BOX, "gpu: {mig: 1g.10gb}", devices=mig_nodes(*MIGS[1].caps_minors))
    assert out.exit_code == EXIT_REFUSED
    assert (
        f"asks for a MIG 1g.10gb device; none is granted (granted: MIG 2g.20gb {MIGS[1].uuid}"
    ) in out.lines[0]
    # one of a MIG device's two access nodes opens nothing: no MIG device, no whole GPU
    out = run(MIG_BOX, "gpu: {mig: 1g.10gb}", devices=mig_nodes(MIGS[3].caps_minors[0]))
    assert out.exit_code == EXIT_REFUSED and "none is granted" in out.lines[0]


def test_a_privileged_containers_device_nodes_are_no_grant(hook):
    _cdir, run = hook
    every = [node(f"/dev/nvidia{i}", 195, i) for i in range(8)]
    out = run(
        DGX,
        "gpu: {count: 1}",
        devices=every,
        resources={"devices": [{"allow": True, "access": "rwm"}]},
    )
    assert out.exit_code == EXIT_REFUSED
    assert "no device plugin granted this container a GPU" in out.lines[0]
    # the same nodes in a container whose device cgroup lists them: its grant
    out = run(
        DGX,
        "gpu: {count: 8}",
        devices=every,
        resources={
            "devices": [
                {"allow": False, "access": "rwm"},
                *(
                    {"allow": True, "type": "c", "major": 195, "minor": i, "access": "rw"}
                    for i in range(8)
                ),
            ]
        },
    )
    assert out.exit_code == EXIT_OK, out.lines


def test_only_the_device_plugins_null_mount_is_a_grant(hook):
    _cdir, run = hook
    path = "/var/run/nvidia-container-devices/all"
    out = run(
        DGX,
        "gpu: {count: 8}",
        mounts=[{"destination": path, "source": "/var/lib/kubelet/pods/u/volumes/empty-dir/all"}],
    )
    assert out.exit_code == EXIT_REFUSED
    assert "no device plugin granted this container a GPU" in out.lines[0]
    out = run(DGX, "gpu: {count: 8}", mounts=[{"destination": path, "source": "/dev/null"}])
    assert out.exit_code == EXIT_OK, out.lines
