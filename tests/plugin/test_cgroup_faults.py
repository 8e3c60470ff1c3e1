"""cgroup writes the kernel refuses at StartContainer (the plugin's direct writes on v1),
over a real unix socket to the runtime simulator on a fake v1 tree.

The kernel's refusals are injected at the one writer's write call (CgroupWriter._write,
patched here only): a plain file cannot answer EBUSY. Hard mode fails the start, leaves
none of its writes behind and frees the container's GPUs at once; soft mode starts it
with a warning and keeps what held. tests/enforce/test_real_cgroups.py shows the same
undo against real v1 cgroups (EINVAL for real).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import shutil

import pytest

from nri_plugin.enforce.cgfile import CgroupWriter
from nri_plugin.errors import REFUSED, SlaFailure
from nri_plugin.nri import events as ev
from nri_plugin.nri.errors import Code
from nri_plugin.plugin import StartRefused
from nri_plugin.simulated.runtime import PluginCallError, make_container, make_pod
from tests.support.plugin_helpers import gpu_grant, permissive_node, plugin_session

MiB = 1024**2
IO_SLA = """\
gpu: {count: 1}
io:
  weight: 500
  max:
  - {device: /dev/nvme0n1, read-bps: 100Mi, write-iops: 1000}
"""
# What a new v1 blkio cgroup shows before anything is written (bfq weight: the default).
BEFORE = {
    "blkio.bfq.weight": "100",
    "blkio.throttle.read_bps_device": "",
    "blkio.throttle.write_iops_device": "",
}


def refuse(monkeypatch, file: str, code: int) -> None:
    """The kernel answers `code` to every write of `file`."""
    real = CgroupWriter._write

    def write(self, controller: str, path: str, value: str) -> None:
        if os.path.basename(path) == file:
            raise OSError(code, os.strerror(code))
        real(self, controller, path, value)

    monkeypatch.setattr(CgroupWriter, "_write", write)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


async def start_one(tmp_path, v1_tree, enforcement: str, before_start=None):
    """Create and start one pod with IO_SLA; (StartContainer's error or None, the
    container's blkio files afterwards, the holders of its granted GPU afterwards)."""
    async with plugin_session(permissive_node(1, v1_tree), tmp_path) as (_s, session, plugin):
        pod = make_pod(
            "io", annotations={"sla.nri.io/pod": IO_SLA, "sla.nri.io/enforcement": enforcement}
        )
        ctr = make_container(pod, "c", cdi_devices=gpu_grant(0))
        await session.create_container(pod, ctr)
        blkio = v1_tree.add_cgroup(ctr.linux.cgroups_path)["blkio"]
        for name, value in BEFORE.items():
            (blkio / name).write_text(value)
        if before_start is not None:
            before_start(blkio)
        error = None
        try:
            # StartContainer alone: no StopContainer follows, so a release seen below
            # is the refusal's own.
            await session.event(ev.START_CONTAINER, pod, ctr)
        except PluginCallError as exc:
            error = exc
        files = {n: (blkio / n).read_text() for n in BEFORE} if blkio.exists() else None
        holders = plugin.node.allocator.gpus_in_use().get(0, ())
        return error, files, "held" if holders == (ctr.id,) else holders


@pytest.mark.parametrize("code", [errno.EINVAL, errno.EBUSY, errno.EPERM])
def test_hard_refused_write_undoes_the_others_and_frees_the_gpu(
    tmp_path, v1_tree, monkeypatch, code
):
    refuse(monkeypatch, "blkio.throttle.write_iops_device", code)
    error, files, gpus_after = run(start_one(tmp_path, v1_tree, "hard"))
    assert error is not None and error.method == "StartContainer"
    assert error.code == Code.UNKNOWN  # StartRefused is raised as it is (kind refused)
    assert os.strerror(code) in error.message
    assert "blkio.throttle.write_iops_device" in error.message
    assert "undone: blkio.throttle.read_bps_device, blkio.bfq.weight" in error.message
    # Nothing of the SLA stays: the weight is back, the throttle rule removed (a v1 kernel
    # drops the rule written with 0; this plain file shows that write).
    assert files == {
        "blkio.bfq.weight": "100",
        "blkio.throttle.read_bps_device": "259:0 0",
        "blkio.throttle.write_iops_device": "",
    }
    assert gpus_after == ()  # the refused container no longer holds its GPU


def test_a_start_refusal_is_a_refused_failure():
    refusal = StartRefused("cannot write '1' to /sys/fs/cgroup/x: Device or resource busy")
    assert isinstance(refusal, SlaFailure) and refusal.kind == REFUSED
    assert refusal.reason == "cgroup"


def test_soft_refused_write_warns_and_keeps_the_rest(tmp_path, v1_tree, monkeypatch, caplog):
    caplog.set_level(logging.WARNING, logger="nri_sla.plugin")
    refuse(monkeypatch, "blkio.throttle.write_iops_device", errno.EBUSY)
    error, files, gpus_after = run(start_one(tmp_path, v1_tree, "soft"))
    assert error is None
    assert files["blkio.bfq.weight"] != "100"
    assert files["blkio.throttle.read_bps_device"] == f"259:0 {100 * MiB}"
    assert files["blkio.throttle.write_iops_device"] == ""
    assert any("write_iops_device" in m and "Device or resource busy" in m for m in caplog.messages)
    assert gpus_after == "held"  # it runs and keeps its GPU


@pytest.mark.parametrize("enforcement", ["hard", "soft"])
def test_cgroup_removed_between_create_and_start(tmp_path, v1_tree, enforcement):
    error, files, gpus_after = run(
        start_one(tmp_path, v1_tree, enforcement, before_start=shutil.rmtree)
    )
    assert files is None
    if enforcement == "hard":
        assert error is not None and "cgroup directory does not exist" in error.message
        assert gpus_after == ()
    else:
        assert error is None and gpus_after == "held"
