"""Host-side tests of the guest harness pieces that need no qemu: module ordering,
the initramfs archive, tool discovery, and the timeout path (that one boots qemu briefly).
"""

import lzma
import shutil
import stat
import subprocess
import threading
import time
from pathlib import Path

import pytest

MODULES_DEP = """\
kernel/fs/9p/9p.ko: kernel/net/9p/9pnet.ko kernel/fs/fscache/fscache.ko kernel/fs/netfs/netfs.ko
kernel/net/9p/9pnet.ko:
kernel/fs/fscache/fscache.ko: kernel/fs/netfs/netfs.ko
kernel/fs/netfs/netfs.ko:
kernel/net/9p/9pnet_virtio.ko.xz: kernel/net/9p/9pnet.ko kernel/drivers/virtio/virtio.ko
kernel/drivers/virtio/virtio.ko:
kernel/a/loop_a.ko: kernel/a/loop_b.ko
kernel/a/loop_b.ko: kernel/a/loop_a.ko
"""


@pytest.fixture
def modules_dir(tmp_path):
    d = tmp_path / "lib" / "modules" / "6.9.0-1-amd64"
    d.mkdir(parents=True)
    (d / "modules.dep").write_text(MODULES_DEP)
    (d / "modules.builtin").write_text("kernel/drivers/block/virtio_blk.ko\n")
    return d


def test_load_order_puts_dependencies_first(vm_harness, modules_dir):
    order = vm_harness.module_load_order(modules_dir, ["9p", "9pnet_virtio"])
    assert (
        order.index("kernel/fs/netfs/netfs.ko")
        < order.index("kernel/fs/fscache/fscache.ko")
        < order.index("kernel/fs/9p/9p.ko")
    )
    assert order.index("kernel/net/9p/9pnet.ko") < order.index("kernel/fs/9p/9p.ko")
    assert order[-1] == "kernel/net/9p/9pnet_virtio.ko.xz"
    assert len(order) == len(set(order)) == 6  # 9pnet is shared, listed once


def test_builtin_modules_need_no_loading(vm_harness, modules_dir):
    assert vm_harness.module_load_order(modules_dir, ["virtio_blk"]) == []


def test_missing_module_names_itself_and_the_package(vm_harness, modules_dir):
    with pytest.raises(vm_harness.VmUnavailable, match=r"bfq.*linux-image-amd64"):
        vm_harness.module_load_order(modules_dir, ["bfq"])


def test_dependency_cycle_is_an_error(vm_harness, modules_dir):
    with pytest.raises(vm_harness.VmUnavailable, match="cycle"):
        vm_harness.module_load_order(modules_dir, ["loop_a"])


def test_compressed_module_is_decompressed(vm_harness, tmp_path):
    ko = tmp_path / "x.ko.xz"
    ko.write_bytes(lzma.compress(b"\x7fELF module"))
    assert vm_harness._read_module(ko) == b"\x7fELF module"


def test_real_kernel_modules_resolve(vm_harness):
    try:
        tools = vm_harness.find_tools()
    except vm_harness.VmUnavailable as exc:
        pytest.skip(str(exc))
    order = vm_harness.module_load_order(tools.modules_dir, vm_harness.GUEST_MODULES)
    names = [vm_harness._module_name(p) for p in order]
    assert names.index("virtio") < names.index("virtio_pci")
    assert names.index("9pnet") < names.index("9pnet_virtio") < len(names)
    assert "9p" in names


def test_find_tools_picks_newest_kernel_with_modules(vm_harness, tmp_path):
    if shutil.which("qemu-system-x86_64") is None or vm_harness._find_static_busybox() is None:
        pytest.skip(
            "needs qemu-system-x86_64 and a static busybox "
            "(apt-get install qemu-system-x86 busybox-static)"
        )
    boot, mods = tmp_path / "boot", tmp_path / "modules"
    boot.mkdir()
    for version in ("6.1.0-9-amd64", "6.1.0-10-amd64", "6.5.0-1-amd64"):
        (boot / f"vmlinuz-{version}").write_bytes(b"k")
    for version in ("6.1.0-9-amd64", "6.1.0-10-amd64"):  # 6.5 has no modules installed
        (mods / version).mkdir(parents=True)
        (mods / version / "modules.dep").write_text("")
    tools = vm_harness.find_tools(boot, mods)
    assert tools.kernel.name == "vmlinuz-6.1.0-10-amd64"  # 10 > 9 numerically
    assert tools.kernel_version == "6.1.0-10-amd64"


def test_find_tools_without_kernel_says_what_to_install(vm_harness, tmp_path):
    if shutil.which("qemu-system-x86_64") is None:
        pytest.skip("needs qemu-system-x86_64 (apt-get install qemu-system-x86)")
    with pytest.raises(vm_harness.VmUnavailable, match="linux-image-amd64"):
        vm_harness.find_tools(tmp_path, tmp_path)


def test_cpio_archive_unpacks_with_busybox(vm_harness, tmp_path):
    busybox = vm_harness._find_static_busybox()
    if busybox is None:
        pytest.skip("needs a static busybox to unpack (apt-get install busybox-static)")
    archive = vm_harness.cpio_newc(
        [
            ("bin", stat.S_IFDIR | 0o755, b""),
            ("bin/tool", stat.S_IFREG | 0o755, b"#!/bin/sh\necho hi\n"),
            ("bin/link", stat.S_IFLNK | 0o777, b"tool"),
            ("odd", stat.S_IFREG | 0o644, b"x" * 5),  # lengths that need padding
        ]
    )
    out = tmp_path / "out"
    out.mkdir()
    subprocess.run(
        [str(busybox), "cpio", "-i", "-d"], input=archive, cwd=out, check=True, capture_output=True
    )
    assert (out / "bin" / "tool").read_bytes() == b"#!/bin/sh\necho hi\n"
    assert (out / "bin" / "tool").stat().st_mode & 0o777 == 0o755
    assert (out / "bin" / "link").is_symlink()
    assert str(Path((out / "bin" / "link").readlink())) == "tool"
    assert (out / "odd").read_bytes() == b"xxxxx"


def test_init_script_loads_modules_in_order_and_mounts_cgroup2(vm_harness):
    script = vm_harness.init_script(["kernel/a/first.ko", "kernel/b/second.ko.xz"])
    assert script.index("insmod /modules/first.ko") < script.index("insmod /modules/second.ko")
    assert "mount -t cgroup2" in script
    assert "+cpu +cpuset +memory +io +pids" in script
    assert script.rstrip().endswith("poweroff -f")


@pytest.mark.vm
def test_guest_timeout_is_an_error_with_the_console(vm_harness, tmp_path):
    try:
        tools = vm_harness.find_tools()
    except vm_harness.VmUnavailable as exc:
        pytest.skip(str(exc))
    with pytest.raises(vm_harness.VmError, match=r"within 3 s.*never started") as exc:
        vm_harness.run_in_guest("sleep 600", tmp_path, timeout=3, tools=tools)
    assert "guest console" in str(exc.value)
    assert (tmp_path / "console.log").exists()


def test_disk_image_has_one_partition_after_the_first_mib(vm_harness, tmp_path):
    disk = tmp_path / "disk.img"
    vm_harness.write_disk_image(disk, 64)
    data = disk.read_bytes()
    assert len(data) == 64 << 20
    assert data[510:512] == b"\x55\xaa"
    entry = data[446:462]
    assert entry[4] == 0x83  # Linux
    start = int.from_bytes(entry[8:12], "little")
    count = int.from_bytes(entry[12:16], "little")
    assert start == 2048
    assert start + count == (64 << 20) // 512  # to the last sector
    assert data[462:510] == bytes(48)  # the other three entries are empty
    assert disk.stat().st_blocks * 512 < 1 << 20  # sparse: costs no real disk space


def test_qemu_without_virtfs_is_unavailable(vm_harness, tmp_path):
    # Stands in for a qemu build without virtfs (such builds exist; none is packaged here).
    fake = tmp_path / "qemu-system-x86_64"
    fake.write_text("#!/bin/sh\necho 'name \"virtio-blk-pci\", bus PCI'\n")
    fake.chmod(0o755)
    with pytest.raises(vm_harness.VmUnavailable, match="no virtio-9p-pci"):
        vm_harness._check_qemu_devices(fake)


def test_installed_qemu_has_the_devices(vm_harness):
    qemu = shutil.which("qemu-system-x86_64")
    if qemu is None:
        pytest.skip("needs qemu-system-x86_64 (apt-get install qemu-system-x86)")
    vm_harness._check_qemu_devices(Path(qemu))  # raises if either device is missing


def test_init_script_binds_back_paths_hidden_by_guest_tmpfs(vm_harness):
    script = vm_harness.init_script([], keep=("/tmp/ci/clone", "/work/main/.venv"))
    save = script.index("mount -o bind /host/tmp/ci/clone /keep/tmp/ci/clone")
    tmpfs = script.index("mount -t tmpfs -o mode=1777 tmpfs /host/$d")
    restore = script.index("mount -o bind /keep/tmp/ci/clone /host/tmp/ci/clone")
    assert save < tmpfs < restore
    assert "/work/main/.venv" not in script  # not under /tmp or /run: visible as it is


# ------------------------------------------------------------------ the systemd guest


def test_systemd_init_builds_an_overlay_root_and_hands_over_to_systemd(vm_harness):
    script = vm_harness.systemd_init_script(
        ["kernel/fs/overlayfs/overlay.ko"], keep=("/tmp/ci/clone", "/work/main/.venv")
    )
    order = [
        script.index(s)
        for s in (
            "insmod /modules/overlay.ko",
            "mount -t 9p -o trans=virtio,version=9p2000.L,ro,cache=loose,msize=512000 host /lower",
            "mount -t overlay -o lowerdir=/lower,upperdir=/upper/data,workdir=/upper/work",
            "rm -f /root/.dockerenv",
            "mount -t tmpfs -o mode=1777 tmpfs /root/tmp",
            "mount -o bind /lower/tmp/ci/clone /root/tmp/ci/clone",  # bound back over /tmp
            "/root/tmp/nri-sla-vm",  # the I/O share, on the fresh /tmp
            "cp -a /overlay/. /root/",
            "mount --move /$d /root/$d",
            "exec switch_root /root /lib/systemd/systemd",
        )
    ]
    assert order == sorted(order)
    assert "/work/main/.venv" not in script  # not under /tmp or /run: visible as it is
    assert "poweroff" not in script.split("exec switch_root")[1]  # systemd powers off


def test_systemd_overlay_boots_one_unit_and_masks_the_slow_ones(vm_harness, tmp_path):
    files = {name: (mode, data) for name, mode, data in vm_harness.systemd_overlay_files()}
    unit_dir = "overlay/etc/systemd/system"
    target = files[f"{unit_dir}/{vm_harness.SYSTEMD_TARGET}"][1].decode()
    assert f"Requires=basic.target {vm_harness.SYSTEMD_COMMAND_UNIT}" in target
    service = files[f"{unit_dir}/{vm_harness.SYSTEMD_COMMAND_UNIT}"][1].decode()
    for line in (
        "Type=oneshot",
        "SuccessAction=poweroff-immediate",
        "FailureAction=poweroff-immediate",
        "TimeoutStartSec=infinity",
        "ExecStart=/bin/sh /etc/nri-sla-vm/command.sh",
    ):
        assert line in service.splitlines()
    command = files["overlay/etc/nri-sla-vm/command.sh"][1].decode()
    io = vm_harness.GUEST_IO_DIR
    assert (
        command.index(f"> {io}/started")
        < command.index(f"{io}/run.sh")
        < command.index(f"mv {io}/rc.tmp {io}/rc")
    )
    for unit in ("systemd-udevd.service", "timers.target", "getty.target"):
        mode, target_path = files[f"{unit_dir}/{unit}"]
        assert stat.S_ISLNK(mode) and target_path == b"/dev/null"
    generators = [n for n in files if n.startswith("overlay/etc/systemd/system-generators/")]
    if any(d.is_dir() for d in vm_harness.SYSTEMD_GENERATOR_DIRS):
        assert "overlay/etc/systemd/system-generators/systemd-fstab-generator" in generators
    assert files["overlay/etc/fstab"][1].startswith(b"#")  # the host's names host disks
    assert b"d /tmp 1777 root root -" in files["overlay/etc/tmpfiles.d/tmp.conf"][1]


def test_qemu_command_for_the_systemd_guest(vm_harness, tmp_path):
    tools = vm_harness.VmTools(
        Path("/usr/bin/qemu-system-x86_64"),
        Path("/boot/vmlinuz-x"),
        Path("/usr/lib/modules/x"),
        Path("/bin/busybox"),
    )
    disks = [tmp_path / "a.img", tmp_path / "b.img"]
    cmd = vm_harness.qemu_command(
        tools, tmp_path / "i.cpio", tmp_path / "io", disks, init=vm_harness.SYSTEMD
    )
    append = cmd[cmd.index("-append") + 1]
    assert f"systemd.unit={vm_harness.SYSTEMD_TARGET}" in append
    assert [cmd[i + 1] for i, a in enumerate(cmd) if a == "-drive"] == [
        f"file={d},if=virtio,format=raw" for d in disks
    ]
    busybox = vm_harness.qemu_command(tools, tmp_path / "i.cpio", tmp_path / "io", disks[0])
    assert "systemd.unit" not in busybox[busybox.index("-append") + 1]


def test_systemd_guest_without_systemd_says_what_to_install(vm_harness, tmp_path, monkeypatch):
    monkeypatch.setattr(vm_harness, "SYSTEMD_INIT", tmp_path / "no-systemd")
    tools = vm_harness.VmTools(Path("/q"), Path("/k"), Path("/m"), Path("/b"))
    with pytest.raises(vm_harness.VmUnavailable, match="apt-get install systemd"):
        vm_harness.run_in_guest("true", tmp_path, tools=tools, init=vm_harness.SYSTEMD)


def test_systemd_initramfs_unpacks_with_units_and_masks(vm_harness, tmp_path):
    try:
        tools = vm_harness.find_tools()
    except vm_harness.VmUnavailable as exc:
        pytest.skip(str(exc))
    archive = vm_harness.build_initramfs(tools, tmp_path / "i.cpio", init=vm_harness.SYSTEMD)
    out = tmp_path / "out"
    out.mkdir()
    subprocess.run(
        [str(tools.busybox), "cpio", "-i", "-d"],
        input=archive.read_bytes(),
        cwd=out,
        check=True,
        capture_output=True,
    )
    assert (out / "modules" / "overlay.ko").is_file()
    assert not (out / "modules" / "bfq.ko").exists()  # systemd loads what else it needs
    masked = out / "overlay/etc/systemd/system/systemd-udevd.service"
    assert masked.is_symlink() and str(masked.readlink()) == "/dev/null"
    assert "switch_root" in (out / "init").read_text()


def test_two_guests_on_two_cores_get_one_host_thread_each(vm_harness):
    kinds = vm_harness.GUEST_KINDS
    busybox, systemd = kinds[vm_harness.BUSYBOX], kinds[vm_harness.SYSTEMD]
    # The busybox guest's cpuset tests need CPUs 0 and 1: both, on one TCG thread.
    assert vm_harness.guest_cpus(busybox, 1) == vm_harness.GuestCpus(2, "tcg,thread=single")
    assert vm_harness.guest_cpus(systemd, 1) == vm_harness.GuestCpus(1, "tcg,thread=multi")
    # Alone on two cores (or with more cores to share), as before: 2 vCPUs, a thread each.
    for kind in (busybox, systemd):
        for share in (2, 8):
            assert vm_harness.guest_cpus(kind, share) == vm_harness.DEFAULT_CPUS


def test_qemu_command_takes_the_guest_cpus_unless_the_accel_is_set(
    vm_harness, tmp_path, monkeypatch
):
    tools = vm_harness.VmTools(
        Path("/usr/bin/qemu-system-x86_64"),
        Path("/boot/vmlinuz-x"),
        Path("/usr/lib/modules/x"),
        Path("/bin/busybox"),
    )
    monkeypatch.delenv(vm_harness.ACCEL_ENV, raising=False)
    cpus = vm_harness.GuestCpus(2, "tcg,thread=single")
    cmd = vm_harness.qemu_command(
        tools, tmp_path / "i.cpio", tmp_path / "io", tmp_path / "d.img", cpus=cpus
    )
    assert cmd[cmd.index("-smp") + 1] == "2"
    assert cmd[cmd.index("-accel") + 1] == "tcg,thread=single"
    monkeypatch.setenv(vm_harness.ACCEL_ENV, "kvm")
    cmd = vm_harness.qemu_command(
        tools, tmp_path / "i.cpio", tmp_path / "io", tmp_path / "d.img", cpus=cpus
    )
    assert cmd[cmd.index("-accel") + 1] == "kvm"


@pytest.mark.vm
def test_cancelling_a_guest_kills_it_at_once(vm_harness, tmp_path):
    """What the session does with a guest still running when the session ends."""
    try:
        tools = vm_harness.find_tools()
    except vm_harness.VmUnavailable as exc:
        pytest.skip(str(exc))
    cancel = threading.Event()
    threading.Timer(1.0, cancel.set).start()
    started = time.monotonic()
    with pytest.raises(vm_harness.VmError, match="cancelled"):
        vm_harness.run_in_guest("sleep 600", tmp_path, timeout=60, tools=tools, cancel=cancel)
    assert time.monotonic() - started < 30
