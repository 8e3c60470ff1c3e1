"""containerd config files for the e2e harness (1.7: config v2, 2.x: config v3).

NRI on a private socket, CRI with the cgroupfs driver and the native snapshotter, runc
as the runtime binary, CDI on with the base dir's `cdi/` as its only spec directory (never
the host's /etc/cdi; containerd 1.7 has CDI off by default, 2.x on), everything under one
base directory. The NRI timeouts and switches
and the pod-annotation pass-through are read from the configs nri-sla ships
(config.toml.example; packaging/containerd/config-1.7.toml.example): only paths differ.
"""

from __future__ import annotations

import json
import platform
import tomllib
from pathlib import Path

from tests.e2e.e2e_image import GOARCH


def goarch() -> str:
    return GOARCH.get(platform.machine(), platform.machine())


def runc_options(runc: Path, runc_root: Path) -> str:
    return f'BinaryName = "{runc}"\nRoot = "{runc_root}"\nSystemdCgroup = false\n'


REPO = Path(__file__).resolve().parents[2]
SHIPPED = {
    2: REPO / "config.toml.example",
    1: REPO / "packaging" / "containerd" / "config-1.7.toml.example",
}
NRI_SETTINGS = (
    "plugin_registration_timeout",
    "plugin_request_timeout",
    "disable",
    "disable_connections",
)


def shipped_settings(major: int) -> tuple[dict, list[str]]:
    """The shipped config's NRI settings (paths left out) and the runc handler's
    pod_annotations, for containerd `major`."""
    doc = tomllib.loads(SHIPPED[2 if major >= 2 else 1].read_text())
    nri = doc["plugins"]["io.containerd.nri.v1.nri"]
    cri = "io.containerd.cri.v1.runtime" if major >= 2 else "io.containerd.grpc.v1.cri"
    runc = doc["plugins"][cri]["containerd"]["runtimes"]["runc"]
    return {k: nri[k] for k in NRI_SETTINGS}, list(runc["pod_annotations"])


def toml_value(value: object) -> str:
    return json.dumps(value)  # strings, booleans and lists of strings read the same in TOML


def render_config(major: int, base: Path, runc: Path, image: str, arch: str) -> str:
    """containerd config: NRI on a private socket, CRI with cgroupfs, native snapshots."""
    settings, pass_through = shipped_settings(major)
    common = (
        f'root = "{base}/root"\nstate = "{base}/state"\n'
        'disabled_plugins = ["io.containerd.snapshotter.v1.aufs", '
        '"io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", '
        '"io.containerd.snapshotter.v1.devmapper", "io.containerd.internal.v1.opt", '
        '"io.containerd.tracing.processor.v1.otlp"]\n'
        f'[grpc]\n  address = "{base}/containerd.sock"\n'
        f'[ttrpc]\n  address = "{base}/containerd.sock.ttrpc"\n'
        '[debug]\n  level = "debug"\n'
        '[metrics]\n  address = ""\n'
    )
    nri = (
        f'socket_path = "{base}/nri.sock"\n'
        f'plugin_path = "{base}/nri/plugins"\n'
        f'plugin_config_path = "{base}/nri/conf.d"\n'
        + "".join(f"{k} = {toml_value(v)}\n" for k, v in settings.items())
    )
    runc_handler = (
        f'runtime_type = "io.containerd.runc.v2"\npod_annotations = {toml_value(pass_through)}\n'
    )
    # No CAP_SYS_RESOURCE in CI sandboxes: CRI must not raise oom_score_adj.
    cri_common = (
        "restrict_oom_score_adj = true\n"
        f'enable_cdi = true\ncdi_spec_dirs = ["{base}/cdi"]\n'
        "disable_apparmor = true\nenable_selinux = false\n"
        "enable_unprivileged_ports = false\nenable_unprivileged_icmp = false\n"
    )
    opts = runc_options(runc, base / "runc")
    if major < 2:
        return (
            "version = 2\n"
            + common
            + '[plugins."io.containerd.nri.v1.nri"]\n'
            + nri
            + '[plugins."io.containerd.grpc.v1.cri"]\n'
            + cri_common
            + f'sandbox_image = "{image}"\n'
            + 'stream_server_address = "127.0.0.1"\nstream_server_port = "0"\n'
            + '[plugins."io.containerd.grpc.v1.cri".containerd]\n'
            + 'snapshotter = "native"\ndefault_runtime_name = "runc"\n'
            + '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]\n'
            + runc_handler
            + '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]\n'
            + opts
            + '[plugins."io.containerd.grpc.v1.cri".cni]\n'
            + f'bin_dir = "{base}/cni/bin"\nconf_dir = "{base}/cni/net.d"\n'
        )
    rt = "plugins.'io.containerd.cri.v1.runtime'"
    return (
        "version = 3\n"
        + common
        + "[plugins.'io.containerd.nri.v1.nri']\n"
        + nri
        + "[plugins.'io.containerd.cri.v1.images']\n"
        + 'snapshotter = "native"\n'
        + "[plugins.'io.containerd.cri.v1.images'.pinned_images]\n"
        + f'sandbox = "{image}"\n'
        + f"[{rt}]\n"
        + cri_common
        + f"[{rt}.containerd]\n"
        + 'default_runtime_name = "runc"\n'
        + f"[{rt}.containerd.runtimes.runc]\n"
        + runc_handler
        + f"[{rt}.containerd.runtimes.runc.options]\n"
        + opts
        + f"[{rt}.cni]\n"
        + f'bin_dirs = ["{base}/cni/bin"]\nconf_dir = "{base}/cni/net.d"\n'
        # The transfer service (ctr import, CRI pulls) unpacks only for listed platforms.
        + "[[plugins.'io.containerd.transfer.v1.local'.unpack_config]]\n"
        + f'platform = "linux/{arch}"\nsnapshotter = "native"\n'
        + "[plugins.'io.containerd.grpc.v1.cri']\n"
        + 'stream_server_address = "127.0.0.1"\nstream_server_port = "0"\n'
    )
