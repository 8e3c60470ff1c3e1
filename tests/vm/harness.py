"""Throwaway qemu guest with a real cgroup v2 hierarchy, for tests that need one.

The host this project is developed and tested on is cgroup v1 (hybrid). To test the v2
writers, `runc` on v2 and the hook on v2 for real, we boot the distribution kernel under
qemu (TCG; no KVM needed) with a tiny initramfs that we build here: busybox plus the
virtio/9p modules. The guest mounts the host root read-only over 9p, puts fresh tmpfs on
/tmp and /run, mounts cgroup2 (v1 disabled on the kernel command line), enables the
controllers, chroots into the host root and runs one shell script handed in through a
second, writable 9p share. The same share carries the results back. The host Python,
virtualenv and runc are therefore used as they are; nothing is installed into the guest.

A second kind of guest boots systemd as PID 1 (init="systemd"): the initramfs lays a
tmpfs overlay over the read-only host root (so the guest may install packages and write
unit files: all of it is gone when the guest powers off), masks the units that only slow
an emulated boot down, and switch_roots into /lib/systemd/systemd, which boots a target of
one unit: the guest command, after which systemd powers the machine off.

Usable both as a library (tests/vm/conftest.py loads it) and as a script:
    .venv/bin/python tests/vm/harness.py [pytest args...]   # default: tests/vm/guest
    .venv/bin/python tests/vm/harness.py --systemd [pytest args...]
                                    # the systemd guest; default: tests/vm/systemd_guest
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
import threading
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

# The systemd guest's initramfs needs only the way to its root: virtio, 9p, overlayfs (and
# the scratch disk's driver: without udev nobody else loads it). systemd loads anything
# else from the host's /usr/lib/modules, which is the booted kernel's.
SYSTEMD_GUEST_MODULES = ("virtio_pci", "virtio_blk", "9pnet_virtio", "9p", "overlay")

BUSYBOX = "busybox"
SYSTEMD = "systemd"
INITS = (BUSYBOX, SYSTEMD)


@dataclasses.dataclass(frozen=True)
class GuestKind:
    """A kind of guest and the directory of guest tests that runs in it."""

    init: str  # BUSYBOX or SYSTEMD
    tests: str  # relative to the repository
    label: str  # names the guest in summaries
    timeout: float  # seconds for a whole run
    per_test_timeout: float  # inside the guest (pytest-timeout), fixtures included
    disks: int = 1
    cpus: int = 1  # the fewest vCPUs its tests need


GUEST_KINDS = {
    # Two vCPUs at least: the cpuset tests name CPUs 0 and 1.
    BUSYBOX: GuestKind(BUSYBOX, "tests/vm/guest", "cgroup v2 guest", 420, 120, cpus=2),
    # Generous: dpkg -i and Python starting as a service take tens of seconds each under
    # TCG on a loaded host. Two disks: io.max on two devices is what the plugin writes
    # itself (tests/vm/systemd_guest/test_packaged_service.py).
    SYSTEMD: GuestKind(SYSTEMD, "tests/vm/systemd_guest", "systemd guest", 600, 300, 2),
}

KERNEL_ARGS = (
    "cgroup_no_v1=all systemd.unified_cgroup_hierarchy=1 console=ttyS0 panic=-1 "
    # Under TCG the speculative-execution mitigations only cost time.
    "mitigations=off loglevel=4"
)

# The guest sees the I/O share here (inside the chroot, on the guest's fresh /tmp).
GUEST_IO_DIR = "/tmp/nri-sla-vm"
GUEST_ENV_FLAG = "NRI_SLA_VM_GUEST"
# What runs as PID 1 in the guest (BUSYBOX or SYSTEMD), for the guest tests' skip checks.
GUEST_INIT_ENV = "NRI_SLA_VM_INIT"
# The systemd guest's path to the Debian package the host built into the I/O share.
GUEST_DEB_ENV = "NRI_SLA_VM_DEB"

# The systemd guest boots this target: the guest command's unit and basic.target.
SYSTEMD_TARGET = "nri-sla-vm.target"
SYSTEMD_COMMAND_UNIT = "nri-sla-vm.service"
# Units masked in the systemd guest, and why. What is left to boot is the core of
# sysinit.target (journald, tmpfiles, sysctl, the API file systems), sockets.target (dbus
# is socket-activated: runc's and containerd's systemd cgroup drivers use the bus when it
# is there) and the command. Each unit start costs a fork+exec of a dynamically linked
# binary over 9p, about 0.2-1 s under TCG.
SYSTEMD_MASKED = (
    # persistent timers (apt-daily, man-db, fstrim, ...) would fire at the first boot
    "timers.target",
    # no hotplug: the initramfs loaded the drivers of the few virtio devices, and udev's
    # coldplug (trigger + settle) costs many seconds under TCG
    "systemd-udevd.service",
    "systemd-udevd-control.socket",
    "systemd-udevd-kernel.socket",
    "systemd-udev-trigger.service",
    "systemd-udev-settle.service",
    # no login on the console, no network, no hardware to probe
    "getty.target",
    "serial-getty@ttyS0.service",
    "systemd-timesyncd.service",
    "systemd-networkd.service",
    "networking.service",
    "systemd-pstore.service",
    "proc-sys-fs-binfmt_misc.automount",
    "systemd-binfmt.service",
    "systemd-firstboot.service",
    "systemd-repart.service",
    # state a throwaway machine does not keep: users (the host's are there), the
    # journal on disk (it stays in /run), the random seed, utmp; the host's root is
    # neither remounted nor given static device nodes (devtmpfs has them)
    "systemd-sysusers.service",
    "systemd-journal-flush.service",
    "systemd-random-seed.service",
    "systemd-update-utmp.service",
    "systemd-remount-fs.service",
    "systemd-tmpfiles-setup-dev.service",
    "kmod-static-nodes.service",
    "systemd-modules-load.service",
    # debug and special-purpose file systems nothing here uses
    "sys-kernel-config.mount",
    "sys-fs-fuse-connections.mount",
    "sys-kernel-debug.mount",
    "sys-kernel-tracing.mount",
    "dev-hugepages.mount",
)
# Generators run before any unit (each a process: seconds in all under TCG); the guest
# needs none (no fstab, crypttab, gettys or SysV scripts), so all of them are masked.
SYSTEMD_GENERATOR_DIRS = (
    Path("/lib/systemd/system-generators"),
    Path("/usr/lib/systemd/system-generators"),
)

# TCG by default: /dev/kvm may exist yet be unusable (nested virtualisation: qemu aborts
# setting MSRs). Set NRI_SLA_VM_ACCEL=kvm where KVM works.
ACCEL_ENV = "NRI_SLA_VM_ACCEL"
# The most vCPUs a guest gets, however many host cores there are: the guest tests are
# mostly one process at a time.
MAX_GUEST_CPUS = 2

APT_HINT = "apt-get install qemu-system-x86 linux-image-amd64 busybox-static"
SYSTEMD_INIT = Path("/lib/systemd/systemd")


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
class GuestCpus:
    """A guest's vCPUs and how TCG runs them on the host (qemu's -smp and -accel)."""

    cpus: int
    accel: str


def host_cores() -> int:
    return len(os.sched_getaffinity(0))


def guest_cpus(kind: GuestKind, host_threads: int) -> GuestCpus:
    """vCPUs for a guest of `kind` whose share of the host is `host_threads` cores (all of
    them when it runs alone, half each when two guests boot at once): as many as its share,
    MAX_GUEST_CPUS at most and never fewer than its tests need. TCG runs one host thread
    per vCPU only when the share has a core for each (more busy threads than cores only
    contend on a 2-core host); otherwise one thread runs all of the guest's vCPUs."""
    cpus = max(kind.cpus, min(host_threads, MAX_GUEST_CPUS))
    return GuestCpus(cpus, "tcg,thread=multi" if host_threads >= cpus else "tcg,thread=single")


DEFAULT_CPUS = GuestCpus(2, "tcg,thread=multi")


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


def find_tools(
    boot_dir: Path = Path("/boot"), modules_root: Path = Path("/usr/lib/modules")
) -> VmTools:
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
            f"modules.dep ({APT_HINT})"
        )
    _, kernel, mod_dir = max(pairs)
    busybox = _find_static_busybox()
    if busybox is None:
        raise VmUnavailable(f"no static busybox binary ({APT_HINT})")
    return VmTools(Path(qemu), kernel, mod_dir, busybox)


def _check_qemu_devices(qemu: Path) -> None:
    """Some qemu builds lack virtfs (9p); the guest cannot reach the host root without it."""
    try:
        out = subprocess.run(
            [str(qemu), "-device", "help"],
            capture_output=True,
            text=True,
            timeout=30,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise VmUnavailable(f"{qemu} -device help failed: {exc}") from None
    listing = out.stdout + out.stderr
    for device in ("virtio-9p-pci", "virtio-blk-pci"):
        if f'"{device}"' not in listing:
            raise VmUnavailable(
                f"{qemu} has no {device} device (this qemu build lacks "
                f"virtfs/virtio; Debian's qemu-system-x86 has them)"
            )


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
                f"(install linux-image-amd64 and boot its kernel)"
            )
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


def _init_prologue(modules: list[str]) -> str:
    """Both inits start alike: busybox applets, API filesystems, the modules."""
    insmods = "\n".join(
        f"insmod /modules/{Path(m).name.split('.ko')[0]}.ko || fail 'insmod {m}'" for m in modules
    )
    return f"""#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
fail() {{ echo "NRI_SLA_VM: init failed: $*"; poweroff -f; }}
mount -t proc proc /proc && mount -t sysfs sys /sys && mount -t devtmpfs dev /dev \\
  || fail "mount proc/sys/dev"
echo "NRI_SLA_VM: init: loading modules (uptime $(cat /proc/uptime))"
{insmods}
"""


HOST_9P_OPTIONS = "trans=virtio,version=9p2000.L,ro,cache=loose,msize=512000"
IO_9P_OPTIONS = "trans=virtio,version=9p2000.L,msize=512000"


def _hidden_by_tmpfs(keep: tuple[str, ...]) -> list[str]:
    return [p for p in keep if Path(p).parts[1:2] in (("tmp",), ("run",))]


def init_script(modules: list[str], keep: tuple[str, ...] = ()) -> str:
    """The busybox guest's /init: busybox sh, runs as PID 1 in the initramfs.

    `keep`: host paths (the repository, the virtualenv) that lie under /tmp or /run, which
    the guest covers with fresh tmpfs; they are bind-mounted back on top of it (a CI clone
    may well live in /tmp).
    """
    controllers = " ".join(f"+{c}" for c in GUEST_CONTROLLERS)
    io = f"/host{GUEST_IO_DIR}"
    hidden = _hidden_by_tmpfs(keep)
    save = "".join(
        f"mkdir -p /keep{p} && mount -o bind /host{p} /keep{p} || fail 'keep {p}'\n" for p in hidden
    )
    restore = "".join(
        f"mkdir -p /host{p} && mount -o bind /keep{p} /host{p} || fail 'restore {p}'\n"
        for p in hidden
    )
    return (
        _init_prologue(modules)
        + f"""mkdir -p /host
mount -t 9p -o {HOST_9P_OPTIONS} host /host || fail "mount host root over 9p"
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
mount -t 9p -o {IO_9P_OPTIONS} io {io} || fail "mount io share"
cat /proc/uptime > {io}/started
echo "NRI_SLA_VM: running command (uptime $(cat /proc/uptime))"
chroot /host /bin/sh {GUEST_IO_DIR}/run.sh > {io}/output.txt 2>&1
echo $? > {io}/rc.tmp && mv {io}/rc.tmp {io}/rc
echo "NRI_SLA_VM: command finished rc=$(cat {io}/rc) (uptime $(cat /proc/uptime))"
sync
umount {io}
poweroff -f
"""
    )


def systemd_init_script(modules: list[str], keep: tuple[str, ...] = ()) -> str:
    """The systemd guest's /init: builds the root and hands PID 1 over to systemd.

    The root is an overlay: the host root (9p, read-only) below, a tmpfs above, so the
    guest can write anywhere and nothing reaches the host. /tmp and /run are fresh tmpfs
    (with `keep` bound back, as in the busybox guest); the I/O share is on /tmp. The unit
    files of /overlay (systemd_overlay_files) are copied in before systemd starts.
    """
    io = f"/root{GUEST_IO_DIR}"
    binds = "".join(
        f"mkdir -p /root{p} && mount -o bind /lower{p} /root{p} || fail 'keep {p}'\n"
        for p in _hidden_by_tmpfs(keep)
    )
    return (
        _init_prologue(modules)
        + f"""mkdir -p /lower /upper /root
mount -t 9p -o {HOST_9P_OPTIONS} host /lower || fail "mount host root over 9p"
mount -t tmpfs -o mode=755 tmpfs /upper && mkdir /upper/data /upper/work \\
  || fail "tmpfs for the overlay"
mount -t overlay -o lowerdir=/lower,upperdir=/upper/data,workdir=/upper/work overlay /root \\
  || fail "overlay over the host root"
# A host that is itself a container has /.dockerenv: systemd would take the guest for a
# container too and ignore the kernel command line (systemd.unit=).
rm -f /root/.dockerenv
mount -t tmpfs -o mode=1777 tmpfs /root/tmp \\
  && mount -t tmpfs -o mode=755,nosuid,nodev tmpfs /root/run || fail "tmpfs /tmp, /run"
{binds}mkdir -p {io}
mount -t 9p -o {IO_9P_OPTIONS} io {io} || fail "mount io share"
cp -a /overlay/. /root/ || fail "copy the guest's unit files"
echo "NRI_SLA_VM: switching root to systemd (uptime $(cat /proc/uptime))"
for d in dev proc sys; do mount --move /$d /root/$d || fail "move /$d"; done
exec switch_root /root {SYSTEMD_INIT}
"""
    )


def systemd_overlay_files() -> list[tuple[str, int, bytes]]:
    """Files the systemd guest gets on top of the host root: the target it boots, the
    unit that runs the guest command and powers off, the masks, and an empty fstab and
    crypttab (the host's would name the host's disks, which the guest waits for)."""
    io = GUEST_IO_DIR
    command = f"""#!/bin/sh
# The guest command (tests/vm/harness.py): marks the end of boot, runs run.sh, keeps its
# output and exit status in the I/O share. The unit powers the guest off afterwards.
cat /proc/uptime > {io}/started
echo "NRI_SLA_VM: running command (uptime $(cat /proc/uptime))" > /dev/console
/bin/sh {io}/run.sh > {io}/output.txt 2>&1
echo $? > {io}/rc.tmp && mv {io}/rc.tmp {io}/rc
echo "NRI_SLA_VM: command finished rc=$(cat {io}/rc) (uptime $(cat /proc/uptime))" \\
  > /dev/console
sync
"""
    target = f"""[Unit]
Description=nri-sla test guest: basic system and the guest command
Requires=basic.target {SYSTEMD_COMMAND_UNIT}
After=basic.target
AllowIsolate=yes
"""
    service = """[Unit]
Description=nri-sla test guest command (tests/vm/harness.py)
After=basic.target
# Whatever the command's exit status (it is in the I/O share, synced), the guest ends
# here, at once: a regular shutdown would wait 90 s for a container's PID 1 that ignores
# SIGTERM (a test that leaks one must not cost that).
SuccessAction=poweroff-immediate
FailureAction=poweroff-immediate

[Service]
Type=oneshot
ExecStart=/bin/sh /etc/nri-sla-vm/command.sh
# The host side bounds the whole run (NRI_SLA_VM_TIMEOUT), not systemd's 90 s default.
TimeoutStartSec=infinity
StandardOutput=journal+console
"""
    tmpfiles = (
        "# The guest's /tmp is a fresh tmpfs holding bind mounts and the I/O share:\n"
        "# create it, never clean it (the stock tmp.conf says D: empty at boot).\n"
        "d /tmp 1777 root root -\n"
    )
    reg = stat.S_IFREG | 0o644
    files: list[tuple[str, int, bytes]] = [
        (d, stat.S_IFDIR | 0o755, b"")
        for d in (
            "overlay",
            "overlay/etc",
            "overlay/etc/systemd",
            "overlay/etc/systemd/system",
            "overlay/etc/tmpfiles.d",
            "overlay/etc/nri-sla-vm",
        )
    ]
    files += [
        ("overlay/etc/nri-sla-vm/command.sh", stat.S_IFREG | 0o755, command.encode()),
        (f"overlay/etc/systemd/system/{SYSTEMD_TARGET}", reg, target.encode()),
        (f"overlay/etc/systemd/system/{SYSTEMD_COMMAND_UNIT}", reg, service.encode()),
        ("overlay/etc/tmpfiles.d/tmp.conf", reg, tmpfiles.encode()),
        ("overlay/etc/fstab", reg, b"# nri-sla test guest: nothing to mount\n"),
        ("overlay/etc/crypttab", reg, b""),
    ]
    files += [
        (f"overlay/etc/systemd/system/{unit}", stat.S_IFLNK | 0o777, b"/dev/null")
        for unit in SYSTEMD_MASKED
    ]
    generators = sorted({g.name for d in SYSTEMD_GENERATOR_DIRS if d.is_dir() for g in d.iterdir()})
    if generators:
        files.append(("overlay/etc/systemd/system-generators", stat.S_IFDIR | 0o755, b""))
    files += [
        (f"overlay/etc/systemd/system-generators/{g}", stat.S_IFLNK | 0o777, b"/dev/null")
        for g in generators
    ]
    return files


def build_initramfs(
    tools: VmTools, dest: Path, keep: tuple[str, ...] = (), init: str = BUSYBOX
) -> Path:
    if init not in INITS:
        raise ValueError(f"guest init {init!r}: one of {', '.join(INITS)}")
    wanted = SYSTEMD_GUEST_MODULES if init == SYSTEMD else GUEST_MODULES
    modules = module_load_order(tools.modules_dir, wanted)
    entries: list[tuple[str, int, bytes]] = [
        (d, stat.S_IFDIR | 0o755, b"") for d in ("bin", "dev", "proc", "sys", "modules")
    ]
    entries.append(("bin/busybox", stat.S_IFREG | 0o755, tools.busybox.read_bytes()))
    entries.append(("bin/sh", stat.S_IFLNK | 0o777, b"busybox"))
    for mod in modules:
        name = Path(mod).name.split(".ko")[0] + ".ko"
        entries.append(
            (f"modules/{name}", stat.S_IFREG | 0o644, _read_module(tools.modules_dir / mod))
        )
    if init == SYSTEMD:
        script = systemd_init_script(modules, keep)
        entries += systemd_overlay_files()
    else:
        script = init_script(modules, keep)
    entries.append(("init", stat.S_IFREG | 0o755, script.encode()))
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
    entry = (
        b"\x00"
        + b"\x00\x00\x00"
        + b"\x83"
        + b"\x00\x00\x00"
        + PARTITION_START_SECTOR.to_bytes(4, "little")
        + (sectors - PARTITION_START_SECTOR).to_bytes(4, "little")
    )
    mbr = bytearray(512)
    mbr[446:462] = entry
    mbr[510:512] = b"\x55\xaa"
    with path.open("wb") as f:
        f.write(mbr)
        f.truncate(size_mib << 20)


def qemu_command(
    tools: VmTools,
    initramfs: Path,
    io_dir: Path,
    disk: Path | list[Path],
    memory_mib: int = 1024,
    cpus: GuestCpus = DEFAULT_CPUS,
    init: str = BUSYBOX,
) -> list[str]:
    kernel_args = KERNEL_ARGS
    if init == SYSTEMD:
        kernel_args += f" systemd.unit={SYSTEMD_TARGET}"
    return [
        str(tools.qemu),
        "-accel",
        os.environ.get(ACCEL_ENV) or cpus.accel,
        "-cpu",
        "max",
        "-m",
        str(memory_mib),
        "-smp",
        str(cpus.cpus),
        "-nodefaults",
        "-nographic",
        "-no-reboot",
        "-serial",
        "stdio",
        "-kernel",
        str(tools.kernel),
        "-initrd",
        str(initramfs),
        "-append",
        kernel_args,
        "-virtfs",
        "local,path=/,mount_tag=host,security_model=none,readonly=on,multidevs=remap",
        "-virtfs",
        f"local,path={io_dir},mount_tag=io,security_model=none,multidevs=remap",
        *(
            arg
            for d in (disk if isinstance(disk, list) else [disk])
            for arg in ("-drive", f"file={d},if=virtio,format=raw")
        ),
    ]


def run_in_guest(
    script: str,
    work_dir: Path,
    timeout: float = 240.0,
    tools: VmTools | None = None,
    disk_mib: int = 64,
    keep: tuple[str, ...] = (),
    init: str = BUSYBOX,
    env: dict[str, str] | None = None,
    disks: int = 1,
    cpus: GuestCpus = DEFAULT_CPUS,
    cancel: threading.Event | None = None,
) -> GuestRun:
    """Boot a guest, run `script` (sh) in the host root, power off.

    init=BUSYBOX: the script runs chrooted into the read-only host root from the
    initramfs's /init. init=SYSTEMD: systemd is PID 1 on a writable overlay of the host
    root and runs the script as a oneshot service after basic.target.
    The script runs as root with cwd /, HOME=/tmp, GUEST_ENV_FLAG=1 and GUEST_INIT_ENV set
    to `init`, and `env`; it finds the I/O share at GUEST_IO_DIR (files placed in
    work_dir/io before the boot are there too); /dev/vda (and /dev/vdb... when disks > 1)
    are blank disks of disk_mib MiB.
    Setting `cancel` (from another thread) kills the guest: VmError.
    Raises VmUnavailable if the tools are missing, VmError on a boot failure or timeout.
    """
    tools = tools or find_tools()
    if init == SYSTEMD and not SYSTEMD_INIT.is_file():
        raise VmUnavailable(
            f"no {SYSTEMD_INIT} on this host for the systemd guest (apt-get install systemd)"
        )
    work_dir.mkdir(parents=True, exist_ok=True)
    io_dir = work_dir / "io"
    for stale in ("rc", "rc.tmp", "started", "output.txt", "results.json", "junit.xml"):
        (io_dir / stale).unlink(missing_ok=True)  # none left from an earlier run
    io_dir.mkdir(exist_ok=True)
    initramfs = build_initramfs(tools, work_dir / "initramfs.cpio", keep, init)
    images = [work_dir / ("disk.img" if i == 0 else f"disk{i}.img") for i in range(disks)]
    for image in images:
        write_disk_image(image, disk_mib)
    (io_dir / "run.sh").write_text(
        # The host root is read-only in the guest: caches go to the guest's /tmp.
        f"export HOME=/tmp {GUEST_ENV_FLAG}=1 {GUEST_INIT_ENV}={init} "
        f"PYTHONDONTWRITEBYTECODE=1 "
        f"HYPOTHESIS_STORAGE_DIRECTORY=/tmp/.hypothesis\n"
        f"export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n"
        + "".join(f"export {k}={shlex.quote(v)}\n" for k, v in (env or {}).items())
        + f"cd /\n{script}\n"
    )
    console_path = work_dir / "console.log"
    cancel = cancel or threading.Event()  # one nobody sets: just the poll interval
    cmd = qemu_command(tools, initramfs, io_dir, images, cpus=cpus, init=init)
    started = time.monotonic()
    boot_seconds = None
    timed_out = False
    with console_path.open("wb") as console:
        proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=console, stderr=subprocess.STDOUT
        )
        try:
            while proc.poll() is None:
                if boot_seconds is None and (io_dir / "started").exists():
                    boot_seconds = time.monotonic() - started
                if time.monotonic() - started > timeout:
                    timed_out = True
                    break
                if cancel.wait(0.1):  # the poll interval
                    break
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    total = time.monotonic() - started
    console_text = console_path.read_text(errors="replace")
    rc_file = io_dir / "rc"
    if rc_file.exists():
        return GuestRun(int(rc_file.read_text().strip()), io_dir, console_text, boot_seconds, total)
    if cancel.is_set():
        raise VmError(f"guest killed after {total:.0f} s: cancelled", console_text)
    why = (
        f"guest did not finish within {timeout:.0f} s"
        if timed_out
        else f"guest command never finished (qemu exit {proc.returncode})"
    )
    if boot_seconds is None:  # it never got as far as the command: a boot failure
        raise VmError(
            f"{why}; the guest command never started (console log: {console_path})", console_text
        )
    # The command ran: what it reported so far (results.json) is still worth having.
    return GuestRun(
        None,
        io_dir,
        console_text,
        boot_seconds,
        total,
        error=f"{why} (console log: {console_path})",
    )


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
    paths = {str(repo.resolve()), os.path.realpath(sys.prefix), os.path.realpath(sys.base_prefix)}
    return tuple(sorted(paths))


def pytest_script(repo: Path, python: Path, args: list[str], per_test_timeout: float = 120) -> str:
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
        f"--junitxml={GUEST_IO_DIR}/junit.xml {quoted}\n"
    )


def load_results(io_dir: Path) -> dict[str, dict]:
    """Per-test results the guest conftest recorded: nodeid -> {outcome, longrepr, ...}."""
    path = io_dir / "results.json"
    if not path.exists():
        return {}
    return json.loads(path.read_text())


def _systemd_guest_inputs(repo: Path, io_dir: Path) -> dict[str, str]:
    """The Debian package, built as the pytest fixture builds it, in the I/O share."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "nri_sla_package_tools", repo / "tests" / "packaging" / "package_tools.py"
    )
    tools = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tools)
    io_dir.mkdir(parents=True, exist_ok=True)
    deb = tools.build_deb(io_dir, sys.executable)
    return {GUEST_DEB_ENV: f"{GUEST_IO_DIR}/{deb.name}"}


def main(argv: list[str]) -> int:
    repo = Path(__file__).resolve().parents[2]
    kind = GUEST_KINDS[BUSYBOX]
    if argv[:1] == ["--systemd"]:
        kind, argv = GUEST_KINDS[SYSTEMD], argv[1:]
    args = argv or [kind.tests]
    with tempfile.TemporaryDirectory(prefix="nri-sla-vm-") as tmp:
        env = _systemd_guest_inputs(repo, Path(tmp) / "io") if kind.init == SYSTEMD else {}
        try:
            script = pytest_script(
                repo, Path(sys.executable), args, per_test_timeout=kind.per_test_timeout
            )
            run = run_in_guest(
                script,
                Path(tmp),
                timeout=kind.timeout,
                keep=guest_keep(repo),
                init=kind.init,
                env=env,
                disks=kind.disks,
                cpus=guest_cpus(kind, host_cores()),
            )
        except (VmUnavailable, VmError) as exc:
            print(exc, file=sys.stderr)
            return 2
        print(run.output, end="")
        if run.error:
            print(f"[vm] {run.error}\n{run.console}", file=sys.stderr)
        boot = f"{run.boot_seconds:.1f}" if run.boot_seconds is not None else "?"
        print(f"[vm] boot {boot} s, total {run.total_seconds:.1f} s, rc {run.rc}", file=sys.stderr)
        return run.rc if run.rc is not None else 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
