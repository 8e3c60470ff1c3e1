"""packaging/deb/build.sh: build the .deb, inspect it, run nri-sla from it, and install
and purge it in a scratch dpkg root (maintainer scripts included)."""

import asyncio
import re
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from nri_plugin import __version__
from nri_plugin.config.loader import parse_config
from nri_plugin.simulated.runtime import RuntimeSimulator
from tests.support.installed import cache_tag, cold_hook_run, files_of, uncompiled

pytestmark = pytest.mark.slow  # builds the package

EXPECTED = [
    "./usr/bin/nri-sla",
    "./usr/lib/nri-sla/site/nri_plugin/__init__.py",
    "./usr/lib/nri-sla/site/nri_plugin/cli.py",
    "./usr/lib/nri-sla/site/nri_plugin/ops/metrics.py",
    "./usr/lib/nri-sla/site/yaml/__init__.py",
    "./usr/lib/nri-sla/site/google/protobuf/__init__.py",
    "./usr/lib/nri-sla/site/prometheus_client/__init__.py",
    "./usr/lib/nri-sla/site/grpc/__init__.py",
    "./usr/lib/nri-sla/site/nri_plugin/kubelet/pb/deviceplugin_v1beta1_pb2_grpc.py",
    "./lib/systemd/system/nri-sla.service",
    "./lib/systemd/system/nri-sla-device-plugin.service",
    "./usr/share/nri-sla/nri-plugin/50-nri-sla",
    "./usr/share/nri-sla/nri-plugin/50-nri-sla.conf",
    "./usr/share/nri-sla/containerd/config.toml.example",
    "./usr/share/nri-sla/containerd/config-1.7.toml.example",
    "./usr/share/nri-sla/crio/50-nri-sla.conf",
    "./usr/share/nri-sla/crio/51-nri-sla-fail-closed.conf",
    "./usr/share/doc/nri-sla/copyright",
    "./usr/share/man/man1/nri-sla.1.gz",
    "./usr/share/bash-completion/completions/nri-sla",
]


@pytest.fixture(scope="session")
def deb(tmp_path_factory, pk) -> Path:
    pk.need_tool("dpkg-deb", "dpkg")
    out = tmp_path_factory.mktemp("deb")
    try:
        path = pk.build_deb(out, sys.executable)
    except pk.DebUnavailable as exc:
        pytest.skip(str(exc))
    arch = subprocess.run(
        ["dpkg", "--print-architecture"], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert path.name == f"nri-sla_{__version__}_{arch}.deb"
    return path


@pytest.fixture(scope="session")
def unpacked(deb, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("unpacked")
    subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True)
    return root


def field(deb: Path, name: str) -> str:
    return subprocess.run(
        ["dpkg-deb", "-f", str(deb), name], capture_output=True, text=True, check=True
    ).stdout.strip()


def test_control_fields(deb):
    assert field(deb, "Package") == "nri-sla"
    assert field(deb, "Version") == __version__
    major, minor = sys.version_info[:2]
    depends = field(deb, "Depends").split(", ")
    assert depends[:2] == [f"python3 (>= {major}.{minor})", f"python3 (<< {major}.{minor + 1})"]
    # the bundled extension modules' libc, and /bin/kill (nri-sla.service's ExecReload)
    assert re.fullmatch(r"libc6 \(>= 2\.\d+\)", depends[2]) and depends[3:] == ["procps"]
    assert "localhost" not in field(deb, "Maintainer")
    assert int(field(deb, "Installed-Size")) > 1000  # KiB: code + bundled dependencies


def test_contents_and_ownership(deb, pk):
    listing = subprocess.run(
        ["dpkg-deb", "-c", str(deb)], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    paths = {line.split()[-1] for line in listing}
    missing = [p for p in EXPECTED if p not in paths]
    assert not missing, missing
    assert all(line.split()[1] == "root/root" for line in listing)
    # no byte-code shipped (Debian policy): postinst compiles it on the node
    assert not any("__pycache__" in p or p.endswith(".pyc") for p in paths)
    assert "./usr/share/doc/nri-sla/changelog.gz" in paths
    assert "./usr/share/nri-sla/examples/demo-config.yaml" in paths
    assert not any("base-runtime-spec" in p for p in paths)  # made on the node
    assert not any("/site/bin/" in p for p in paths)
    if (pk.REPO / "hooks" / "nri-sla-hook.json").exists():
        assert "./usr/share/containers/oci/hooks.d/nri-sla-hook.json" in paths
    modes = {line.split()[-1]: line.split()[0] for line in listing}
    assert modes["./usr/bin/nri-sla"] == "-rwxr-xr-x"
    assert modes["./usr/share/nri-sla/nri-plugin/50-nri-sla"] == "-rwxr-xr-x"


def test_conffiles_and_node_config(deb, unpacked, tmp_path):
    subprocess.run(["dpkg-deb", "-e", str(deb), str(tmp_path / "ctl")], check=True)
    listed = (tmp_path / "ctl" / "conffiles").read_text().split()
    assert "/etc/nri-sla/config.yaml" in listed  # the unit's --config must exist
    for path in listed:
        assert path.startswith("/etc/nri-sla/") and (unpacked / path.lstrip("/")).is_file()
    text = (unpacked / "etc/nri-sla/config.yaml").read_text()
    parse_config(text, "/etc/nri-sla/config.yaml")  # raises ConfigError when invalid
    assert (unpacked / "usr/share/doc/nri-sla/install.md").is_file()


def _python_for(unpacked: Path) -> list[str]:
    """The launcher runs /usr/bin/python3 -IS; use it when it is this Python's version,
    else run the launcher with this interpreter (-IS keeps our venv off sys.path too)."""
    system = Path("/usr/bin/python3")
    if system.exists():
        ver = subprocess.run(
            [str(system), "-c", "import sys; print(sys.version_info[:2])"],
            capture_output=True,
            text=True,
        ).stdout.strip()
        if ver == str(tuple(sys.version_info[:2])):
            return []
    return [sys.executable, "-IS"]


def run_unpacked(unpacked: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [*_python_for(unpacked), str(unpacked / "usr/bin/nri-sla"), *args]
    return subprocess.run(
        cmd, capture_output=True, text=True, timeout=60, cwd="/", env={"PATH": "/usr/bin:/bin"}
    )


def test_demo_runs_from_the_package_and_the_man_page_names_installed_paths(unpacked):
    import gzip

    res = run_unpacked(unpacked, "demo")
    assert res.returncode == 0, res.stderr
    roff = gzip.decompress((unpacked / "usr/share/man/man1/nri-sla.1.gz").read_bytes()).decode()
    assert "/usr/lib/nri\\-sla/site/examples/demo\\-config.yaml" in roff
    assert "/tmp" not in roff and "root/usr" not in roff


def test_changelog_is_of_this_version(pk):
    first = (pk.PACKAGING / "deb" / "changelog").read_text().splitlines()[0]
    assert first.startswith(f"nri-sla ({__version__}) ")


def test_version_from_the_package(unpacked):
    res = run_unpacked(unpacked, "--version")
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == f"nri-sla {__version__}"


def test_package_code_not_the_checkout(unpacked):
    # prove the launcher imports the bundled copy: ask it where nri_plugin lives
    launcher = (unpacked / "usr/bin/nri-sla").read_text()
    probe = launcher.replace(
        "from nri_plugin.cli import main  # noqa: E402\n\nsys.exit(main())",
        "import nri_plugin, yaml\nprint(nri_plugin.__file__, yaml.__file__)",
    )
    assert probe != launcher
    script = unpacked / "usr/bin/probe"
    script.write_text(probe)
    res = subprocess.run(
        [*(_python_for(unpacked) or ["/usr/bin/python3", "-IS"]), str(script)],
        capture_output=True,
        text=True,
        cwd="/",
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    site = str((unpacked / "usr/lib/nri-sla/site").resolve())
    assert all(p.startswith(site) for p in res.stdout.split()), res.stdout


def test_man_page_and_completion_cover_every_command_and_flag(unpacked, pk):
    import gzip

    from nri_plugin.cli import COMMANDS

    man = pk.need_tool("man", "man-db")
    page = unpacked / "usr/share/man/man1/nri-sla.1.gz"
    shown = subprocess.run(
        [man, "-l", str(page)],
        capture_output=True,
        text=True,
        env={"MANWIDTH": "200", "PATH": "/usr/bin:/bin"},
        timeout=60,
    )
    assert shown.returncode == 0 and "warning" not in shown.stderr, shown.stderr
    text = shown.stdout
    roff = gzip.decompress(page.read_bytes()).decode()
    completion = (unpacked / "usr/share/bash-completion/completions/nri-sla").read_text()
    for name in COMMANDS:
        assert f"nri-sla {name}\n" in text, name
    for flag in (
        "--fail-closed",
        "--dry-run",
        "--containerd-version",
        "--host-root",
        "--metrics-address",
        "--log-level",
    ):
        assert flag in text and flag in completion, flag
    assert "nri-sla config check" in text and roff.startswith(".TH NRI-SLA 1")
    bash = pk.need_tool("bash", "bash")
    script = (
        f"source {unpacked}/usr/share/bash-completion/completions/nri-sla; "
        "COMP_WORDS=(nri-sla containerd-config --dr); COMP_CWORD=2; _nri_sla; "
        'echo "${COMPREPLY[*]}"; COMP_WORDS=(nri-sla config sh); _nri_sla; '
        'echo "${COMPREPLY[*]}"'
    )
    out = subprocess.run([bash, "--norc", "-c", script], capture_output=True, text=True, timeout=60)
    assert out.stdout.splitlines() == ["--dry-run", "show"], out.stderr


def test_extension_modules_are_stripped(unpacked, pk):
    readelf = pk.need_tool("readelf", "binutils")
    modules = sorted((unpacked / "usr/lib/nri-sla/site").rglob("*.so"))
    assert any(m.name.startswith("loop.") for m in modules)  # uvloop's, 13.6 MB unstripped
    for module in modules:
        sections = subprocess.run(
            [readelf, "-S", "-W", str(module)], capture_output=True, text=True, check=True
        ).stdout
        assert ".debug_info" not in sections and ".symtab" not in sections, module


def test_inventory_from_the_package(unpacked):
    if not (unpacked / "usr/lib/nri-sla/site/nri_plugin/commands/inventory.py").exists():
        pytest.skip("nri_plugin/commands/inventory.py not written yet: nothing to run")
    res = run_unpacked(unpacked, "inventory")
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip()


def scratch_dpkg(root: Path, pk) -> list[str]:
    """A dpkg command line installing into an empty package database under root."""
    pk.need_tool("dpkg", "dpkg")
    admin = root / "var/lib/dpkg"
    for sub in ("info", "updates", "triggers"):
        (admin / sub).mkdir(parents=True)
    (admin / "status").touch()
    (admin / "available").touch()
    # chrootless: the maintainer scripts run here with DPKG_ROOT=root (there is no
    # shell inside the scratch root); python3 is not in its database, hence
    # --force-depends.
    return [
        "dpkg",
        f"--root={root}",
        "--force-script-chrootless",
        "--force-depends",
        "--log=/dev/null",
    ]


def test_install_and_purge_in_scratch_root(deb, tmp_path, pk):
    root = tmp_path / "root"
    admin = root / "var/lib/dpkg"
    dpkg = scratch_dpkg(root, pk)
    res = subprocess.run([*dpkg, "-i", str(deb)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    status = subprocess.run([*dpkg, "-s", "nri-sla"], capture_output=True, text=True)
    assert "Status: install ok installed" in status.stdout
    assert (root / "usr/bin/nri-sla").is_file()
    assert (root / "lib/systemd/system/nri-sla.service").is_file()
    assert (root / "lib/systemd/system/nri-sla-device-plugin.service").is_file()
    # what an admin adds: local config, state, `systemctl enable` (wants symlink)
    (root / "etc/nri-sla").mkdir(exist_ok=True)
    (root / "etc/nri-sla/local-override.yaml").write_text("enforcement: soft\n")
    (root / "var/lib/nri-sla").mkdir(parents=True)
    (root / "var/lib/nri-sla/state").write_text("x")
    wants = root / "etc/systemd/system/containerd.service.wants"
    wants.mkdir(parents=True)
    (wants / "nri-sla.service").symlink_to("/lib/systemd/system/nri-sla.service")
    multi_user = root / "etc/systemd/system/multi-user.target.wants"
    multi_user.mkdir(parents=True)
    (multi_user / "nri-sla-device-plugin.service").symlink_to(
        "/lib/systemd/system/nri-sla-device-plugin.service"
    )
    res = subprocess.run([*dpkg, "--purge", "nri-sla"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    left = sorted(
        str(p.relative_to(root))
        for p in root.rglob("*")
        if not p.is_dir() and not str(p).startswith(str(admin))
    )
    multi_user.rmdir()  # only the package's link was in it (a real system has others)
    assert left == [], left
    for gone in (
        "etc/nri-sla",
        "var/lib/nri-sla",
        "usr/lib/nri-sla",
        "usr/share/nri-sla",
        "etc/systemd/system/containerd.service.wants",
    ):
        assert not (root / gone).exists(), gone
    status = subprocess.run([*dpkg, "-s", "nri-sla"], capture_output=True, text=True)
    assert status.returncode != 0  # purged: unknown to dpkg


def test_postinst_compiles_every_module_and_removal_takes_the_byte_code_back(deb, tmp_path, pk):
    """postinst byte-compiles the site dir with /usr/bin/python3 (the launcher's and the
    hook's interpreter): every module has a current .pyc of its version, and a cold hook
    run from the installed tree (`python3 -I -S .../hook/__main__.py`, as root here)
    writes nothing into it. Removal deletes that byte-code and any a process wrote
    beside it (a directory only a __pycache__ keeps included): the tree is gone."""
    system = Path("/usr/bin/python3")
    if not system.exists():
        pytest.skip("no /usr/bin/python3: postinst compiles with it")
    tag = cache_tag(str(system))
    if tag != sys.implementation.cache_tag:
        pytest.skip(f"/usr/bin/python3 is {tag}, the package is built for this Python")
    root = tmp_path / "root"
    dpkg = scratch_dpkg(root, pk)
    res = subprocess.run([*dpkg, "-i", str(deb)], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert "byte-compiling" not in res.stderr, res.stderr
    lib = root / "usr/lib/nri-sla"
    site = lib / "site"
    assert uncompiled(site, tag) == []
    assert len(list(site.rglob(f"*.{tag}.pyc"))) > 300
    assert not list((root / "usr/share/nri-sla").rglob("__pycache__"))  # examples: no code
    before = files_of(lib)
    work = tmp_path / "work"
    work.mkdir()
    cold_hook_run(str(system), site, work)
    assert files_of(lib) == before
    # an upgrade (here: the same version again): prerm deletes the byte-code, the new
    # postinst compiles every module afresh
    res = subprocess.run([*dpkg, "-i", str(deb)], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert uncompiled(site, tag) == []
    stray = site / "nri_plugin" / "gone" / "__pycache__"
    stray.mkdir(parents=True)
    (stray / f"old.{tag}.pyc").write_bytes(b"")
    (site / "nri_plugin" / "__pycache__" / f"extra.{tag}.pyc").write_bytes(b"")
    res = subprocess.run(
        [*dpkg, "--remove", "nri-sla"], capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stderr
    assert not lib.exists(), sorted(str(p.relative_to(lib)) for p in lib.rglob("*"))


def test_removal_leaves_containerd_a_working_config(deb, tmp_path, pk):
    """remove takes out the drop-in `containerd-config --write` made (never another
    file); purge keeps the base spec while a containerd config still names it."""
    root = tmp_path / "root"
    dpkg = scratch_dpkg(root, pk)
    res = subprocess.run([*dpkg, "-i", str(deb)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    spec = root / "etc/nri-sla/base-runtime-spec.json"
    assert not spec.exists()  # made on the node by containerd-config, from its containerd
    spec.write_text("{}\n")
    conf_d = root / "etc/containerd/conf.d"
    ours = conf_d / "nri-sla.toml"
    write = subprocess.run(
        [
            str(pk.VENV_NRI_SLA),
            "containerd-config",
            "--containerd-version",
            "2.2",
            "--fail-closed",
            "--write",
            str(ours),
            "--no-base-spec",
            "--main-config",
            str(root / "etc/containerd/config.toml"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert write.returncode == 0, write.stderr
    foreign = conf_d / "registry.toml"
    foreign.write_text("version = 3\n")
    # an operator who merged the example into the main config by hand
    (root / "etc/containerd/config.toml").write_text(
        'version = 3\n[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]\n'
        '  base_runtime_spec = "/etc/nri-sla/base-runtime-spec.json"\n'
    )
    res = subprocess.run(
        [*dpkg, "--remove", "nri-sla"], capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stderr
    assert not ours.exists() and foreign.read_text() == "version = 3\n"
    assert f"took out {ours}" in res.stderr
    assert "restart containerd now: it requires nri-sla (fail closed)" in res.stderr
    assert not (root / "usr/bin/nri-sla").exists()
    res = subprocess.run([*dpkg, "--purge", "nri-sla"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert spec.read_text() == "{}\n"  # still named by containerd's config
    assert sorted(p.name for p in spec.parent.iterdir()) == [spec.name]
    assert "kept /etc/nri-sla/base-runtime-spec.json" in res.stderr
    assert not (root / "var/lib/nri-sla").exists()
    # once the operator takes the setting out, a purge leaves nothing
    (root / "etc/containerd/config.toml").write_text("version = 3\n")
    res = subprocess.run([*dpkg, "-i", str(deb)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    res = subprocess.run([*dpkg, "--purge", "nri-sla"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert not (root / "etc/nri-sla").exists() and "kept" not in res.stderr


def test_removal_restores_a_1_7_main_config_it_patched(deb, tmp_path, pk):
    root = tmp_path / "root"
    dpkg = scratch_dpkg(root, pk)
    res = subprocess.run([*dpkg, "-i", str(deb)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    main_config = root / "etc/containerd/config.toml"
    main_config.parent.mkdir(parents=True)
    original = (pk.REPO / "tests/commands/data/kubeadm-1.7.toml").read_bytes()
    main_config.write_bytes(original)
    write = subprocess.run(
        [
            str(root / "usr/bin/nri-sla"),
            "containerd-config",
            "--containerd-version",
            "1.7",
            "--write",
            "--no-base-spec",
            "--main-config",
            str(main_config),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert write.returncode == 0, write.stderr
    assert main_config.read_bytes() != original
    res = subprocess.run(
        [*dpkg, "--remove", "nri-sla"], capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stderr
    assert main_config.read_bytes() == original
    assert sorted(p.name for p in main_config.parent.iterdir()) == ["config.toml"]


def test_build_script_syntax(pk):
    res = subprocess.run(
        ["bash", "-n", str(pk.PACKAGING / "deb" / "build.sh")], capture_output=True, text=True
    )
    assert res.returncode == 0, res.stderr


def test_packaged_plugin_registers_with_a_runtime(unpacked, tmp_path, pk):
    """`nri-sla run` from the unpacked package (bundled protobuf, PyYAML, ...) registers
    with the runtime simulator over a unix socket and answers /readyz, then stops
    cleanly on SIGTERM, as systemd stops it."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = tmp_path / "config.yaml"
    # state-dir: the record key goes under tmp_path, not the host's /var/lib/nri-sla
    config.write_text(f'metrics:\n  address: "127.0.0.1:{port}"\nstate-dir: {tmp_path / "state"}\n')
    sock_path = str(tmp_path / "nri.sock")

    async def main() -> tuple[int, bytes]:
        sim = await RuntimeSimulator(sock_path).start()
        proc = await asyncio.create_subprocess_exec(
            *_python_for(unpacked),
            str(unpacked / "usr/bin/nri-sla"),
            "run",
            "--config",
            str(config),
            "--socket",
            sock_path,
            env={"PATH": "/usr/bin:/bin"},
            cwd="/",
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            session = await sim.accept(timeout=30)
            assert session.name == "nri-sla"
            assert await pk.wait_ready(port) == 200
            proc.send_signal(signal.SIGTERM)
            rc = await asyncio.wait_for(proc.wait(), 20)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
            await sim.close()
        return rc, await proc.stderr.read()

    rc, stderr = asyncio.run(main())
    assert rc == 0, stderr.decode()[-2000:]


def test_packaged_device_plugin_registers_with_a_kubelet(unpacked, pk):
    """`nri-sla device-plugin` from the unpacked package (bundled grpcio) registers with
    the fake kubelet, lists the snapshot's GPUs and stops cleanly on SIGTERM."""
    from tests.support.kubelet_harness import PROJECT_STUBS, FakeKubelet

    with tempfile.TemporaryDirectory(prefix="nri-sla-deb") as d:  # short socket paths
        sock_dir = Path(d)
        kubelet = FakeKubelet(PROJECT_STUBS, sock_dir)
        proc = subprocess.Popen(
            [
                *_python_for(unpacked),
                str(unpacked / "usr/bin/nri-sla"),
                "device-plugin",
                "--inventory",
                str(pk.REPO / "examples" / "dgx-like.yaml"),
                "--socket-dir",
                d,
                "--config",
                "/dev/null",
            ],
            env={"PATH": "/usr/bin:/bin"},
            cwd="/",
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert kubelet.registration(timeout=30)["resource_name"] == "nvidia.com/gpu"
            assert len(kubelet.next_list()["devices"]) == 8
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=20)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
            kubelet.close()
        assert proc.returncode == 0, err[-2000:]
        assert not (sock_dir / "nri-sla-gpu.sock").exists()
