"""Regenerate the protobuf modules in nri_plugin/nri/pb/ from proto/*.proto.

    python -m nri_plugin.nri.protogen [--out DIR]

Needs grpcio-tools (a dev/test dependency); the generated modules need only protobuf.
Each module comes with its type stub (`_pb2.pyi`, written by mypy-protobuf's protoc
plugins), which is what mypy reads: the modules build their classes at run time, invisible
to a checker. The committed modules and stubs
must equal what this produces: tests/nri/test_protogen.py checks.
"""

from __future__ import annotations

import argparse
import shutil
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


def stub_plugins(*kinds: str) -> list[str]:
    """protoc arguments that load mypy-protobuf's plugins (`mypy`: message stubs,
    `mypy_grpc`: service stubs), found beside this interpreter (a virtualenv's bin/), else
    on PATH; ProtogenError when mypy-protobuf is missing."""
    args = []
    for kind in kinds:
        name = f"protoc-gen-{kind}"
        found = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
        if found is None:
            raise ProtogenError("mypy-protobuf is needed: pip install 'nri-sla[test]'")
        args.append(f"--plugin={name}={found}")
    return args


def generate(out_dir: Path, proto_dir: Path = PROTO_DIR) -> list[Path]:
    """Run protoc for every proto in PROTOS; return the written module and stub paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    run_protoc(
        [
            f"-I{proto_dir}",
            f"--python_out={out_dir}",
            *stub_plugins("mypy"),
            f"--mypy_out={out_dir}",
            *(str(proto_dir / name) for name in PROTOS),
        ],
        ", ".join(PROTOS),
    )
    return [
        out_dir / (Path(name).stem + suffix)
        for name in PROTOS
        for suffix in ("_pb2.py", "_pb2.pyi")
    ]


def protogen_main(
    module: str,
    doc: str,
    generate_into: Callable[[Path], list[Path]],
    default_out: Path,
    argv: list[str] | None = None,
) -> int:
    """The command line of a generator `module` (`doc`: its docstring): `--out DIR`, the
    written paths printed."""
    parser = argparse.ArgumentParser(prog=f"python -m {module}", description=doc.splitlines()[0])
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
