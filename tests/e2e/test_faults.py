"""Single faults against `nri-sla run` and a real containerd (issue #12): the plugin up
before containerd and its socket, a plugin slower than the runtime's request timeout, a
cgroup removed between create and start, the node config changed under running pods.

The plugin runs with the 8 fake GPUs of e2e_gpu.py, granted by the kubelet's books
(e2e_service.py): the GPU gauges say whom nri-sla counts as their holders. Tests that
read "created unenforced" (log line and nri_sla_unenforced_containers_total) depend on
issue #12's plugin side.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from tests.e2e.e2e_cgroup import CGROUP_ROOT, read_file, whole_disk
from tests.e2e.e2e_checks import only_free_gpus_left, reported_unenforced, syncs
from tests.e2e.e2e_config import shipped_settings
from tests.e2e.e2e_gpu import NoGpuLeft
from tests.e2e.e2e_metrics import ready
from tests.e2e.e2e_rollout import APPLIED
from tests.e2e.e2e_service import SlaService, visible_gpus
from tests.e2e.e2e_sla_cases import GREEDY, KUBELET_LIMITS, triple

pytestmark = pytest.mark.e2e

POD_SLA = {"sla.nri.io/pod": "cpu: {limit: 0.5, period: 100ms}\nmemory: {max: 256Mi}\n"}
REMOVE_CGROUP = "e2e.nri-sla.io/remove-cgroup"  # probe_plugin.py --sabotage


@pytest.fixture
def sla(cluster, plugins, sla_plugin_argv) -> SlaService:
    return SlaService(cluster, plugins, sla_plugin_argv)


def unenforced(cluster, pc) -> None:
    """The container runs with nothing of its SLA: no record, no quota."""
    assert APPLIED not in cluster.spec_annotations(pc)
    assert cluster.cgroup(pc).cpu_quota == -1


def test_plugin_up_before_containerd_and_its_socket(cluster, sla):
    early = cluster.run_pod("early", POD_SLA)  # no plugin yet: created unenforced
    cluster.kill()  # SIGKILL: containerd's NRI socket file stays behind, nobody listening
    stale = cluster.nri_sock.exists()
    sla.configure(log={"level": "debug"})  # every failed dial, not only the first
    first = sla.start(wait=False)
    dial = r"cannot connect to NRI socket \S+: "
    if stale:
        print("evidence: plugin log:", first.wait_output(dial + "Connection refused")[0])
    cluster.nri_sock.unlink(missing_ok=True)
    print(
        "evidence: plugin log:", first.wait_output(dial + "No such file or directory", count=2)[-1]
    )
    assert ready(sla.port) == 503  # /readyz: not registered
    assert sla.scrape().get("nri_sla_registered") == 0

    cluster.start()  # the socket appears; the plugin's next dial registers
    sla.wait_registered()
    summary = syncs(first)[0]
    assert (summary.pods, summary.containers, summary.rebuilt, summary.unenforced) == (1, 1, 0, 1)
    assert reported_unenforced(first) == {early.container_id}
    assert ready(sla.port) == 200
    after = cluster.run_pod("after", POD_SLA)
    assert triple(cluster.cgroup(after)) == (50000, 100000, 268435456)
    unenforced(cluster, early)


def request_timeout(cluster) -> float:
    """containerd's plugin_request_timeout, from the shipped config the harness uses."""
    text = shipped_settings(cluster.major)[0]["plugin_request_timeout"]
    assert text.endswith("s") and not text.endswith("ms"), text
    return float(text[:-1])


def test_plugin_slower_than_the_runtime_request_timeout(cluster, sla):
    timeout = request_timeout(cluster)
    plugin = sla.start()
    holder = sla.run_gpu_pod(
        "holder", 2, {"sla.nri.io/pod": ("cpu: {limit: 0.3}\ngpu: {count: 2, align: false}\n")}
    )
    held = set(visible_gpus(holder))
    assert len(held) == 2

    sla.signal(signal.SIGSTOP)  # a handler that does not answer in time
    try:
        files = cluster.pod_files(
            "slow",
            {"sla.nri.io/pod": ("cpu: {limit: 0.2}\ngpu: {count: 2, align: false}\n")},
            grant=sla.books.allocate("slow", 2),
        )
        pod_id = cluster.run_sandbox(files)
        t0 = time.monotonic()
        cid = cluster.create_container(pod_id, files)
        waited = time.monotonic() - t0
        cluster.crictl("start", cid)
        slow = cluster.inspect(pod_id, cid)
        print(
            f"evidence: crictl create waited {waited:.2f}s on a stopped plugin "
            f"(plugin_request_timeout {timeout}s)"
        )
        assert waited >= timeout * 0.9
        print(
            "evidence: containerd log:",
            *cluster.wait_log(
                r"closing plugin \S*nri-sla, failed to handle CreateContainer request: "
                r"context deadline exceeded"
            ),
        )
        # Dropped: the next container does not wait at all.
        t0 = time.monotonic()
        quick = cluster.run_pod("quick", {"sla.nri.io/pod": "cpu: {limit: 0.2}\n"})
        assert time.monotonic() - t0 < timeout
    finally:
        sla.signal(signal.SIGCONT)

    # The plugin reads the stale request and its closed connection, dials again, and
    # Synchronize rebuilds its state from the live containers alone.
    sla.wait_registered()
    print("evidence: plugin log:", plugin.wait_output(r"NRI connection lost")[0])
    summary = syncs(plugin, count=2)[1]
    assert (summary.rebuilt, summary.ignored, summary.unenforced) == (1, 0, 2)
    assert reported_unenforced(plugin) == {slow.container_id, quick.container_id}
    unenforced(cluster, slow)
    unenforced(cluster, quick)
    # Without the plugin the kubelet's grant still reached the container: 2 GPUs, learnt
    # as held from Synchronize, not from the stale request.
    held |= set(visible_gpus(slow))
    assert len(held) == 4
    assert cluster.cgroup(holder).cpu_quota == 30000
    assert sla.scrape().get("nri_sla_unenforced_containers_total") == 2
    sla.assert_gpus_counted(4)
    only_free_gpus_left(sla, held)


def test_direct_write_into_a_cgroup_removed_before_start(cluster, plugins, sla):
    """A second plugin (index 10, before nri-sla) removes the container's blkio cgroup at
    StartContainer; nri-sla's direct blkio writes then find no cgroup."""
    if cluster.cgroup_v2:
        pytest.skip(
            "v1 only: the direct writes here are blkio files (v2 writes io.max through the runtime)"
        )
    disk = whole_disk()
    if disk is None:
        pytest.skip("no whole block disk under /sys/block to throttle")
    saboteur = plugins.start_probe(cluster, sabotage=True)
    cluster.wait_plugin_synchronized("10-e2e-probe")
    plugin = sla.start()
    io = f"io:\n  max:\n    - {{device: '{disk}', read-bps: 10Mi, write-iops: 100}}\n"

    with pytest.raises(cluster.Error) as err:
        sla.run_gpu_pod(
            "hard",
            8,
            {"sla.nri.io/pod": io + "gpu: {count: 8, align: false}\n", REMOVE_CGROUP: "blkio"},
        )
    message = str(err.value)
    print("evidence: refused:", message)
    print("evidence: probe:", saboteur.wait_output(r"^removed .*/blkio/")[0])
    assert "crictl start" in message and "NRI container start failed" in message
    assert "blkio.throttle.read_bps_device" in message and "does not exist" in message
    # Nothing of it stays: the runtime deleted the task (its cgroups with it); the failed
    # pod removed, its 8 GPUs go to the next pod, and nri-sla counts them for it alone.
    assert len(visible_gpus(sla.run_gpu_pod("next", 8))) == 8
    sla.assert_gpus_counted(8)

    soft = cluster.run_pod(
        "soft",
        {
            "sla.nri.io/pod": ("enforcement: soft\nmemory: {high: 128Mi, max: 256Mi}\n" + io),
            REMOVE_CGROUP: "blkio",
        },
    )
    rel = soft.cgroups_path.lstrip("/")
    assert not (CGROUP_ROOT / "blkio" / rel).exists()
    # What could be written is in force; the blkio rule is nowhere, not on the pod either.
    assert cluster.cgroup_file(soft, "memory", "memory.soft_limit_in_bytes") == "134217728"
    assert cluster.cgroup(soft).memory_limit == 268435456
    pod_blkio = CGROUP_ROOT / "blkio" / Path(rel).parent
    assert read_file(pod_blkio / "blkio.throttle.read_bps_device") == ""
    print(
        "evidence: plugin log:",
        *plugin.wait_output(r"nri-e2e/soft work: cannot write .*blkio.throttle.read_bps_device"),
    )


def test_node_config_changed_under_running_pods(cluster, sla):
    """soft -> hard and GPUs taken from the pods' namespace, with pods running: running
    containers keep what the kernel holds; new ones get the new policy; a record the
    policy no longer allows is still held (reported as out of policy), so nri-sla still
    counts its GPUs and sees them opened by nobody else."""
    sla.configure(enforcement="soft", permissions={})
    before = sla.start()
    trainer = sla.run_gpu_pod("trainer", 4)
    trainer_gpus = set(visible_gpus(trainer))
    greedy = cluster.run_pod("greedy", {"sla.nri.io/pod": GREEDY}, resources=KUBELET_LIMITS)
    assert triple(cluster.cgroup(greedy)) == (50000, 100000, 268435456)  # clamped (soft)

    sla.stop()
    sla.configure(enforcement="hard", permissions={"gpus": ["team-b"]})
    after = sla.start()
    summary = syncs(after)[0]
    # The trainer's record holds GPUs its namespace may no longer ask for: held, reported.
    assert (summary.rebuilt, summary.ignored) == (2, 0)
    breach = after.wait_output(r"record outside the node policy")
    print("evidence: plugin log:", *breach)
    assert trainer.container_id in breach[0] and "may no longer use" in breach[0]
    assert sla.scrape().get("nri_sla_records_out_of_policy_total") == 1
    sla.assert_gpus_counted(4)
    # Running containers: untouched.
    assert triple(cluster.cgroup(greedy)) == (50000, 100000, 268435456)
    assert set(visible_gpus(cluster.inspect(trainer.pod_id, trainer.container_id))) == (
        trainer_gpus
    )
    # New containers: the new policy.
    with pytest.raises(cluster.Error) as hard:
        cluster.run_pod("greedy-again", {"sla.nri.io/pod": GREEDY}, resources=KUBELET_LIMITS)
    assert "cpu.limit: 64 exceeds the 0.5 CPUs the runtime granted" in str(hard.value)
    with pytest.raises(cluster.Error) as revoked:
        sla.run_gpu_pod("gpu-again", 1)
    print("evidence: refused:", revoked.value)
    assert "namespace 'nri-e2e' may not use gpus on this node" in str(revoked.value)
    # The namespace that may ask for GPUs: the kubelet has 4 left (never the trainer's),
    # and a team-b pod granted them opens exactly those.
    with pytest.raises(NoGpuLeft):
        sla.run_gpu_pod("team-b-8", 8, namespace="team-b")
    team_b = set(visible_gpus(sla.run_gpu_pod("team-b", 4, namespace="team-b")))
    assert len(team_b) == 4 and not team_b & trainer_gpus
    sla.assert_gpus_counted(8)
    assert "Traceback" not in before.output() + after.output()
