"""Throwaway qemu guest with a real cgroup v2 hierarchy, for tests that need one.

The host this project is developed and tested on is cgroup v1 (hybrid). To test the v2
writers, `runc` on v2 and the hook on v2 for real, we boot the distribution kernel under
qemu (TCG; no KVM needed) with a tiny initramfs that we build here: busybox plus the
virtio/9p modules. The guest mounts the host root read-only over 9p, puts fresh tmpfs on
/tmp and /run, mounts cgroup2 (v1 disabled on the kernel command line), enables the
controllers, chroots into the host root and runs one shell script handed in through a
second, writable 9p share. The same share carries the results back. The host Python,
virtualenv and runc are therefore used as they are; nothing is installed into the guest.

Usable both as a library (tests/vm/conftest.py loads it) and as a script:
    .venv/bin/python tests/vm/harness.py [pytest args...]   # default: tests/vm/guest
"""

from __future__ import annotations

import dataclasses
import json
import lzma
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

# Modules the guest needs, by name; their dependencies come from modules.dep.
# virtio_pci: the transport of every device below; virtio_blk: the scratch disk (io.max
# needs a real block device); 9pnet_virtio + 9p: the host root and the I/O share; bfq: so
# that io.bfq.weight can be tested too (io.weight needs io.cost or bfq to mean anything).
GUEST_MODULES = ("virtio_pci", "virtio_blk", "9pnet_virtio", "9p", "bfq")

# Controllers enabled for the root's children (what nri-sla writes).
GUEST_CONTROLLERS = ("cpu", "cpuset", "memory", "io", "pids")

KERNEL_ARGS = (
    "cgroup_no_v1=all systemd.unified_cgroup_hierarchy=1 console=ttyS0 panic=-1 "
    # Under TCG the speculative-execution mitigations only cost time.
    "mitigations=off loglevel=4"
)

# The guest sees the I/O share here (inside the chroot, on the guest's fresh /tmp).
GUEST_IO_DIR = "/tmp/nri-sla-vm"
GUEST_ENV_FLAG = "NRI_SLA_VM_GUEST"

# TCG by default: /dev/kvm may exist yet be unusable (nested virtualisation: qemu aborts
# setting MSRs). Set NRI_SLA_VM_ACCEL=kvm where KVM works.
ACCEL_ENV = "NRI_SLA_VM_ACCEL"

APT_HINT = "apt-get install qemu-system-x86 linux-image-amd64 busybox-static"


class VmUnavailable(Exception):
    """This machine cannot boot the test guest; the message says what to install."""


class VmError(Exception):
    """The guest failed to boot or to finish; carries the console log."""

    def __init__(self, message: str, console: str = "") -> None:
        self.console = console
        tail = "\n".join(console.splitlines()[-60:])
        super().__init__(f"{message}\n--- guest console (last 60 lines) ---\n{tail}")


@dataclasses.dataclass(frozen=True)
class VmTools:
    qemu: Path
    kernel: Path
    modules_dir: Path  # /usr/lib/modules/<version of kernel>
    busybox: Path

    @property
    def kernel_version(self) -> str:
        return self.modules_dir.name


@dataclasses.dataclass(frozen=True)
class GuestRun:
    rc: int | None  # exit status of the guest command; None if it never finished
    io_dir: Path  # host side of the I/O share (output.txt, results.json, junit.xml)
    console: str
    boot_seconds: float | None  # qemu start -> guest command start
    total_seconds: float  # qemu start -> qemu exit
    error: str | None = None  # why rc is None (timeout, guest died mid-command)

    @property
    def output(self) -> str:
        path = self.io_dir / "output.txt"
        return path.read_text(errors="replace") if path.exists() else ""


# --------------------------------------------------------------------------- discovery


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", version))


def find_tools(boot_dir: Path = Path("/boot"),
               modules_root: Path = Path("/usr/lib/modules")) -> VmTools:
    """Find qemu, the newest kernel that has its modules installed, and busybox."""
    qemu = shutil.which("qemu-system-x86_64")
    if qemu is None:
        raise VmUnavailable(f"qemu-system-x86_64 not found ({APT_HINT})")
    _check_qemu_devices(Path(qemu))
    pairs = []
    for kernel in boot_dir.glob("vmlinuz-*"):
        version = kernel.name.removeprefix("vmlinuz-")
        mod_dir = modules_root / version
        if (mod_dir / "modules.dep").is_file() and os.access(kernel, os.R_OK):
            pairs.append((_version_key(version), kernel, mod_dir))
    if not pairs:
        raise VmUnavailable(
            f"no readable {boot_dir}/vmlinuz-* with matching {modules_root}/<version>/"
            f"modules.dep ({APT_HINT})")
    _, kernel, mod_dir = max(pairs)
    busybox = _find_static_busybox()
    if busybox is None:
        raise VmUnavailable(f"no static busybox binary ({APT_HINT})")
    return VmTools(Path(qemu), kernel, mod_dir, busybox)


def _check_qemu_devices(qemu: Path) -> None:
    """Some qemu builds lack virtfs (9p); the guest cannot reach the host root without it."""
    try:
        out = subprocess.run([str(qemu), "-device", "help"], capture_output=True, text=True,
                             timeout=30, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise VmUnavailable(f"{qemu} -device help failed: {exc}") from None
    listing = out.stdout + out.stderr
    for device in ("virtio-9p-pci", "virtio-blk-pci"):
        if f'"{device}"' not in listing:
            raise VmUnavailable(f"{qemu} has no {device} device (this qemu build lacks "
                                f"virtfs/virtio; Debian's qemu-system-x86 has them)")


def _find_static_busybox() -> Path | None:
    for candidate in ("/bin/busybox", "/usr/bin/busybox"):
        path = Path(candidate)
        # A dynamic busybox would need its libraries in the initramfs too; a static one
        # has no PT_INTERP program header, i.e. no "/lib64/ld-linux" string near the start.
        if path.is_file() and b"ld-linux" not in path.read_bytes()[:4096]:
            return path
    return None


def module_load_order(modules_dir: Path, wanted: Iterable[str]) -> list[str]:
    """Module paths (relative to modules_dir) in an order insmod can load them.

    modules.dep lines are `path: dep1 dep2`; a module's dependencies come first.
    Built-in modules (modules.builtin) need no loading and are skipped.
    """
    deps: dict[str, list[str]] = {}
    by_name: dict[str, str] = {}
    for line in (modules_dir / "modules.dep").read_text().splitlines():
        if ":" not in line:
            continue
        path, rest = line.split(":", 1)
        deps[path] = rest.split()
        by_name[_module_name(path)] = path
    builtin = set()
    builtin_file = modules_dir / "modules.builtin"
    if builtin_file.is_file():
        builtin = {_module_name(p) for p in builtin_file.read_text().split()}
    order: list[str] = []

    def visit(path: str, chain: tuple[str, ...]) -> None:
        if path in order:
            return
        if path in chain:
            raise VmUnavailable(f"dependency cycle in modules.dep: {' -> '.join(chain)}")
        for dep in deps.get(path, []):
            visit(dep, (*chain, path))
        order.append(path)

    for name in wanted:
        norm = name.replace("-", "_")
        if norm in builtin:
            continue
        if norm not in by_name:
            raise VmUnavailable(
                f"kernel module {name} not in {modules_dir}/modules.dep "
                f"(install linux-image-amd64 and boot its kernel)")
        visit(by_name[norm], ())
    return order


def _module_name(path: str) -> str:
    base = path.rsplit("/", 1)[-1]
    for suffix in (".xz", ".gz", ".zst"):
        base = base.removesuffix(suffix)
    return base.removesuffix(".ko").replace("-", "_")


def _read_module(path: Path) -> bytes:
    """The module's ELF bytes; busybox insmod cannot decompress, so we do it here."""
    data = path.read_bytes()
    if path.suffix == ".xz":
        return lzma.decompress(data)
    if path.suffix == ".gz":
        import gzip
        return gzip.decompress(data)
    if path.suffix == ".zst":
        raise VmUnavailable(f"{path}: .ko.zst modules are not supported (no zstd in stdlib)")
    return data


# --------------------------------------------------------------------------- initramfs


def cpio_newc(entries: Iterable[tuple[str, int, bytes]]) -> bytes:
    """An uncompressed `newc` cpio archive (the format the kernel unpacks as initramfs).

    entries: (path without leading slash, st_mode, data); for symlinks data is the target.
    """
    out = bytearray()

    def add(name: str, mode: int, data: bytes, ino: int) -> None:
        name_b = name.encode() + b"\0"
        nlink = 2 if stat.S_ISDIR(mode) else 1
        fields = (ino, mode, 0, 0, nlink, 0, len(data), 0, 0, 0, 0, len(name_b), 0)
        out.extend(b"070701" + b"".join(b"%08X" % f for f in fields))
        out.extend(name_b)
        out.extend(b"\0" * (-len(out) % 4))
        out.extend(data)
        out.extend(b"\0" * (-len(out) % 4))

    ino = 1
    for name, mode, data in entries:
        add(name, mode, data, ino)
        ino += 1
    add("TRAILER!!!", 0, b"", 0)
    return bytes(out)


def init_script(modules: list[str], keep: tuple[str, ...] = ()) -> str:
    """The guest's /init: busybox sh, runs as PID 1 in the initramfs.

    `keep`: host paths (the repository, the virtualenv) that lie under /tmp or /run, which
    the guest covers with fresh tmpfs; they are bind-mounted back on top of it (a CI clone
    may well live in /tmp).
    """
    insmods = "\n".join(
        f"insmod /modules/{Path(m).name.split('.ko')[0]}.ko || fail 'insmod {m}'"
        for m in modules)
    controllers = " ".join(f"+{c}" for c in GUEST_CONTROLLERS)
    io = f"/host{GUEST_IO_DIR}"
    hidden = [p for p in keep if Path(p).parts[1:2] in (("tmp",), ("run",))]
    save = "".join(f"mkdir -p /keep{p} && mount -o bind /host{p} /keep{p} "
                   f"|| fail 'keep {p}'\n" for p in hidden)
    restore = "".join(f"mkdir -p /host{p} && mount -o bind /keep{p} /host{p} "
                      f"|| fail 'restore {p}'\n" for p in hidden)
    return f"""#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
fail() {{ echo "NRI_SLA_VM: init failed: $*"; poweroff -f; }}
mount -t proc proc /proc && mount -t sysfs sys /sys && mount -t devtmpfs dev /dev \\
  || fail "mount proc/sys/dev"
echo "NRI_SLA_VM: init: loading modules (uptime $(cat /proc/uptime))"
{insmods}
mkdir -p /host
mount -t 9p -o trans=virtio,version=9p2000.L,ro,cache=loose,msize=512000 host /host \\
  || fail "mount host root over 9p"
{save}for d in tmp run; do mount -t tmpfs -o mode=1777 tmpfs /host/$d || fail "tmpfs /$d"; done
{restore}mount -t proc proc /host/proc && mount -t sysfs sys /host/sys \\
  && mount -t devtmpfs dev /host/dev || fail "mount proc/sys/dev in host root"
mkdir -p /host/dev/shm /host/dev/pts
mount -t tmpfs -o mode=1777 tmpfs /host/dev/shm && mount -t devpts devpts /host/dev/pts \\
  || fail "mount /dev/shm, /dev/pts"
mount -t cgroup2 cgroup2 /host/sys/fs/cgroup || fail "mount cgroup2"
echo "{controllers}" > /host/sys/fs/cgroup/cgroup.subtree_control \\
  || fail "enable controllers {controllers}"
mkdir -p {io}
mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000 io {io} || fail "mount io share"
cat /proc/uptime > {io}/started
echo "NRI_SLA_VM: running command (uptime $(cat /proc/uptime))"
chroot /host /bin/sh {GUEST_IO_DIR}/run.sh > {io}/output.txt 2>&1
echo $? > {io}/rc.tmp && mv {io}/rc.tmp {io}/rc
echo "NRI_SLA_VM: command finished rc=$(cat {io}/rc) (uptime $(cat /proc/uptime))"
sync
umount {io}
poweroff -f
"""


def build_initramfs(tools: VmTools, dest: Path, keep: tuple[str, ...] = ()) -> Path:
    modules = module_load_order(tools.modules_dir, GUEST_MODULES)
    entries: list[tuple[str, int, bytes]] = [
        (d, stat.S_IFDIR | 0o755, b"") for d in ("bin", "dev", "proc", "sys", "modules")
    ]
    entries.append(("bin/busybox", stat.S_IFREG | 0o755, tools.busybox.read_bytes()))
    entries.append(("bin/sh", stat.S_IFLNK | 0o777, b"busybox"))
    for mod in modules:
        name = Path(mod).name.split(".ko")[0] + ".ko"
        entries.append((f"modules/{name}", stat.S_IFREG | 0o644,
                        _read_module(tools.modules_dir / mod)))
    entries.append(("init", stat.S_IFREG | 0o755, init_script(modules, keep).encode()))
    dest.write_bytes(cpio_newc(entries))
    return dest


# --------------------------------------------------------------------------- running


PARTITION_START_SECTOR = 2048  # 1 MiB, the usual alignment


def write_disk_image(path: Path, size_mib: int) -> None:
    """A sparse raw disk with an MBR holding one Linux partition (sector 2048 to the end).

    The guest then has /dev/vda (a whole disk) and /dev/vda1 (a partition): io.max must be
    tested on both, since the kernel treats them differently.
    """
    sectors = (size_mib << 20) // 512
    entry = (b"\x00" + b"\x00\x00\x00" + b"\x83" + b"\x00\x00\x00"
             + PARTITION_START_SECTOR.to_bytes(4, "little")
             + (sectors - PARTITION_START_SECTOR).to_bytes(4, "little"))
    mbr = bytearray(512)
    mbr[446:462] = entry
    mbr[510:512] = b"\x55\xaa"
    with path.open("wb") as f:
        f.write(mbr)
        f.truncate(size_mib << 20)


def qemu_command(tools: VmTools, initramfs: Path, io_dir: Path, disk: Path,
                 memory_mib: int = 1024, cpus: int = 2) -> list[str]:
    return [
        str(tools.qemu), "-accel", os.environ.get(ACCEL_ENV, "tcg,thread=multi"),
        "-cpu", "max",
        "-m", str(memory_mib), "-smp", str(cpus),
        "-nodefaults", "-nographic", "-no-reboot", "-serial", "stdio",
        "-kernel", str(tools.kernel), "-initrd", str(initramfs),
        "-append", KERNEL_ARGS,
        "-virtfs", "local,path=/,mount_tag=host,security_model=none,readonly=on,"
                   "multidevs=remap",
        "-virtfs", f"local,path={io_dir},mount_tag=io,security_model=none,multidevs=remap",
        "-drive", f"file={disk},if=virtio,format=raw",
    ]


def run_in_guest(script: str, work_dir: Path, timeout: float = 240.0,
                 tools: VmTools | None = None, disk_mib: int = 64,
                 keep: tuple[str, ...] = ()) -> GuestRun:
    """Boot a guest, run `script` (sh) chrooted into the host root, power off.

    The script runs as root with cwd /, HOME=/tmp and GUEST_ENV_FLAG=1; it finds the I/O
    share at GUEST_IO_DIR and /dev/vda is a blank disk of disk_mib MiB.
    Raises VmUnavailable if the tools are missing, VmError on a boot failure or timeout.
    """
    tools = tools or find_tools()
    work_dir.mkdir(parents=True, exist_ok=True)
    io_dir = work_dir / "io"
    shutil.rmtree(io_dir, ignore_errors=True)  # no stale rc/results from an earlier run
    io_dir.mkdir()
    initramfs = build_initramfs(tools, work_dir / "initramfs.cpio", keep)
    disk = work_dir / "disk.img"
    write_disk_image(disk, disk_mib)
    (io_dir / "run.sh").write_text(
        # The host root is read-only in the guest: caches go to the guest's /tmp.
        f"export HOME=/tmp {GUEST_ENV_FLAG}=1 PYTHONDONTWRITEBYTECODE=1 "
        f"HYPOTHESIS_STORAGE_DIRECTORY=/tmp/.hypothesis\n"
        f"export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n"
        f"cd /\n{script}\n")
    console_path = work_dir / "console.log"
    cmd = qemu_command(tools, initramfs, io_dir, disk)
    started = time.monotonic()
    boot_seconds = None
    timed_out = False
    with console_path.open("wb") as console:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=console,
                                stderr=subprocess.STDOUT)
        try:
            while proc.poll() is None:
                if boot_seconds is None and (io_dir / "started").exists():
                    boot_seconds = time.monotonic() - started
                if time.monotonic() - started > timeout:
                    timed_out = True
                    break
                time.sleep(0.1)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    total = time.monotonic() - started
    console_text = console_path.read_text(errors="replace")
    rc_file = io_dir / "rc"
    if rc_file.exists():
        return GuestRun(int(rc_file.read_text().strip()), io_dir, console_text,
                        boot_seconds, total)
    why = (f"guest did not finish within {timeout:.0f} s" if timed_out
           else f"guest command never finished (qemu exit {proc.returncode})")
    if boot_seconds is None:  # it never got as far as the command: a boot failure
        raise VmError(f"{why}; the guest command never started "
                      f"(console log: {console_path})", console_text)
    # The command ran: what it reported so far (results.json) is still worth having.
    return GuestRun(None, io_dir, console_text, boot_seconds, total,
                    error=f"{why} (console log: {console_path})")


def _output_tail(io_dir: Path, lines: int = 30) -> str:
    """The guest command's last output lines, for a failure message ("" if none)."""
    path = io_dir / "output.txt"
    if not path.exists():
        return ""
    tail = path.read_text(errors="replace").splitlines()[-lines:]
    return "\n--- guest command output (tail) ---\n" + "\n".join(tail) if tail else ""


# --------------------------------------------------------------------------- pytest


def guest_keep(repo: Path) -> tuple[str, ...]:
    """What the guest must see of the host beside its root: the repository and the
    interpreter's prefixes (a virtualenv and its base), wherever they are."""
    paths = {str(repo.resolve()), os.path.realpath(sys.prefix),
             os.path.realpath(sys.base_prefix)}
    return tuple(sorted(paths))


def pytest_script(repo: Path, python: Path, args: list[str],
                  per_test_timeout: float = 120) -> str:
    """The guest script that runs pytest from the repo and leaves results in the share.

    -v prints each node id before the test runs, so the output's tail names a test that
    hangs; the per-test timeout (pytest-timeout) fails such a test with its stack while
    the rest still run, well before the whole guest's timeout.
    """
    quoted = " ".join(shlex.quote(a) for a in args)
    return (
        f"cd {shlex.quote(str(repo))}\n"
        f"{shlex.quote(str(python))} -m pytest -p no:cacheprovider -v "
        f"--timeout={per_test_timeout:.0f} "
        f"--junitxml={GUEST_IO_DIR}/junit.xml {quoted}\n")


def load_results(io_dir: Path) -> dict[str, dict]:
    """Per-test results the guest conftest recorded: nodeid -> {outcome, longrepr, ...}."""
    path = io_dir / "results.json"
    if not path.exists():
        return {}
    return json.loads(path.read_text())


def main(argv: list[str]) -> int:
    repo = Path(__file__).resolve().parents[2]
    args = argv or ["tests/vm/guest"]
    with tempfile.TemporaryDirectory(prefix="nri-sla-vm-") as tmp:
        try:
            run = run_in_guest(pytest_script(repo, Path(sys.executable), args), Path(tmp),
                               keep=guest_keep(repo))
        except (VmUnavailable, VmError) as exc:
            print(exc, file=sys.stderr)
            return 2
        print(run.output, end="")
        if run.error:
            print(f"[vm] {run.error}\n{run.console}", file=sys.stderr)
        boot = f"{run.boot_seconds:.1f}" if run.boot_seconds is not None else "?"
        print(f"[vm] boot {boot} s, total {run.total_seconds:.1f} s, rc {run.rc}",
              file=sys.stderr)
        return run.rc if run.rc is not None else 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
