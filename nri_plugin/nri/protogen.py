"""Regenerate the protobuf modules in nri_plugin/nri/pb/ from proto/*.proto.

    python -m nri_plugin.nri.protogen [--out DIR]

Needs grpcio-tools (a dev/test dependency); the generated modules need only protobuf.
The committed modules must equal what this produces: tests/nri/test_protogen.py checks.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from importlib import resources
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PROTO_DIR = REPO / "proto"
PB_DIR = Path(__file__).resolve().parent / "pb"
PROTOS = ("nri.proto", "ttrpc.proto")


class ProtogenError(RuntimeError):
    """protoc failed or grpcio-tools is missing."""


def run_protoc(args: list[str], what: str) -> None:
    """Run grpcio-tools' protoc with `args` (the well-known types are on the include
    path); ProtogenError when grpcio-tools is missing or protoc fails."""
    try:
        from grpc_tools import protoc
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ProtogenError("grpcio-tools is needed: pip install 'nri-sla[test]'") from exc
    # google/protobuf/any.proto ships inside grpc_tools.
    include = resources.files("grpc_tools") / "_proto"
    rc = protoc.main(["protoc", *args, f"-I{include}"])
    if rc != 0:
        raise ProtogenError(f"protoc exited {rc} for {what}")


def generate(out_dir: Path, proto_dir: Path = PROTO_DIR) -> list[Path]:
    """Run protoc for every proto in PROTOS; return the written module paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    run_protoc([f"-I{proto_dir}", f"--python_out={out_dir}",
                *(str(proto_dir / name) for name in PROTOS)], ", ".join(PROTOS))
    return [out_dir / (Path(name).stem + "_pb2.py") for name in PROTOS]


def protogen_main(module: str, doc: str, generate_into: Callable[[Path], list[Path]],
                  default_out: Path, argv: list[str] | None = None) -> int:
    """The command line of a generator `module` (`doc`: its docstring): `--out DIR`, the
    written paths printed."""
    parser = argparse.ArgumentParser(prog=f"python -m {module}",
                                     description=doc.splitlines()[0])
    parser.add_argument("--out", type=Path, default=default_out, help=f"default {default_out}")
    args = parser.parse_args(argv)
    try:
        for path in generate_into(args.out):
            print(path)
    except ProtogenError as exc:
        print(f"protogen: {exc}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    return protogen_main("nri_plugin.nri.protogen", __doc__ or "", generate, PB_DIR, argv)


if __name__ == "__main__":
    sys.exit(main())
