"""`nri-sla inventory`: the node's CPUs, NUMA nodes and GPUs (table, JSON or snapshot)."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from nri_plugin.commands.common import table_lines
from nri_plugin.errors import EXIT_INTERNAL, EXIT_INVALID
from nri_plugin.topology.cpulist import format_cpulist
from nri_plugin.topology.cpus import Topology, read_topology
from nri_plugin.topology.gpus import Gpu, GpuInventory
from nri_plugin.topology.inventory import load_inventory
from nri_plugin.topology.snapshot import load_snapshot, save_snapshot, snapshot_to_dict


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument(
        "--save", metavar="FILE", type=Path, help="also write a YAML snapshot of this node to FILE"
    )
    parser.add_argument(
        "--inventory",
        metavar="FILE",
        type=Path,
        help="replay a snapshot taken with --save instead of reading this node",
    )
    parser.add_argument(
        "--source",
        choices=("auto", "nvml", "sysfs"),
        default="auto",
        help="GPU source (default auto: NVML, else sysfs)",
    )
    parser.add_argument(
        "--sysfs-root",
        metavar="DIR",
        type=Path,
        default=Path("/sys"),
        help="read sysfs from DIR (tests, chroots)",
    )
    parser.add_argument(
        "--proc-root",
        metavar="DIR",
        type=Path,
        default=Path("/proc"),
        help="read /proc from DIR (NVIDIA driver files)",
    )


def _gib(n: int) -> str:
    return f"{n / 1024**3:.0f} GiB" if n else "-"


def describe_links(g: Gpu) -> str:
    """NVLink peers, "x<links>" after those with more than one: "1,2,3x2,4x2"."""
    return ",".join(f"{p}x{n}" if n > 1 else str(p) for p, n in g.nvlink_links) or "-"


def render_table(topology: Topology, inventory: GpuInventory) -> str:
    lines = [
        f"CPUs: {len(topology.online)} online ({format_cpulist(topology.online)}), "
        f"{len(topology.cores)} cores, {topology.threads_per_core} thread(s) per core; "
        f"{len(topology.nodes)} NUMA node(s)",
        "",
    ]
    node_rows = [["NUMA", "CPUs", "memory", "distances", "GPUs"]]
    for n in topology.nodes:
        gpus = [str(g.index) for g in inventory.gpus if g.numa_node == n.id]
        node_rows.append(
            [
                str(n.id),
                format_cpulist(n.cpus) or "-",
                "yes" if n.has_memory else "no",
                " ".join(str(n.distances.get(o.id, "?")) for o in topology.nodes),
                ",".join(gpus) or "-",
            ]
        )
    lines += table_lines(node_rows)
    lines.append("")
    source = f"GPUs: {len(inventory.gpus)} (source: {inventory.source}"
    if inventory.degraded_reason:
        source += f"; degraded: {inventory.degraded_reason}"
    lines.append(source + ")")
    if inventory.gpus:
        rows = [
            ["GPU", "NUMA", "PCI", "UUID", "name", "memory", "NVLink peers", "PCIe switch", "MIG"]
        ]
        for g in inventory.gpus:
            rows.append(
                [
                    str(g.index),
                    "?" if g.numa_node is None else str(g.numa_node),
                    g.pci_bus_id,
                    g.uuid or "-",
                    g.name or "-",
                    _gib(g.memory_bytes),
                    describe_links(g),
                    ",".join(str(p) for p, lv in g.pcie_levels if lv == "switch") or "-",
                    f"{len(g.mig_instances)} instance(s)" if g.mig_enabled else "-",
                ]
            )
            for m in g.mig_instances:
                rows.append(
                    [
                        f"  {g.index}:{m.index}",
                        "",
                        "",
                        m.uuid,
                        m.profile,
                        _gib(m.memory_bytes),
                        "",
                        "",
                        f"gi {m.gi_id} ci {m.ci_id}",
                    ]
                )
        lines.append("")
        lines += table_lines(rows)
    return "\n".join(lines)


def main(args: argparse.Namespace) -> int:
    # An NVML fallback is shown in the output ("degraded: ..."), not also as a warning.
    logging.getLogger("nri_sla.topology").setLevel(logging.ERROR)
    try:
        if args.inventory is not None:
            snap = load_snapshot(args.inventory)
            topology, inventory = snap.topology, snap.inventory
        else:
            topology = read_topology(args.sysfs_root)
            inventory = load_inventory(
                args.source, sysfs_root=args.sysfs_root, proc_root=args.proc_root
            )
    except OSError as exc:  # the host's sysfs (a bad snapshot: nri_plugin.cli)
        print(f"nri-sla inventory: cannot read this node: {exc}", file=sys.stderr)
        return EXIT_INTERNAL
    if args.save is not None:
        try:
            save_snapshot(args.save, topology, inventory)
        except OSError as exc:  # the operator's path: bad input, not nri-sla's failure
            print(
                f"nri-sla inventory: --save {args.save}: cannot write: {exc.strerror or exc}",
                file=sys.stderr,
            )
            return EXIT_INVALID
    if args.json:
        body = snapshot_to_dict(topology, inventory)
        body["gpu_degraded_reason"] = inventory.degraded_reason
        print(json.dumps(body, indent=2))
    else:
        print(render_table(topology, inventory))
    if args.save is not None:
        print(f"saved snapshot to {args.save}", file=sys.stderr)
    return 0
