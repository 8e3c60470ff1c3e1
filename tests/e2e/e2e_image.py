"""Build a tiny OCI image archive offline from a statically linked busybox.

No registry is reachable in CI, so the e2e suite makes its own image: one uncompressed
layer holding /bin/busybox plus the applet links the tests use, and a config whose
entrypoint sleeps forever. The same image serves as the CRI sandbox ("pause") image and
as the workload image. `ctr images import` reads the archive (OCI image layout in a tar).
"""

from __future__ import annotations

import hashlib
import io
import json
import platform
import struct
import tarfile
from dataclasses import dataclass
from pathlib import Path

APPLETS = ("sh", "sleep", "cat", "ls", "echo", "true", "id")
GOARCH = {
    "x86_64": "amd64",
    "aarch64": "arm64",
    "armv7l": "arm",
    "ppc64le": "ppc64le",
    "s390x": "s390x",
    "riscv64": "riscv64",
}
PT_INTERP = 3


class ImageBuildError(RuntimeError):
    """The image cannot be built here (no static busybox, unknown architecture)."""


@dataclass(frozen=True)
class ImageArchive:
    path: Path
    name: str  # full reference, as CRI and ctr see it
    manifest_digest: str


def is_static_elf(path: Path) -> bool:
    """True for a 64-bit little-endian ELF without a program interpreter (no ld.so)."""
    with path.open("rb") as f:
        head = f.read(64)
        if head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:
            return False
        (phoff,) = struct.unpack_from("<Q", head, 0x20)
        phentsize, phnum = struct.unpack_from("<HH", head, 0x36)
        f.seek(phoff)
        table = f.read(phentsize * phnum)
    return all(struct.unpack_from("<I", table, i * phentsize)[0] != PT_INTERP for i in range(phnum))


def _add(
    tar: tarfile.TarFile,
    name: str,
    *,
    data: bytes | None = None,
    mode: int = 0o755,
    link: str | None = None,
) -> None:
    info = tarfile.TarInfo(name)
    info.mtime = 0  # reproducible digests
    info.mode = mode
    if link is not None:
        info.type, info.linkname = tarfile.SYMTYPE, link
        tar.addfile(info)
    elif data is None:
        info.type = tarfile.DIRTYPE
        tar.addfile(info)
    else:
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))


def layer_tar(busybox: Path) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for d in ("bin", "dev", "etc", "proc", "sys", "tmp", "root"):
            _add(tar, d, mode=0o1777 if d == "tmp" else 0o755)
        _add(tar, "bin/busybox", data=busybox.read_bytes())
        for applet in APPLETS:
            _add(tar, f"bin/{applet}", link="busybox", mode=0o777)
        _add(tar, "etc/passwd", data=b"root:x:0:0:root:/root:/bin/sh\n", mode=0o644)
        _add(tar, "etc/group", data=b"root:x:0:\n", mode=0o644)
    return buf.getvalue()


def _blob(blobs: dict[str, bytes], data: bytes) -> tuple[str, int]:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    blobs[digest] = data
    return digest, len(data)


def build_image_archive(
    out: Path, busybox: Path, name: str = "nri-e2e.local/busybox:1"
) -> ImageArchive:
    if not busybox.is_file() or not is_static_elf(busybox):
        raise ImageBuildError(
            f"{busybox} is not a statically linked busybox "
            "(install busybox-static, or set NRI_SLA_E2E_IMAGE_TAR)"
        )
    arch = GOARCH.get(platform.machine())
    if arch is None:
        raise ImageBuildError(f"unknown machine {platform.machine()!r}; known: {', '.join(GOARCH)}")
    blobs: dict[str, bytes] = {}
    layer = layer_tar(busybox)
    layer_digest, layer_size = _blob(blobs, layer)
    config = {
        "architecture": arch,
        "os": "linux",
        "config": {"Entrypoint": ["/bin/sleep", "infinity"], "Env": ["PATH=/bin"]},
        # An uncompressed layer: its digest is also its diff id.
        "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
    }
    config_digest, config_size = _blob(blobs, json.dumps(config, sort_keys=True).encode())
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": config_digest,
            "size": config_size,
        },
        "layers": [
            {
                "mediaType": "application/vnd.oci.image.layer.v1.tar",
                "digest": layer_digest,
                "size": layer_size,
            }
        ],
    }
    man_digest, man_size = _blob(blobs, json.dumps(manifest, sort_keys=True).encode())
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [
            {
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": man_digest,
                "size": man_size,
                "platform": {"architecture": arch, "os": "linux"},
                "annotations": {
                    "io.containerd.image.name": name,
                    "org.opencontainers.image.ref.name": name.rsplit(":", 1)[-1],
                },
            }
        ],
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as tar:
        _add(tar, "oci-layout", data=b'{"imageLayoutVersion":"1.0.0"}', mode=0o644)
        _add(tar, "index.json", data=json.dumps(index).encode(), mode=0o644)
        _add(tar, "blobs")
        _add(tar, "blobs/sha256")
        for digest, data in blobs.items():
            _add(tar, f"blobs/sha256/{digest.split(':', 1)[1]}", data=data, mode=0o644)
    return ImageArchive(out, name, man_digest)
