"""The SLA annotation contract: parse, validate and merge pod annotations into an `Sla`.

Pure: no I/O, no protobuf. Entry points: :func:`sla_for_container` and
:func:`parse_sla_document`; values are the frozen values of ``model``; every problem
is an :class:`SlaError` naming the annotation key, the field and what is allowed.
"""

from nri_plugin.sla.errors import SlaError, SlaErrors
from nri_plugin.sla.model import (
    DEFAULT_RT_PERIOD_US,
    ENFORCEMENT_MODES,
    GPU_SOURCES,
    GPU_TOPOLOGIES,
    MEMORY_POLICIES,
    CpuSla,
    GpuSla,
    IoMaxRule,
    IoSla,
    MemorySla,
    NumaSla,
    Sla,
)
from nri_plugin.sla.parse import (
    DEFAULT_PREFIX,
    ENFORCEMENT_ALIAS,
    MAX_ANNOTATION_BYTES,
    OUTPUT_KEYS,
    parse_sla_document,
    sla_for_container,
)

__all__ = [
    "DEFAULT_PREFIX",
    "DEFAULT_RT_PERIOD_US",
    "ENFORCEMENT_ALIAS",
    "ENFORCEMENT_MODES",
    "GPU_SOURCES",
    "GPU_TOPOLOGIES",
    "MAX_ANNOTATION_BYTES",
    "MEMORY_POLICIES",
    "OUTPUT_KEYS",
    "CpuSla",
    "GpuSla",
    "IoMaxRule",
    "IoSla",
    "MemorySla",
    "NumaSla",
    "Sla",
    "SlaError",
    "SlaErrors",
    "parse_sla_document",
    "sla_for_container",
]
