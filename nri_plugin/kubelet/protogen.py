"""Regenerate the protobuf and gRPC modules in nri_plugin/kubelet/pb/ from proto/kubelet/.

    python -m nri_plugin.kubelet.protogen [--out DIR]

Needs grpcio-tools and mypy-protobuf (dev/test dependencies); the generated modules need
protobuf and grpcio. The protos are compiled under the import path nri_plugin/kubelet/pb/,
so the gRPC modules import their messages from this package and the descriptor file names
(nri_plugin/kubelet/pb/<name>.proto) cannot clash with another copy of the same API. Each
module comes with its type stub (`.pyi`, what mypy reads), written by mypy-protobuf's
protoc plugins. The committed modules and stubs must equal what this produces:
tests/kubelet/test_protogen.py checks.
"""

from __future__ import annotations

import sys
from pathlib import Path

from nri_plugin.nri.protogen import protogen_main, run_protoc, stub_plugins

REPO = Path(__file__).resolve().parents[2]
PROTO_DIR = REPO / "proto" / "kubelet"
PACKAGE_PATH = "nri_plugin/kubelet/pb"
PROTOS = ("deviceplugin_v1beta1.proto", "podresources_v1.proto")


def generate(out_root: Path, proto_dir: Path = PROTO_DIR) -> list[Path]:
    """Write <out_root>/nri_plugin/kubelet/pb/<name>_pb2.py and _pb2_grpc.py for every
    proto in PROTOS, and their stubs (.pyi); return their paths."""
    out_root.mkdir(parents=True, exist_ok=True)
    run_protoc(
        [
            f"-I{PACKAGE_PATH}={proto_dir}",
            f"--python_out={out_root}",
            f"--grpc_python_out={out_root}",
            *stub_plugins("mypy", "mypy_grpc"),
            f"--mypy_out={out_root}",
            f"--mypy_grpc_out={out_root}",
            *(f"{PACKAGE_PATH}/{name}" for name in PROTOS),
        ],
        ", ".join(PROTOS),
    )
    out_dir = out_root / PACKAGE_PATH
    return [
        out_dir / (Path(name).stem + suffix)
        for name in PROTOS
        for suffix in ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py", "_pb2_grpc.pyi")
    ]


def main(argv: list[str] | None = None) -> int:
    return protogen_main("nri_plugin.kubelet.protogen", __doc__ or "", generate, REPO, argv)


if __name__ == "__main__":
    sys.exit(main())
