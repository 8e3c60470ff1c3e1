"""A small model of CDI (Container Device Interface) spec files and their resolution, for
the simulator.

A CDI spec file names one kind (`vendor/class`, e.g. `nvidia.com/gpu`) and its devices;
each device, and the spec as a whole, carries container edits (env, device nodes,
mounts). A runtime resolves a fully qualified name `vendor/class=device` against the
spec files of its CDI directories and applies the device's edits, plus once the edits of
every spec a resolved device came from. A name no spec defines fails the container's
creation. Read from real YAML or JSON files (what `nvidia-ctk cdi generate` writes) or
built in code (nri_plugin.simulated.deviceplugin generates the NVIDIA ones).

Only the edits that decide what a container can open are modelled: hooks, net devices
and intel RDT are not.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from nri_plugin.errors import InvalidInput

ANNOTATION_PREFIX = "cdi.k8s.io/"  # CRI annotations whose values list CDI names
MAX_SPEC_BYTES = 1 << 20  # a spec file larger than this is not one an admin wrote

StatFn = Callable[[str], os.stat_result]


@dataclass(frozen=True)
class DeviceNode:
    """A device node to create in the container (OCI linux.devices)."""

    path: str
    type: str
    major: int
    minor: int


@dataclass(frozen=True)
class Mount:
    """A mount to add to the container (OCI mounts)."""

    destination: str
    source: str
    type: str = "bind"
    options: tuple[str, ...] = ()


@dataclass(frozen=True)
class ContainerEdits:
    env: tuple[str, ...] = ()  # "KEY=value"
    device_nodes: tuple[DeviceNode, ...] = ()
    mounts: tuple[Mount, ...] = ()


@dataclass(frozen=True)
class CdiSpec:
    kind: str  # vendor/class
    devices: Mapping[str, ContainerEdits] = field(hash=False)
    edits: ContainerEdits = ContainerEdits()  # applied once for any device of this spec


def parse_name(name: str) -> tuple[str, str]:
    """(kind, device) of a fully qualified CDI name `vendor/class=device`."""
    kind, sep, device = name.partition("=")
    vendor, slash, cls = kind.partition("/")
    if not (sep and slash and vendor and cls and device):
        raise InvalidInput(f"CDI device {name!r}: not a qualified name vendor/class=device")
    return kind, device


def annotation_devices(annotations: Mapping[str, str]) -> list[str]:
    """CDI names in `cdi.k8s.io/*` annotations (a device plugin may return them instead
    of CRI CDI devices; containerd resolves both)."""
    names: list[str] = []
    for key in sorted(annotations):
        if key.startswith(ANNOTATION_PREFIX):
            names += [n.strip() for n in annotations[key].split(",") if n.strip()]
    return names


class CdiRegistry:
    """The specs of a runtime's CDI directories, by kind: several spec files may name one
    kind (a DRA driver writes one per claim), each device in one of them."""

    def __init__(self, specs: Iterable[CdiSpec] = ()) -> None:
        self._specs: dict[str, list[CdiSpec]] = {}
        for spec in specs:
            self.add(spec)

    def add(self, spec: CdiSpec) -> None:
        specs = self._specs.setdefault(spec.kind, [])
        twice = [d for s in specs for d in s.devices if d in spec.devices]
        if twice:
            # CDI lets a later directory override a device; the model keeps one source.
            raise InvalidInput(f"CDI device {spec.kind}={twice[0]} is defined twice")
        specs.append(spec)

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(sorted(self._specs))

    def resolve(self, names: Sequence[str]) -> tuple[ContainerEdits, ...]:
        """The edits to apply, in order: every name's, each spec's own once (before its
        first device's), duplicates once; InvalidInput naming every unresolvable name."""
        unique = list(dict.fromkeys(names))
        edits: list[ContainerEdits] = []
        seen_specs: list[CdiSpec] = []
        missing: list[str] = []
        for name in unique:
            kind, device = parse_name(name)
            spec = next((s for s in self._specs.get(kind, ()) if device in s.devices), None)
            if spec is None:
                missing.append(name)
                continue
            if not any(s is spec for s in seen_specs):
                seen_specs.append(spec)
                edits.append(spec.edits)
            edits.append(spec.devices[device])
        if missing:
            raise InvalidInput(
                f"CDI device injection failed: unresolvable CDI devices {', '.join(missing)}"
            )
        return tuple(edits)


# -- spec files ---------------------------------------------------------------------------


def _strings(value: Any, what: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InvalidInput(f"{what}: expected a list of strings")
    return tuple(value)


def _device_node(entry: Any, where: str, stat_fn: StatFn) -> DeviceNode:
    if not isinstance(entry, dict) or not isinstance(entry.get("path"), str):
        raise InvalidInput(f"{where}: a device node needs a path")
    path = entry["path"]
    major, minor = entry.get("major"), entry.get("minor")
    kind = entry.get("type") or "c"
    if major is None or minor is None:
        # Specs nvidia-ctk writes name only the path: the runtime reads the host's node.
        host = entry.get("hostPath") or path
        try:
            st = stat_fn(host)
        except OSError as exc:
            raise InvalidInput(f"{where}: device node {host}: {exc.strerror}") from None
        major, minor = os.major(st.st_rdev), os.minor(st.st_rdev)
    if not isinstance(major, int) or not isinstance(minor, int):
        raise InvalidInput(f"{where}: device node {path}: major and minor must be integers")
    return DeviceNode(path=path, type=str(kind), major=major, minor=minor)


def _mount(entry: Any, where: str) -> Mount:
    if (
        not isinstance(entry, dict)
        or not isinstance(entry.get("containerPath"), str)
        or not isinstance(entry.get("hostPath"), str)
    ):
        raise InvalidInput(f"{where}: a mount needs hostPath and containerPath")
    return Mount(
        destination=entry["containerPath"],
        source=entry["hostPath"],
        type=str(entry.get("type") or "bind"),
        options=_strings(entry.get("options"), f"{where}: mount options"),
    )


def _edits(raw: Any, where: str, stat_fn: StatFn) -> ContainerEdits:
    if raw is None:
        return ContainerEdits()
    if not isinstance(raw, dict):
        raise InvalidInput(f"{where}: containerEdits must be a mapping")
    nodes = raw.get("deviceNodes") or []
    mounts = raw.get("mounts") or []
    if not isinstance(nodes, list) or not isinstance(mounts, list):
        raise InvalidInput(f"{where}: deviceNodes and mounts must be lists")
    return ContainerEdits(
        env=_strings(raw.get("env"), f"{where}: env"),
        device_nodes=tuple(_device_node(n, where, stat_fn) for n in nodes),
        mounts=tuple(_mount(m, where) for m in mounts),
    )


def parse_spec(text: str, source: str, stat_fn: StatFn = os.stat) -> CdiSpec:
    """One CDI spec from the text of a .yaml or .json file (JSON is YAML too)."""
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise InvalidInput(f"{source}: not a CDI spec: {exc}") from None
    if not isinstance(raw, dict):
        raise InvalidInput(f"{source}: not a CDI spec (expected a mapping)")
    kind = raw.get("kind")
    if not isinstance(kind, str):
        raise InvalidInput(f"{source}: kind is missing")
    parse_name(f"{kind}=x")  # vendor/class form
    devices: dict[str, ContainerEdits] = {}
    for entry in raw.get("devices") or []:
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise InvalidInput(f"{source}: every device needs a name")
        where = f"{source}: device {entry['name']}"
        devices[entry["name"]] = _edits(entry.get("containerEdits"), where, stat_fn)
    return CdiSpec(
        kind=kind, devices=devices, edits=_edits(raw.get("containerEdits"), source, stat_fn)
    )


def load_dir(directory: Path, stat_fn: StatFn = os.stat) -> CdiRegistry:
    """The specs of the .yaml, .yml and .json files in `directory`, in name order."""
    registry = CdiRegistry()
    for path in sorted(directory.iterdir()):
        if path.suffix not in (".yaml", ".yml", ".json") or not path.is_file():
            continue
        if path.stat().st_size > MAX_SPEC_BYTES:
            raise InvalidInput(f"{path}: larger than {MAX_SPEC_BYTES} bytes")
        registry.add(parse_spec(path.read_text(), str(path), stat_fn))
    return registry


def spec_document(spec: CdiSpec) -> dict[str, Any]:
    """A spec in the file format (to write a CDI directory a real runtime can read)."""

    def edits(e: ContainerEdits) -> dict[str, Any]:
        doc: dict[str, Any] = {}
        if e.env:
            doc["env"] = list(e.env)
        if e.device_nodes:
            doc["deviceNodes"] = [
                {"path": d.path, "type": d.type, "major": d.major, "minor": d.minor}
                for d in e.device_nodes
            ]
        if e.mounts:
            doc["mounts"] = [
                {
                    "hostPath": m.source,
                    "containerPath": m.destination,
                    "type": m.type,
                    "options": list(m.options),
                }
                for m in e.mounts
            ]
        return doc

    return {
        "cdiVersion": "0.6.0",
        "kind": spec.kind,
        "devices": [{"name": n, "containerEdits": edits(e)} for n, e in spec.devices.items()],
        "containerEdits": edits(spec.edits),
    }


def write_dir(directory: Path, specs: Iterable[CdiSpec]) -> None:
    """Each spec as `<vendor>-<class>.json` in `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    for spec in specs:
        name = spec.kind.replace("/", "-") + ".json"
        (directory / name).write_text(json.dumps(spec_document(spec), indent=2) + "\n")
