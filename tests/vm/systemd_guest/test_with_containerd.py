"""The production shape, end to end (inside the systemd guest, when containerd is supplied):
containerd as a systemd service with the packaged containerd config (systemd cgroup
driver, NRI, the fail-closed validator on 2.x, the OCI hook in the base runtime spec),
the packaged nri-sla.service enabled the way docs/install.md says, and kubelet-shaped pods
(cgroup parent `kubepods-burstable-pod<uid>.slice`) created with crictl.

Runs only with the binaries of tests/e2e (NRI_SLA_CONTAINERD, NRI_SLA_CRICTL, NRI_SLA_RUNC
>= 1.2; the host side binds their directories into the guest); otherwise it skips. The
config is the shipped file, unchanged: its paths are the standard ones, which is where
this guest puts everything (binaries linked into /usr/local, the package's
/etc/nri-sla/base-runtime-spec.json). Two things differ from a real node, both for the
emulated machine: the sandbox image is the e2e busybox image imported under the default
sandbox image's name (no registry), and the base runtime spec's hook time limits are
raised (Python starts in seconds under TCG, not milliseconds).
The tests run in file order and share one containerd (module fixture).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from nri_plugin.commands.basespec import find_ctr, node_default_spec, with_hook
from nri_plugin.commands.containerd_dropin import parse_version

MIB = 1 << 20
REPO = Path(__file__).resolve().parents[3]
ENDPOINT = "unix:///run/containerd/containerd.sock"
SHIPPED = {
    2: REPO / "config.toml.example",
    1: REPO / "packaging" / "containerd" / "config-1.7.toml.example",
}
# containerd's own unit, as its repository ships it (the settings that matter here):
# Type=notify (ready once serving), Delegate=yes (the shims and containers below it are
# its own business: the systemd driver puts containers in scopes of their own anyway),
# KillMode=process (stopping containerd leaves the containers running).
CONTAINERD_UNIT = """[Unit]
Description=containerd container runtime (nri-sla systemd guest)
After=network.target local-fs.target dbus.service

[Service]
ExecStart=/usr/local/bin/containerd
Type=notify
Delegate=yes
KillMode=process
Restart=always
RestartSec=5
LimitNPROC=infinity
LimitCORE=infinity
TasksMax=infinity
OOMScoreAdjust=-999

[Install]
WantedBy=multi-user.target
"""
UNIT = "nri-sla.service"
TOLERATE = "tolerate-missing-nri-plugins.noderesource.dev"  # the shipped config's key
SLA = "cpu: {limit: 0.5}\nmemory: {max: 128Mi}\n"


def _binaries() -> dict[str, Path]:
    env = os.environ
    if not all(env.get(k) for k in ("NRI_SLA_CONTAINERD", "NRI_SLA_CRICTL", "NRI_SLA_RUNC")):
        pytest.skip(
            "set NRI_SLA_CONTAINERD (containerd 1.7/2.x), NRI_SLA_CRICTL and "
            "NRI_SLA_RUNC (>= 1.2) to run the containerd e2e in the systemd guest"
        )
    containerd = Path(env["NRI_SLA_CONTAINERD"])
    bins = {
        "/usr/local/bin/containerd": containerd,
        "/usr/local/bin/containerd-shim-runc-v2": Path(
            env.get("NRI_SLA_CONTAINERD_SHIM") or containerd.with_name("containerd-shim-runc-v2")
        ),
        "/usr/local/bin/ctr": Path(env.get("NRI_SLA_CTR") or containerd.with_name("ctr")),
        "/usr/local/bin/crictl": Path(env["NRI_SLA_CRICTL"]),
        # First on the service PATH (/usr/local/sbin), ahead of Debian's older runc.
        "/usr/local/sbin/runc": Path(env["NRI_SLA_RUNC"]),
    }
    missing = [str(p) for p in bins.values() if not os.access(p, os.X_OK)]
    if missing:
        pytest.skip(f"not executable in the guest: {', '.join(missing)}")
    return bins


def sh(*argv: str, timeout: float = 120, check: bool = True) -> str:
    res = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if check and res.returncode != 0:
        raise AssertionError(
            f"{' '.join(argv)} failed ({res.returncode}): "
            f"{res.stderr.strip() or res.stdout.strip()}"
        )
    return res.stdout


def crictl(*args: str, check: bool = True, timeout: float = 180) -> str:
    return sh(
        "crictl",
        "--runtime-endpoint",
        ENDPOINT,
        "--timeout",
        "150s",
        *args,
        check=check,
        timeout=timeout,
    )


def journal(unit: str, since: str = "") -> str:
    return sh(
        "journalctl", "-u", unit, "-o", "cat", "--no-pager", *(("--cursor", since) if since else ())
    )


@dataclasses.dataclass
class Node:
    major: int  # containerd's major version
    version: str
    image: str  # the sandbox image's name (the busybox image imported under it)
    work: Path
    pods: dict[str, dict] = dataclasses.field(default_factory=dict)  # name -> inspect

    def run_pod(self, name: str, annotations: dict[str, str]) -> dict:
        """A kubelet-shaped pod (systemd driver: the pod's slice as cgroup parent, host
        network) with one started container; its `crictl inspect`."""
        uid = str(uuid.uuid4())
        d = self.work / name
        d.mkdir(parents=True)
        pod = {
            "metadata": {"name": name, "namespace": "default", "uid": uid, "attempt": 0},
            "annotations": annotations,
            "log_directory": str(d),
            "linux": {
                "cgroup_parent": f"kubepods-burstable-pod{uid.replace('-', '_')}.slice",
                "security_context": {"namespace_options": {"network": 2}},
            },
        }
        ctr = {
            "metadata": {"name": "app"},
            "image": {"image": self.image},
            "command": ["/bin/sleep", "3600"],
            "log_path": "app.log",
        }
        (d / "pod.json").write_text(json.dumps(pod))
        (d / "ctr.json").write_text(json.dumps(ctr))
        pod_id = crictl("runp", str(d / "pod.json")).strip()
        cid = crictl(
            "create", "--no-pull", pod_id, str(d / "ctr.json"), str(d / "pod.json")
        ).strip()
        crictl("start", cid)
        inspect = self.pods[name] = json.loads(crictl("inspect", "-o", "json", cid))
        return inspect

    @staticmethod
    def cgroup_values(inspect: dict) -> dict[str, str]:
        """cpu.max and memory.max of the container's scope, found through systemd."""
        spec = inspect["info"]["runtimeSpec"]
        path = spec["linux"]["cgroupsPath"]
        pod_slice, prefix, cid = path.split(":")
        assert pod_slice.startswith("kubepods-burstable-pod") and prefix == "cri-containerd"
        group = sh(
            "systemctl", "show", "-p", "ControlGroup", "--value", f"cri-containerd-{cid}.scope"
        ).strip()
        cgroup = Path("/sys/fs/cgroup") / group.lstrip("/")
        values = {f: (cgroup / f).read_text().strip() for f in ("cpu.max", "memory.max")}
        print(f"evidence: {path} -> {cgroup}: {values}")
        return values


def _default_sandbox_image() -> str:
    text = sh("containerd", "config", "default")
    m = re.search(r'^\s*(?:sandbox|sandbox_image)\s*=\s*[\'"]([^\'"]+)', text, re.M)
    assert m, "no sandbox image in `containerd config default`"
    return m[1]


@pytest.fixture(scope="module")
def node(package, e2e_image, tmp_path_factory):
    bins = _binaries()
    links = []
    for link, target in bins.items():
        Path(link).parent.mkdir(parents=True, exist_ok=True)
        Path(link).unlink(missing_ok=True)
        Path(link).symlink_to(target.resolve())
        links.append(Path(link))
    version = sh("containerd", "--version").split()[2]
    major = int(version.lstrip("v").split(".")[0])
    Path("/etc/containerd").mkdir(exist_ok=True)
    shutil.copy(SHIPPED[2 if major >= 2 else 1], "/etc/containerd/config.toml")
    # The overlayfs snapshotter cannot stack on the guest's overlay root: a tmpfs of its
    # own, as /var/lib/containerd is a disk of its own on many nodes.
    Path("/var/lib/containerd").mkdir(parents=True, exist_ok=True)
    sh("mount", "-t", "tmpfs", "tmpfs", "/var/lib/containerd")
    # the base spec `containerd-config --write` makes: this containerd's own, plus the hook
    spec_path = Path("/etc/nri-sla/base-runtime-spec.json")
    default = node_default_spec(
        find_ctr(shutil.which("containerd")) or "ctr",
        parse_version(version, "containerd --version"),
    )
    spec = json.loads(with_hook(default, "/usr/bin/nri-sla"))
    for hook in spec["hooks"]["createRuntime"]:
        args = hook["args"]
        args[args.index("--timeout") + 1] = "100"
        hook["timeout"] = 120
    spec_path.write_text(json.dumps(spec, indent=2))
    Path("/etc/systemd/system/containerd.service").write_text(CONTAINERD_UNIT)
    sh("systemctl", "daemon-reload")
    try:
        started = time.monotonic()
        sh("systemctl", "start", "containerd", timeout=180)
        print(f"evidence: containerd {version} active after {time.monotonic() - started:.1f} s")
        image = _default_sandbox_image()
        archive = e2e_image.build_image_archive(
            tmp_path_factory.mktemp("image") / "img.tar", Path("/bin/busybox"), image
        )
        sh("ctr", "-n", "k8s.io", "images", "import", str(archive.path), timeout=300)
        yield Node(major, version, image, tmp_path_factory.mktemp("pods"))
    finally:
        crictl("rmp", "--all", "--force", check=False, timeout=300)
        for unit in (UNIT, "containerd"):
            subprocess.run(
                ["systemctl", "disable", "--now", unit], capture_output=True, timeout=120
            )
        subprocess.run(["umount", "-l", "/var/lib/containerd"], capture_output=True)
        for link in links:  # the guest's own runc again
            link.unlink(missing_ok=True)
        spec_path.unlink(missing_ok=True)  # made here, as containerd-config does


def test_enabled_service_starts_with_containerd_and_registers(node, systemd):
    """docs/install.md: `systemctl enable --now nri-sla`. READY=1 means registered."""
    sh("systemctl", "enable", "--now", UNIT, timeout=180)
    wants = Path("/etc/systemd/system/containerd.service.wants") / UNIT
    assert wants.is_symlink()  # WantedBy=containerd.service
    props = systemd.unit_properties(UNIT, "ActiveState", "StatusText")
    assert props["ActiveState"] == "active"
    assert props["StatusText"] == f"registered with containerd {node.version}"
    log = systemd.wait_for(
        "containerd: nri-sla synchronized",
        lambda: re.search(
            r'plugin \\?"[^"]*nri-sla\\?" connected and synchronized', journal("containerd")
        ),
    )
    print(f"evidence: {log[0]}")


def test_kubelet_shaped_pod_gets_its_sla_through_nri(node):
    inspect = node.run_pod("nri-path", {"sla.nri.io/pod": SLA})
    assert "sla.nri.io/applied" in inspect["info"]["runtimeSpec"].get("annotations", {})
    assert node.cgroup_values(inspect) == {"cpu.max": "50000 100000", "memory.max": str(128 * MIB)}


def test_containerd_restart_restarts_nri_sla(node, systemd):
    """PartOf=containerd.service: a containerd restart (an upgrade) restarts nri-sla,
    which registers again."""
    before = systemd.unit_properties(UNIT, "MainPID")["MainPID"]
    sh("systemctl", "restart", "containerd", timeout=240)
    after = systemd.wait_for(
        "nri-sla registered again",
        lambda: (
            (p := systemd.unit_properties(UNIT, "MainPID", "ActiveState", "StatusText"))[
                "StatusText"
            ].startswith("registered")
            and p["ActiveState"] == "active"
            and p
        ),
    )
    assert after["MainPID"] != before


def test_kubelet_shaped_pod_gets_its_sla_through_the_hook(node, systemd):
    """nri-sla stopped: the OCI hook of the base runtime spec enforces the SLA. On 2.x
    the shipped validator refuses containers while nri-sla is away, unless the pod
    tolerates that (the key the shipped config names)."""
    sh("systemctl", "stop", UNIT, timeout=120)
    annotations = {"sla.nri.io/pod": SLA}
    if node.major >= 2:
        with pytest.raises(AssertionError, match=r'required plugin \\?"nri-sla\\?" not present'):
            node.run_pod("refused", annotations)
        annotations[TOLERATE] = "true"
    inspect = node.run_pod("hook-path", annotations)
    assert "sla.nri.io/applied" not in inspect["info"]["runtimeSpec"].get("annotations", {})
    assert node.cgroup_values(inspect) == {"cpu.max": "50000 100000", "memory.max": str(128 * MIB)}


def test_daemon_reload_keeps_the_nri_values_and_resets_the_hooks(node, systemd):
    """The daemon-reload table of docs/testing-cgroup-v2.md with containerd and this runc:
    the NRI pod's limits are properties of its scope, the hook's are files only."""
    pods = {name: node.pods[name] for name in ("nri-path", "hook-path") if name in node.pods}
    if len(pods) < 2:
        pytest.skip("needs the pods of the NRI and hook tests above")
    assert systemd.run(["systemctl", "daemon-reload"]).returncode == 0
    after = {name: node.cgroup_values(inspect) for name, inspect in pods.items()}
    assert after == {
        "nri-path": {"cpu.max": "50000 100000", "memory.max": str(128 * MIB)},
        "hook-path": {"cpu.max": "max 100000", "memory.max": "max"},
    }


# Two package operations (remove, then the reinstall that leaves the guest as it was): dpkg
# takes 120-180 s per install in the TCG guest, so the default 300 s cannot hold both.
@pytest.mark.timeout(600)
def test_removed_package_leaves_containerd_creating_containers(node, systemd, package):
    """`apt remove`: the binary goes, the base spec (a conffile) stays, and containerd
    runs its hook for every container, before and after a restart: the hook's /bin/sh
    entry exits 0 without nri-sla. The shipped config merged by hand still requires
    nri-sla on 2.x, which the removal says (prerm); the pods here tolerate it."""
    removed = systemd.run(["dpkg", "--remove", "nri-sla"], timeout=300)
    try:
        assert removed.returncode == 0, removed.stdout + removed.stderr
        assert not Path("/usr/bin/nri-sla").exists()
        assert Path("/etc/nri-sla/base-runtime-spec.json").is_file()
        if node.major >= 2:
            assert "still requires nri-sla (required_plugins)" in removed.stderr
        annotations = {"sla.nri.io/pod": SLA, TOLERATE: "true"}
        for name in ("after-remove", "after-restart"):
            if name == "after-restart":  # containerd reads the base spec file again
                sh("systemctl", "restart", "containerd", timeout=240)
            inspect = node.run_pod(name, annotations)  # created and started
            assert node.cgroup_values(inspect) == {
                "cpu.max": "max 100000",
                "memory.max": "max",
            }  # nothing enforced
    finally:
        reinstalled = systemd.run(["dpkg", "--force-confold", "-i", str(package.deb)], timeout=300)
        assert reinstalled.returncode == 0, reinstalled.stdout + reinstalled.stderr
