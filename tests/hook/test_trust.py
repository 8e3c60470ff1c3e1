"""What the hook believes, and what a pod author cannot make it believe: the
namespace only from the runtime's own keys, the cgroup from where the runtime put the
process, never a cgroup holding other processes, io.max devices only under /dev.

In-process runs on fake cgroup trees with a fake /proc; tests/hook/test_runc.py repeats
the cases under the real runc, tests/vm/guest/test_hook_v2.py on a real cgroup v2 kernel.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from nri_plugin.config.values import NodeConfig, Permissions
from nri_plugin.core.decision import decide
from nri_plugin.core.request import ContainerRequest
from nri_plugin.errors import EXIT_INVALID, EXIT_OK, EXIT_REFUSED
from nri_plugin.hook.inputs import identify
from tests.support.plugin_helpers import plain_node

CRI_TYPE = "io.kubernetes.cri.container-type"
CRI_NS = "io.kubernetes.cri.sandbox-namespace"
CRI_NAME = "io.kubernetes.cri.container-name"
CRIO_TYPE = "io.kubernetes.cri-o.ContainerType"
CRIO_NS = "io.kubernetes.cri-o.Namespace"  # CRI-O sets it on pod sandboxes only
KUBE_NS = "io.kubernetes.pod.namespace"  # kubelet's label: CRI-O's namespace key
KUBE_NAME = "io.kubernetes.container.name"
CTR = "/kubepods/pod-a/ctr-1"
PID = 4242

CONTAINERD = {CRI_TYPE: "container", CRI_NAME: "app", CRI_NS: "prod"}
CRIO = {CRIO_TYPE: "container", KUBE_NAME: "app", KUBE_NS: "prod"}


@pytest.mark.parametrize(
    ("annotations", "namespace", "distrust"),
    [
        (CONTAINERD, "prod", ""),
        (CRIO, "prod", ""),
        ({**CONTAINERD, KUBE_NS: "prod"}, "prod", ""),  # an agreeing copy: fine
        # A pod's annotation under CRI-O, named like containerd's key.
        ({**CRIO, CRI_NS: "rt-ok"}, "", "both containerd's"),
        # containerd copied a pod annotation named like kubelet's label (pod_annotations glob).
        (
            {**CONTAINERD, KUBE_NS: "rt-ok"},
            "",
            "io.kubernetes.pod.namespace='rt-ok' contradicts containerd's",
        ),
        ({**CONTAINERD, "io.kubernetes.cri-o.Devices": "/dev/fuse"}, "", "both containerd's"),
        (
            {**CRIO, CRIO_NS: "rt-ok"},
            "",
            "io.kubernetes.cri-o.Namespace='rt-ok' contradicts "
            "cri-o's io.kubernetes.pod.namespace='prod'",
        ),
        # podman: no Kubernetes namespace; `--annotation` cannot invent one.
        ({"io.container.manager": "libpod"}, "", ""),
        ({KUBE_NS: "rt-ok"}, "", "io.kubernetes.pod.namespace is set but no runtime's"),
        ({CRI_NS: "rt-ok", CRI_NAME: "app"}, "", "is set but no runtime's"),
    ],
)
def test_identify_believes_only_the_runtimes_own_keys(annotations, namespace, distrust):
    t = identify("c1", annotations)
    assert t.namespace == namespace
    assert (distrust in t.distrust) if distrust else t.distrust == ""
    assert t.name == ("app" if {CRI_NAME, KUBE_NAME} & set(annotations) else "c1")


def test_identify_names_and_sandboxes_per_runtime():
    assert identify("c", {**CRIO, "io.kubernetes.pod.name": "web-0"}).pod == "web-0"
    assert identify("c", {**CRIO, CRIO_TYPE: "sandbox"}).sandbox
    assert identify("c", {**CONTAINERD, CRI_TYPE: "sandbox"}).sandbox
    # containerd's own name key, not a copied kubelet label.
    assert identify("c", {**CONTAINERD, KUBE_NAME: "other"}).name == "app"
    long = identify("c", {**CONTAINERD, KUBE_NS: "x" * 300}).distrust
    assert len(long) < 200 and "..." in long  # a pod's text is not echoed unbounded


# ------------------------------------------------------------------ namespace permissions


@pytest.fixture
def node(tmp_path, h):
    """A fake v2 node whose config lets only team-* namespaces use io.max, with a fake
    /proc where PID sits in the container's cgroup. run(annotations, **kw) -> Outcome."""
    root = tmp_path / "cg"
    cdir = h.fake_v2_tree(root, CTR)
    config = tmp_path / "config.yaml"
    config.write_text("enforcement: hard\npermissions:\n  io-max: ['team-*']\n")
    proc = h.fake_proc(tmp_path / "proc", PID, f"0::{CTR}\n")

    def run(annotations, cgroups_path=CTR, pid=PID, **opts):
        bundle = h.write_bundle(tmp_path / "bundle", annotations, cgroups_path)
        opts.setdefault("config", str(config))
        opts.setdefault("cgroup_root", str(root))
        opts.setdefault("proc_root", proc)
        return h.run_inproc(h.state_json(bundle, pid=pid), **opts)

    return root, cdir, run


def _io_max_sla(h, soft: bool = False) -> str:
    _dev, majmin = h.first_disk()
    mode = "enforcement: soft\n" if soft else ""
    return (
        f"{mode}cpu:\n  limit: 0.5\nio:\n  max:\n    - device: '{majmin}'\n      read-bps: 10Mi\n"
    )


def test_runtime_namespace_grants_io_max(node, h):
    _root, cdir, run = node
    for runtime in (CONTAINERD, CRIO):
        ns_key = CRI_NS if runtime is CONTAINERD else KUBE_NS
        out = run({**runtime, ns_key: "team-a", "sla.nri.io/pod": _io_max_sla(h)})
        assert (out.exit_code, out.lines) == (EXIT_OK, [])
        assert (cdir / "io.max").read_text().startswith(h.first_disk()[1])
        (cdir / "io.max").write_text("")


def test_spoofed_namespace_key_is_refused_in_hard_mode(node, h):
    _root, cdir, run = node
    # CRI-O's spec with the pod's own "io.kubernetes.cri.sandbox-namespace: team-a".
    out = run({**CRIO, KUBE_NS: "default", CRI_NS: "team-a", "sla.nri.io/pod": _io_max_sla(h)})
    assert out.exit_code == EXIT_REFUSED
    [line] = out.lines
    assert "sla.nri.io/pod: io.max: namespace '' may not use io-max" in line
    assert "the pod's namespace is unknown (the spec carries both containerd's" in line
    assert (cdir / "io.max").read_text() == "" and "max" in (cdir / "cpu.max").read_text()


def test_spoofed_namespace_key_drops_io_max_in_soft_mode(node, h):
    _root, cdir, run = node
    out = run(
        {
            **CONTAINERD,
            CRI_NS: "default",
            KUBE_NS: "team-a",
            "sla.nri.io/pod": _io_max_sla(h, soft=True),
        }
    )
    assert out.exit_code == EXIT_OK
    assert any("may not use io-max" in line for line in out.lines)
    assert any(
        "the pod's namespace is unknown (io.kubernetes.pod.namespace='team-a' "
        "contradicts containerd's io.kubernetes.cri.sandbox-namespace='default')" in line
        for line in out.lines
    ), out.lines
    assert (cdir / "io.max").read_text() == ""
    assert (cdir / "cpu.max").read_text().split() == ["50000", "100000"]  # the rest applies


# ------------------------------------------------------------------ where the cgroup is


def test_the_process_cgroup_wins_over_the_spec(node, h, tmp_path):
    root, cdir, run = node
    sla = {**CONTAINERD, "sla.nri.io/pod": "memory:\n  max: 64Mi\n"}
    # runc takes a relative cgroupsPath from its own cgroup: only the pid knows where.
    out = run(sla, cgroups_path="ctr-1")
    assert (out.exit_code, out.lines) == (EXIT_OK, [])
    assert (cdir / "memory.max").read_text().strip() == str(64 << 20)
    # Without the pid the hook can only take the path from the hierarchy root: not there.
    out = run(sla, cgroups_path="ctr-1", pid=None)
    assert out.exit_code == EXIT_INVALID and "does not exist" in out.lines[0]
    # createContainer runs in the container's pid namespace: the state's pid (runc: 1) is
    # not ours to look up, so the spec's path is used there.
    (cdir / "memory.max").write_text("max\n")
    out = run(sla, cgroups_path=CTR, pid=1, stage="createContainer")
    assert (out.exit_code, out.lines) == (EXIT_OK, [])
    assert (cdir / "memory.max").read_text().strip() == str(64 << 20)
    out = run(sla, pid=PID + 1)
    assert out.exit_code == EXIT_INVALID
    assert f"cannot read {tmp_path}/proc/{PID + 1}/cgroup" in out.lines[0]
    assert root.joinpath("memory.max").exists() is False


@pytest.mark.parametrize("lookup", ["pid", "cgroupsPath"])
def test_a_cgroup_holding_other_processes_is_refused_v2(node, h, tmp_path, lookup):
    root, cdir, run = node
    pod = root / "kubepods" / "pod-a"
    (pod / "memory.max").write_text("max\n")
    (cdir / "cgroup.events").write_text("populated 1\nfrozen 0\n")  # ctr-1 runs
    h.fake_proc(tmp_path / "proc", PID, "0::/kubepods/pod-a\n")
    sla = {**CONTAINERD, "sla.nri.io/pod": "memory:\n  max: 64Mi\n"}
    out = run(sla, cgroups_path="/kubepods/pod-a", pid=PID if lookup == "pid" else None)
    assert out.exit_code == EXIT_INVALID
    assert f"{cdir} below it holds other processes" in out.lines[0]
    assert (pod / "memory.max").read_text() == "max\n"
    (cdir / "cgroup.events").write_text("populated 0\nfrozen 0\n")  # nobody left below
    out = run(sla, cgroups_path="/kubepods/pod-a", pid=PID if lookup == "pid" else None)
    assert (out.exit_code, out.lines) == (EXIT_OK, [])


def test_a_cgroup_holding_other_processes_is_refused_v1(tmp_path, h):
    """v1 has no populated flag: cgroup.procs is searched down the tree."""
    root = tmp_path / "cg"
    for c in ("cpu", "memory"):
        deep = root / c / "kubepods" / "pod-a" / "ctr-1" / "sub"
        deep.mkdir(parents=True)
        for d in (root / c / "kubepods" / "pod-a", deep.parent, deep):
            (d / "cgroup.procs").write_text("")
        (root / c / "kubepods" / "pod-a" / "memory.limit_in_bytes").write_text("-1\n")
    (root / "memory" / "kubepods" / "pod-a" / "ctr-1" / "sub" / "cgroup.procs").write_text("777\n")
    bundle = h.write_bundle(
        tmp_path / "b",
        {**CONTAINERD, "sla.nri.io/pod": "memory:\n  max: 64Mi\n"},
        "/kubepods/pod-a",
    )
    out = h.run_inproc(h.state_json(bundle), cgroup_root=str(root))
    assert out.exit_code == EXIT_INVALID
    assert "memory/kubepods/pod-a/ctr-1/sub below it holds other processes" in out.lines[0]


# ------------------------------------------------------------------ io.max devices


def test_the_plugin_resolves_devices_the_same_way():
    """NodeState's default resolver (the plugin's) is the hook's: one message for a
    character device and for a missing one."""
    node = plain_node(NodeConfig(permissions=Permissions(io_max=("*",))))
    messages = set()
    for device in ("/dev/null", "/dev/nri-sla-no-such-device"):
        sla = f"io:\n  max:\n    - device: {device}\n      read-bps: 1Mi\n"
        d = decide(node, ContainerRequest({"sla.nri.io/pod": sla}, "app", namespace="prod"))
        assert d.error is not None and d.error.kind == "refused"
        messages.add(str(d.error).replace(device, "<dev>"))
    assert messages == {
        "sla.nri.io/pod: io.max[0].device: io device '<dev>': is not a block device under /dev"
    }


def test_hook_answers_every_unusable_device_alike(node, h, tmp_path):
    _root, _cdir, run = node
    real = Path("/dev/null")
    answers = {}
    for device in (
        str(real),
        "/dev/nri-sla-no-such-device",
        "/dev/../etc/shadow",
        "/etc/shadow",
        "/nonexistent",
    ):
        sla = f"io:\n  max:\n    - device: '{device}'\n      read-bps: 1Mi\n"
        out = run({**CONTAINERD, CRI_NS: "team-a", "sla.nri.io/pod": sla})
        answers[device] = (out.exit_code, out.lines[0].replace(device, "<dev>"))
    # Under /dev: the resolver's one answer (refused); outside: the SLA schema's, before
    # anything is looked up (invalid). Existence changes neither.
    assert (
        answers["/dev/null"]
        == answers["/dev/nri-sla-no-such-device"]
        == (
            EXIT_REFUSED,
            "nri-sla hook: sla.nri.io/pod: io.max[0].device: io device '<dev>': "
            "is not a block device under /dev",
        )
    )
    assert answers["/etc/shadow"] == answers["/nonexistent"] == answers["/dev/../etc/shadow"]
    assert answers["/etc/shadow"][0] == EXIT_INVALID
