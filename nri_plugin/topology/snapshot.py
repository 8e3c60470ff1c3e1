"""YAML snapshots of a node (CPUs, NUMA nodes, GPUs): `nri-sla inventory --save/--inventory`.

A snapshot taken on a real GPU node lets `explain`, tests and benchmarks run anywhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from nri_plugin.errors import one_line
from nri_plugin.topology.cpulist import format_cpulist, parse_cpulist
from nri_plugin.topology.cpus import NumaNode, Topology
from nri_plugin.topology.errors import CpuListError, InventoryError, SnapshotError
from nri_plugin.topology.gpus import (
    PCIE_LEVELS,
    Gpu,
    GpuInventory,
    MigInstance,
    normalize_bus_id,
)

SNAPSHOT_VERSION = 1


@dataclass(frozen=True)
class NodeSnapshot:
    topology: Topology
    inventory: GpuInventory


def snapshot_to_dict(topology: Topology, inventory: GpuInventory) -> dict[str, Any]:
    return {
        "version": SNAPSHOT_VERSION,
        "cpus": {
            "online": format_cpulist(topology.online),
            "cores": [format_cpulist(c) for c in topology.cores],
        },
        "numa": [
            {
                "id": n.id,
                "cpus": format_cpulist(n.cpus),
                "distances": [n.distances.get(o.id, 0) for o in topology.nodes],
                "has_memory": n.has_memory,
            }
            for n in topology.nodes
        ],
        "gpu_source": inventory.source,
        "gpus": [_gpu_to_dict(g) for g in inventory.gpus],
    }


def _gpu_to_dict(g: Gpu) -> dict[str, Any]:
    return {
        "index": g.index,
        "uuid": g.uuid,
        "pci_bus_id": g.pci_bus_id,
        "numa_node": g.numa_node,
        "memory_bytes": g.memory_bytes,
        "name": g.name,
        "minor": g.minor,
        "nvlink_peers": sorted(g.nvlink_peers),
        "nvlink_links": [[peer, n] for peer, n in g.nvlink_links],
        "pcie": {
            level: [p for p, lv in g.pcie_levels if lv == level]
            for level in PCIE_LEVELS
            if any(lv == level for _, lv in g.pcie_levels)
        },
        "mig_enabled": g.mig_enabled,
        "mig_instances": [
            {
                "uuid": m.uuid,
                "profile": m.profile,
                "gi_id": m.gi_id,
                "ci_id": m.ci_id,
                "index": m.index,
                "memory_bytes": m.memory_bytes,
                "caps_minors": list(m.caps_minors),
            }
            for m in g.mig_instances
        ],
    }


def save_snapshot(path: Path, topology: Topology, inventory: GpuInventory) -> None:
    # flow style for leaf lists keeps a 128-CPU core list on a few lines
    text = yaml.safe_dump(
        snapshot_to_dict(topology, inventory), sort_keys=False, default_flow_style=None, width=96
    )
    Path(path).write_text(text)


class _Fields:
    """Typed access to one mapping of the snapshot, naming the field path in errors."""

    def __init__(self, where: str, data: Any) -> None:
        if not isinstance(data, dict):
            raise SnapshotError(f"{where}: expected a mapping, got {type(data).__name__}")
        self.where = where
        self.data = data

    def get(self, key: str, kind: type | tuple[type, ...], default: Any = ...) -> Any:
        if key not in self.data:
            if default is ...:
                raise SnapshotError(f"{self.where}.{key}: missing")
            return default
        value = self.data[key]
        if value is None and default is None:
            return None
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise SnapshotError(f"{self.where}.{key}: expected {_kind_name(kind)}, got {value!r}")
        return value

    def cpus(self, key: str) -> frozenset[int]:
        try:
            return parse_cpulist(str(self.get(key, (str, int))))
        except CpuListError as exc:
            raise SnapshotError(f"{self.where}.{key}: {exc}") from None


def _kind_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(k.__name__ for k in kinds)


def snapshot_from_dict(data: Any, where: str = "snapshot") -> NodeSnapshot:
    top = _Fields(where, data)
    version = top.get("version", int)
    if version != SNAPSHOT_VERSION:
        raise SnapshotError(
            f"{where}.version: {version} is not supported (allowed: {SNAPSHOT_VERSION})"
        )
    cpus = _Fields(f"{where}.cpus", top.get("cpus", dict))
    online = cpus.cpus("online")
    cores = []
    for i, text in enumerate(cpus.get("cores", list, [])):
        try:
            cores.append(parse_cpulist(str(text)))
        except CpuListError as exc:
            raise SnapshotError(f"{where}.cpus.cores[{i}]: {exc}") from None
    covered = frozenset().union(*cores) if cores else frozenset()
    cores += [frozenset({c}) for c in sorted(online - covered)]
    raw_nodes = top.get("numa", list, [])
    ids = [_Fields(f"{where}.numa[{i}]", n).get("id", int) for i, n in enumerate(raw_nodes)]
    nodes = []
    for i, raw in enumerate(raw_nodes):
        f = _Fields(f"{where}.numa[{i}]", raw)
        row = f.get("distances", list, [])
        nodes.append(
            NumaNode(
                ids[i],
                f.cpus("cpus") & online,
                dict(zip(ids, row, strict=False)),
                bool(f.get("has_memory", bool, True)),
            )
        )
    if not nodes:
        nodes = [NumaNode(0, online, {0: 10})]
    topology = Topology(online, tuple(nodes), tuple(cores))
    gpus = tuple(
        _gpu_from_dict(f"{where}.gpus[{i}]", g) for i, g in enumerate(top.get("gpus", list, []))
    )
    return NodeSnapshot(topology, GpuInventory(gpus, "snapshot"))


def _gpu_from_dict(where: str, raw: Any) -> Gpu:
    f = _Fields(where, raw)
    index = f.get("index", int)
    bus_text = f.get("pci_bus_id", str)
    bus = normalize_bus_id(bus_text)
    if bus is None:
        raise SnapshotError(
            f"{where}.pci_bus_id: {bus_text!r} is not a PCI address (expected e.g. 0000:07:00.0)"
        )
    migs = []
    for k, m in enumerate(f.get("mig_instances", list, [])):
        mf = _Fields(f"{where}.mig_instances[{k}]", m)
        migs.append(
            MigInstance(
                uuid=mf.get("uuid", str),
                profile=mf.get("profile", str),
                gpu_index=index,
                gi_id=mf.get("gi_id", int),
                ci_id=mf.get("ci_id", int),
                index=mf.get("index", int, k),
                memory_bytes=mf.get("memory_bytes", int, 0),
                caps_minors=tuple(mf.get("caps_minors", list, [])),
            )
        )
    nvlink_peers = frozenset(_ints(f"{where}.nvlink_peers", f.get("nvlink_peers", list, [])))
    nvlink_links = _links(f"{where}.nvlink_links", f.get("nvlink_links", list, []))
    pcie_levels = _pcie(f"{where}.pcie", f.get("pcie", dict, {}))
    try:
        return _gpu(f, index, bus, nvlink_peers, nvlink_links, pcie_levels, tuple(migs))
    except InventoryError as exc:
        raise SnapshotError(f"{where}: {exc}") from None


def _gpu(
    f: _Fields,
    index: int,
    bus: str,
    nvlink_peers: frozenset[int],
    nvlink_links: tuple[tuple[int, int], ...],
    pcie_levels: tuple[tuple[int, str], ...],
    migs: tuple[MigInstance, ...],
) -> Gpu:
    return Gpu(
        index=index,
        uuid=f.get("uuid", str, ""),
        pci_bus_id=bus,
        numa_node=f.get("numa_node", int, None),
        memory_bytes=f.get("memory_bytes", int, 0),
        name=f.get("name", str, ""),
        minor=f.get("minor", int, None),
        nvlink_peers=nvlink_peers,
        nvlink_links=nvlink_links,
        pcie_levels=pcie_levels,
        mig_enabled=f.get("mig_enabled", bool, bool(migs)),
        mig_instances=migs,
    )


def _ints(where: str, raw: list[Any]) -> list[int]:
    for k, value in enumerate(raw):
        if not isinstance(value, int) or isinstance(value, bool):
            raise SnapshotError(f"{where}[{k}]: expected a GPU index, got {value!r}")
    return raw


def _links(where: str, raw: list[Any]) -> tuple[tuple[int, int], ...]:
    """[[peer, links], ...]; absent in snapshots older than link counts (one link per
    peer is then assumed from nvlink_peers)."""
    out = []
    for k, pair in enumerate(raw):
        if (
            not isinstance(pair, list)
            or len(pair) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in pair)
            or pair[1] < 1
        ):
            raise SnapshotError(f"{where}[{k}]: expected [peer index, links >= 1], got {pair!r}")
        out.append((pair[0], pair[1]))
    return tuple(out)


def _pcie(where: str, raw: dict[Any, Any]) -> tuple[tuple[int, str], ...]:
    """{level: [peer, ...]} with levels from PCIE_LEVELS; absent in older snapshots."""
    out = []
    for level, peers in raw.items():
        if level not in PCIE_LEVELS:
            raise SnapshotError(f"{where}: {level!r} is not one of {', '.join(PCIE_LEVELS)}")
        if not isinstance(peers, list):
            raise SnapshotError(f"{where}.{level}: expected a list of GPU indexes")
        out += [(p, level) for p in _ints(f"{where}.{level}", peers)]
    return tuple(out)


def load_snapshot(path: Path) -> NodeSnapshot:
    """Raises SnapshotError with a one-line message naming `path`."""
    try:
        data = yaml.safe_load(Path(path).read_text())
    except OSError as exc:
        raise SnapshotError(f"cannot read inventory snapshot {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise SnapshotError(
            f"inventory snapshot {path}: not valid YAML: {_yaml_problem(exc)}"
        ) from None
    if not isinstance(data, dict) or "version" not in data:
        # Another file given by mistake (a pod manifest, the node config): say so, not
        # which snapshot field it lacks.
        kind = data.get("kind") if isinstance(data, dict) else None
        what = (
            f"a Kubernetes {_shown(kind)} manifest"
            if isinstance(kind, str)
            else "a YAML mapping without `version`"
            if isinstance(data, dict)
            else f"a YAML {type(data).__name__}"
        )
        raise SnapshotError(
            f"inventory snapshot {path}: {what}, not a node snapshot "
            "(expected what `nri-sla inventory --save` writes: version, "
            "cpus, numa, gpus)"
        )
    return snapshot_from_dict(data, str(path))


def _shown(text: str) -> str:
    return text[:60] if text.isprintable() else repr(text[:60])


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """The parser's problem and where, without the multi-line snippet it quotes."""
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem:
        mark = exc.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        return f"{exc.problem}{where}"
    return one_line(str(exc))
