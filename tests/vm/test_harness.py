"""Host-side tests of the guest harness pieces that need no qemu: module ordering,
the initramfs archive, tool discovery, and the timeout path (that one boots qemu briefly).
"""

import lzma
import shutil
import stat
import subprocess
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
    assert order.index("kernel/fs/netfs/netfs.ko") < order.index(
        "kernel/fs/fscache/fscache.ko") < order.index("kernel/fs/9p/9p.ko")
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
        pytest.skip("needs qemu-system-x86_64 and a static busybox "
                    "(apt-get install qemu-system-x86 busybox-static)")
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
    archive = vm_harness.cpio_newc([
        ("bin", stat.S_IFDIR | 0o755, b""),
        ("bin/tool", stat.S_IFREG | 0o755, b"#!/bin/sh\necho hi\n"),
        ("bin/link", stat.S_IFLNK | 0o777, b"tool"),
        ("odd", stat.S_IFREG | 0o644, b"x" * 5),  # lengths that need padding
    ])
    out = tmp_path / "out"
    out.mkdir()
    subprocess.run([str(busybox), "cpio", "-i", "-d"], input=archive, cwd=out, check=True,
                   capture_output=True)
    assert (out / "bin" / "tool").read_bytes() == b"#!/bin/sh\necho hi\n"
    assert (out / "bin" / "tool").stat().st_mode & 0o777 == 0o755
    assert (out / "bin" / "link").is_symlink()
    assert str(Path((out / "bin" / "link").readlink())) == "tool"
    assert (out / "odd").read_bytes() == b"xxxxx"


def test_init_script_loads_modules_in_order_and_mounts_cgroup2(vm_harness):
    script = vm_harness.init_script(["kernel/a/first.ko", "kernel/b/second.ko.xz"])
    assert script.index("insmod /modules/first.ko") < script.index(
        "insmod /modules/second.ko")
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
    fake.write_text('#!/bin/sh\necho \'name "virtio-blk-pci", bus PCI\'\n')
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
