"""`nri-sla explain --gpus N`: which GPUs nri-sla's chooser prefers on this node (what the
device plugin answers the kubelet's GetPreferredAllocation), with the choice's score."""

from __future__ import annotations

import argparse
from typing import Any

from nri_plugin.errors import InvalidInput
from nri_plugin.plan.gpu_selection import choose_gpus
from nri_plugin.plan.placement_values import TOPOLOGIES
from nri_plugin.text.fields import show
from nri_plugin.topology.cpulist import format_cpulist, parse_cpulist
from nri_plugin.topology.errors import CpuListError
from nri_plugin.topology.gpus import GpuInventory


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--gpus",
        type=int,
        metavar="N",
        default=None,
        help="instead of manifests: the N GPUs nri-sla would prefer here",
    )
    parser.add_argument(
        "--topology",
        choices=TOPOLOGIES,
        default="any",
        help="with --gpus: the constraint (default any)",
    )
    parser.add_argument(
        "--free",
        metavar="LIST",
        default=None,
        help="with --gpus: free GPU indexes, e.g. 0-3,6 (default: every GPU not in MIG mode)",
    )
    parser.add_argument(
        "--must-include",
        metavar="LIST",
        default="",
        help="with --gpus: GPU indexes the choice must hold",
    )


def _indexes(flag: str, text: str, known: frozenset[int]) -> frozenset[int]:
    try:
        found = parse_cpulist(text)  # GPU indexes are written as CPU lists are
    except CpuListError:
        raise InvalidInput(
            f"{flag}: {show(text)} is not a list of GPU indexes (expected e.g. 0-3,6)"
        ) from None
    unknown = found - known
    if unknown:
        raise InvalidInput(
            f"{flag}: no GPU {format_cpulist(unknown)} on this node "
            f"(GPUs: {format_cpulist(known) or 'none'})"
        )
    return found


def prefer(inventory: GpuInventory, args: argparse.Namespace) -> dict[str, Any]:
    """The choice as a JSON-able dict; raises InvalidInput for bad --free/--must-include."""
    whole = frozenset(g.index for g in inventory.gpus if not g.mig_enabled)
    free = whole if args.free is None else _indexes("--free", args.free, whole)
    must = _indexes("--must-include", args.must_include, whole)
    if args.gpus < 0:
        raise InvalidInput(f"--gpus: {args.gpus} must be >= 0")
    result: dict[str, Any] = {
        "count": args.gpus,
        "topology": args.topology,
        "free": sorted(free),
        "must_include": sorted(must),
    }
    choice = choose_gpus(inventory, free, args.gpus, must_include=must, topology=args.topology)
    if choice is not None:
        s = choice.score
        result |= {
            "gpus": list(choice.gpus),
            "search": choice.search,
            "evaluated": choice.evaluated,
            "score": {
                "nvlink_links": s.nvlink_links,
                "pcie": s.pcie,
                "left_nvlink_links": s.left_nvlink_links,
                "left_pcie": s.left_pcie,
                "numa_nodes": s.numa_nodes,
            },
            "score_text": s.describe(),
        }
    return result


def render(result: dict[str, Any]) -> list[str]:
    asked = (
        f"{result['count']} GPU(s), topology {result['topology']}, free GPUs "
        f"{format_cpulist(result['free']) or 'none'}"
    )
    if result["must_include"]:
        asked += f", must include {format_cpulist(result['must_include'])}"
    if "gpus" not in result:
        return [f"GPU preference for {asked}: none satisfies the request"]
    return [
        f"GPU preference for {asked}: GPU {', '.join(map(str, result['gpus']))}",
        f"  score: {result['score_text']}",
        f"  search: {result['search']}, {result['evaluated']} set(s) scored",
    ]
