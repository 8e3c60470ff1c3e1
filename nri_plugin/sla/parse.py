"""From pod annotations to the validated, merged SLA of one container.

Annotations read (``<prefix>`` is ``sla.nri.io`` unless the node config says otherwise):

* ``<prefix>/pod``: YAML SLA for every container of the pod;
* ``<prefix>/container.<name>``: YAML SLA for one container, merged over the pod one key
  by key (container wins, nested mappings merge, lists are replaced, ``null`` clears);
* ``<prefix>/enforcement``: ``hard`` | ``soft`` shortcut;
* ``io.kubernetes.sla/enforcement-mode``: alias of the shortcut (seed compatibility).

Enforcement precedence: container document > pod document > shortcut > alias > node
default. Any other key under ``<prefix>/`` is an error (a typo such as ``pods`` would
silently drop the SLA otherwise), except the keys nri-sla itself writes (``applied``,
``warnings``).

All problems of the annotations that apply to a container are collected: one raises an
:class:`SlaError`, several an :class:`SlaErrors` (itself an SlaError) listing the first
MAX_REPORTED_ERRORS and counting the rest. Parsed documents and resolved SLAs, refusals
included, are cached by their exact text (bounded in entries and bytes), so repeated
events are cheap.

Work is bounded so that no document costs a create much more than a typical one (the
plugin answers the runtime one request at a time; bench/bench_hostile_text.py): each
value by MAX_ANNOTATION_BYTES (safeyaml checks it before parsing) and MAX_VALUES
(counted while parsing, which stops at the first value past it), all the pod's keys
under the prefix together by MAX_TOTAL_ANNOTATION_CHARS (counted as they are found,
before anything is parsed), and the problems kept per document or per pod by
MAX_REPORTED_ERRORS.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping

from nri_plugin.errors import ProgrammingError
from nri_plugin.granted import DEFAULT_CPU_PERIOD_US  # the kernel's own default CFS period
from nri_plugin.sla.cache import TextCache
from nri_plugin.sla.errors import MAX_REPORTED_ERRORS, SlaError, raise_all
from nri_plugin.sla.model import (
    DEFAULT_RT_PERIOD_US,
    ENFORCEMENT_MODES,
    CpuSla,
    GpuSla,
    IoSla,
    MemorySla,
    NumaSla,
    Sla,
)
from nri_plugin.sla.schema import CLEAR, flatten
from nri_plugin.text.errors import YamlProblem
from nri_plugin.text.fields import show, suggest
from nri_plugin.text.quantities import format_cpu, format_duration, format_size
from nri_plugin.text.safeyaml import load

TYPE_CHECKING = False  # `typing` costs the OCI hook's cold run; only checkers need it
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import TypeVar

    T = TypeVar("T")

DEFAULT_PREFIX = "sla.nri.io"
ENFORCEMENT_ALIAS = "io.kubernetes.sla/enforcement-mode"
OUTPUT_KEYS = ("applied", "warnings")  # written by nri-sla itself, never read as input
# One document: every field of the schema with 16 GPU ids as a list and 8 io.max rules
# of two limits each (or 6 of four) fits in both bounds (117 and 127 values); typical
# SLAs are < 300 bytes and 40 values. Each value costs a cold parse 2-4 us, so two
# documents at the bound cost a create a few times a typical one at most
# (bench/bench_hostile_text.py).
MAX_ANNOTATION_BYTES = 4096  # checked before YAML parsing
MAX_VALUES = 128  # scalars, lists and mappings, keys included; counted while parsing
# All keys under the prefix (and the alias) of one pod, keys and values together: four
# full-size documents. Kubernetes allows 256 KiB of annotations, and each key under the
# prefix costs the create a little even when unknown; counted before anything is parsed.
MAX_TOTAL_ANNOTATION_CHARS = 16 * 1024
# Keys under the prefix (and the alias) of one pod: the pod's, the shortcut, nri-sla's
# own and one per container. Each costs the create a little even when unknown; a pod
# with more is refused at the first key past the bound.
MAX_SLA_KEYS = 64
MAX_DEPTH = 8  # the schema itself needs 4 (io.max[0].device)
MIN_CFS_QUOTA_US = 1000  # the kernel refuses a smaller cpu.cfs_quota_us
# Each cache: at most 1024 entries whose texts hold at most 1 MiB together (256
# documents at the size bound; typical SLAs are < 300 bytes).
CACHE_ENTRIES = 1024
CACHE_BYTES = 1 << 20

# A Kubernetes annotation key is at most 253 (prefix) + 1 + 63 (name) characters.
_MAX_KEY_CHARS = 317
_CONTAINER_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", re.ASCII)
_INPUT_NAMES = ("pod", "container.<name>", "enforcement")


# -- one document -------------------------------------------------------------------------

# A checked document: the flat fields, the first MAX_REPORTED_ERRORS problems and how many
# more were found (only counted, so a cache entry stays small whatever the text held).
Document = tuple[dict[str, object], tuple[SlaError, ...], int]


def _parse_document(key: str, text: str) -> Document:
    """Parse and check one annotation; problems are returned (and cached), not raised."""
    try:
        data = load(text, max_bytes=MAX_ANNOTATION_BYTES, max_depth=MAX_DEPTH, max_nodes=MAX_VALUES)
    except YamlProblem as exc:
        return {}, (SlaError(key, exc.path, exc.message),), 0
    flat, problems, omitted = flatten(data)
    return flat, tuple(SlaError(key, path, message) for path, message in problems), omitted


_document = TextCache(_parse_document, max_entries=CACHE_ENTRIES, max_bytes=CACHE_BYTES)


def parse_sla_document(
    key: str, text: str, *, default_enforcement: str = "hard", complete: bool = True
) -> Sla:
    """Validate one annotation value on its own.

    With ``complete`` (the default) the document is checked as the whole SLA, cross-field
    rules included; pass ``complete=False`` for a pod document that container documents
    will complete (e.g. ``gpu.topology`` in the pod, ``gpu.count`` per container).
    """
    _check_default(default_enforcement)
    if not isinstance(text, str):
        raise SlaError(key, "", f"must be a string, got {type(text).__name__}")
    flat, problems, omitted = _document(key, text)
    raise_all(problems, omitted)
    merged, origin = _merge([(key, flat)])
    enforcement = _field(merged, "enforcement", str) or default_enforcement
    sla, problems2 = _build(merged, origin, enforcement, (key,), key, complete)
    raise_all(problems2)
    return sla


# -- the container's SLA ------------------------------------------------------------------


def sla_for_container(
    annotations: Mapping[str, str],
    container_name: str,
    *,
    default_enforcement: str = "hard",
    prefix: str = DEFAULT_PREFIX,
) -> Sla | None:
    """The merged SLA of one container, or None when no SLA document applies to it.

    Raises SlaError (or SlaErrors) naming the annotation key, field and allowed values.
    """
    _check_default(default_enforcement)
    head = prefix + "/"
    wanted = "container." + container_name
    pod_text = ctr_text = shortcut = alias = None
    strays: list[str] = []
    total = count = 0
    for key in annotations:  # the value read only for nri-sla's keys (a protobuf map's
        if not (key.startswith(head) or key == ENFORCEMENT_ALIAS):  # items() is slow)
            continue
        value = annotations[key]
        if not isinstance(value, str):
            raise SlaError(_shown_key(key), "", f"must be a string, got {type(value).__name__}")
        total += len(key) + len(value)
        count += 1
        if total > MAX_TOTAL_ANNOTATION_CHARS or count > MAX_SLA_KEYS:
            raise _too_many(head, count)  # at once: no stray key costs more
        if key.startswith(head):
            name = key[len(head) :]
            if name == "pod":
                pod_text = value
            elif name == wanted:
                ctr_text = value
            elif name == "enforcement":
                shortcut = value
            elif name not in OUTPUT_KEYS and not (
                name.startswith("container.") and _CONTAINER_NAME.fullmatch(name[10:])
            ):
                strays.append(key)
        else:
            alias = value
    if not total:  # no key of nri-sla's (most pods): no SLA, nothing to look up
        return None
    # Without a container document the name changes nothing in the result, so the pod's
    # containers (and every replica's) share one cache entry: a Synchronize asks for
    # thousands of distinct names.
    # Refusals are cached as well (stray keys included): a controller creates a refused
    # pod again and again.
    sla, problems, omitted = _resolve(
        prefix,
        container_name if ctr_text is not None else "",
        default_enforcement,
        pod_text,
        ctr_text,
        shortcut,
        alias,
        tuple(sorted(strays)),
    )
    raise_all(problems, omitted)
    return sla


def keys_naming_no_container(
    annotations: Mapping[str, str], containers: Collection[str], *, prefix: str = DEFAULT_PREFIX
) -> list[SlaError]:
    """One SlaError per `<prefix>/container.<name>` whose name is none of `containers`
    (the pod's, init containers included): its SLA applies to no container. Only a whole
    pod can tell (the runtime shows the plugin one container at a time), so `validate`
    checks it. The first MAX_REPORTED_ERRORS are kept."""
    head = f"{prefix}/container."
    errors = []
    names = sorted(containers)
    for key in annotations:
        name = key[len(head) :] if key.startswith(head) else None
        if name is None or name in containers or not _CONTAINER_NAME.fullmatch(name):
            continue  # an invalid name is sla_for_container's error already
        guess = suggest(name, names)
        errors.append(
            SlaError(
                key,
                "",
                f"names container {show(name)}, which this pod does "
                f"not have (its containers: {', '.join(map(show, names))})"
                + (f"; did you mean {head}{guess}?" if guess else ""),
            )
        )
        if len(errors) == MAX_REPORTED_ERRORS:
            break
    return errors


def _resolve_texts(
    prefix: str,
    container: str,
    default: str,
    pod_text: str | None,
    ctr_text: str | None,
    shortcut: str | None,
    alias: str | None,
    strays: tuple[str, ...],
) -> tuple[Sla | None, tuple[SlaError, ...], int]:
    """The SLA, or None; the first problems found and how many more were only counted."""
    pod_key = f"{prefix}/pod"
    ctr_key = f"{prefix}/container.{container}"
    short_key = f"{prefix}/enforcement"
    # A "did you mean" search per stray key: only for the ones that will be listed.
    errors: list[SlaError] = [_stray_error(prefix, key) for key in strays[:MAX_REPORTED_ERRORS]]
    omitted = len(strays) - len(errors)
    docs: list[tuple[str, dict[str, object]]] = []
    for key, text in ((pod_key, pod_text), (ctr_key, ctr_text)):
        if text is not None:
            flat, problems, more = _document(key, text)
            errors.extend(problems)
            omitted += more
            docs.append((key, flat))
    enforcement = default
    keys: list[str] = [key for key, _ in docs]
    for key, value in ((ENFORCEMENT_ALIAS, alias), (short_key, shortcut)):  # later wins
        if value is None:
            continue
        keys.append(key)
        if value.strip() in ENFORCEMENT_MODES:
            enforcement = value.strip()
        else:
            errors.append(
                SlaError(
                    key, "", f"must be one of {', '.join(ENFORCEMENT_MODES)}, got {show(value)}"
                )
            )
    if errors:
        return None, tuple(errors), omitted
    if not docs:
        return None, (), 0
    merged, origin = _merge(docs)
    enforcement = str(merged.get("enforcement", enforcement))
    ordered = tuple(k for k in (pod_key, ctr_key, short_key, ENFORCEMENT_ALIAS) if k in keys)
    sla, build_problems = _build(merged, origin, enforcement, ordered, docs[-1][0], True)
    return (None if build_problems else sla), tuple(build_problems), 0


_resolve = TextCache(_resolve_texts, max_entries=CACHE_ENTRIES, max_bytes=CACHE_BYTES)


def _too_many(head: str, count: int) -> SlaError:
    if count > MAX_SLA_KEYS:
        return SlaError(
            f"{head}*",
            "",
            f"more than {MAX_SLA_KEYS} annotations are under "
            f"{head} (with {ENFORCEMENT_ALIAS}); at most "
            f"{MAX_SLA_KEYS} are allowed",
        )
    return SlaError(
        f"{head}*",
        "",
        f"annotations hold more than {MAX_TOTAL_ANNOTATION_CHARS} "
        "characters together (keys and values); at most "
        f"{MAX_TOTAL_ANNOTATION_CHARS} are allowed",
    )


def _shown_key(key: str) -> str:
    """An annotation key for a message: the runtime does not check key lengths (only the
    Kubernetes API does), so a key past any valid length is cut."""
    return key if len(key) <= _MAX_KEY_CHARS else key[:_MAX_KEY_CHARS] + "..."


def _stray_error(prefix: str, key: str) -> SlaError:
    name = key[len(prefix) + 1 :][:_MAX_KEY_CHARS]
    key = _shown_key(key)
    if name.startswith("container."):
        return SlaError(
            key,
            "",
            f"names container {show(name[10:])}, which is not a valid "
            "container name (lowercase letters, digits and '-', at most "
            "63 characters)",
        )
    guess = suggest(name, ("pod", "enforcement", "container"))
    hint = (
        f"; did you mean {prefix}/{guess}{'.<name>' if guess == 'container' else ''}?"
        if guess
        else ""
    )
    allowed = ", ".join(f"{prefix}/{n}" for n in _INPUT_NAMES)
    return SlaError(key, "", f"is not a known annotation{hint} (known: {allowed})")


def _check_default(default_enforcement: str) -> None:
    if default_enforcement not in ENFORCEMENT_MODES:
        raise ProgrammingError(
            "default_enforcement must be one of "
            f"{', '.join(ENFORCEMENT_MODES)}, got {default_enforcement!r}"
        )


# -- merge and build ----------------------------------------------------------------------


def _merge(docs: list[tuple[str, dict[str, object]]]) -> tuple[dict[str, object], dict[str, str]]:
    """Later documents win key by key; CLEAR removes a field or a whole section."""
    merged: dict[str, object] = {}
    origin: dict[str, str] = {}
    for key, flat in docs:
        for path, value in flat.items():
            if value is CLEAR:
                doomed = [p for p in merged if p == path or p.startswith(path + ".")]
                for p in doomed:
                    del merged[p]
                    del origin[p]
            else:
                merged[path] = value
                origin[path] = key
    return merged, origin


def _field(m: Mapping[str, object], path: str, kind: type[T]) -> T | None:
    """A merged document's field as the schema's converter made it (schema.SECTIONS),
    None when unset; a value of another type is a bug."""
    value = m.get(path)
    if value is None or isinstance(value, kind):
        return value
    raise ProgrammingError(f"{path} is a {type(value).__name__}, not a {kind.__name__}")


def _build(
    m: dict[str, object],
    origin: dict[str, str],
    enforcement: str,
    keys: tuple[str, ...],
    fallback_key: str,
    complete: bool,
) -> tuple[Sla, list[SlaError]]:
    problems: list[SlaError] = []

    def fail(message: str, field: str, *related: str) -> None:
        sources = [origin[f] for f in (field, *related) if f in origin]
        # the container document is the one to fix when it took part
        key = sources[-1] if sources else fallback_key
        if any(s == fallback_key for s in sources):
            key = fallback_key
        problems.append(SlaError(key, field, message))

    cpu = numa = memory = io = gpu = None
    if any(p.startswith("cpu.") for p in m):
        limit = _field(m, "cpu.limit", float)
        period = _field(m, "cpu.period", int)
        rt_runtime = _field(m, "cpu.rt-runtime", int)
        rt_period = _field(m, "cpu.rt-period", int)
        exclusive = _field(m, "cpu.exclusive", int)
        if complete and period is not None and limit is None:
            fail(
                f"({format_duration(period)}) is set but cpu.limit is not; the period only "
                "applies to a CPU limit",
                "cpu.period",
            )
        if complete and rt_period is not None and rt_runtime is None:
            fail(
                f"({format_duration(rt_period)}) is set but cpu.rt-runtime is not; set the "
                "real-time budget too",
                "cpu.rt-period",
            )
        if rt_runtime is not None:
            if rt_period is None:
                rt_period = DEFAULT_RT_PERIOD_US
            if complete and rt_runtime > rt_period:
                fail(
                    f"({format_duration(rt_runtime)}) must not exceed cpu.rt-period "
                    f"({format_duration(rt_period)})",
                    "cpu.rt-runtime",
                    "cpu.rt-period",
                )
        if limit is not None:
            if period is None:
                period = DEFAULT_CPU_PERIOD_US
            if complete:
                quota = round(limit * period)
                if quota < MIN_CFS_QUOTA_US:
                    fail(
                        f"({format_cpu(limit)}) at cpu.period {format_duration(period)} is a "
                        f"quota of {format_duration(quota)}; the kernel's minimum is 1ms "
                        "(raise the limit or the period)",
                        "cpu.limit",
                        "cpu.period",
                    )
                if exclusive is not None and limit > exclusive:
                    fail(
                        f"({format_cpu(limit)}) must not exceed cpu.exclusive ({exclusive}): "
                        f"the container runs on {exclusive} CPUs only",
                        "cpu.limit",
                        "cpu.exclusive",
                    )
        cpu = CpuSla(limit, period, rt_runtime, rt_period, exclusive)
    if any(p.startswith("numa.") for p in m):
        auto = m.get("numa.nodes") == "auto"
        nodes = None if auto else _field(m, "numa.nodes", tuple)
        numa = NumaSla(nodes, auto, _field(m, "numa.memory-policy", str))
    if "memory.high" in m or "memory.max" in m:
        high, hard = _field(m, "memory.high", int), _field(m, "memory.max", int)
        if complete and high is not None and hard is not None and high >= hard:
            fail(
                f"({format_size(high)}) must be below memory.max ({format_size(hard)})",
                "memory.high",
                "memory.max",
            )
        memory = MemorySla(high, hard)
    if "io.weight" in m or m.get("io.max"):
        io = IoSla(_field(m, "io.weight", int), _field(m, "io.max", tuple) or ())
    if any(p.startswith("gpu.") for p in m):
        gpu = _gpu(m, complete, fail)
    sla = Sla(enforcement, cpu, numa, memory, io, gpu, keys)
    return sla, problems


def _gpu(m: dict[str, object], complete: bool, fail: Callable[..., None]) -> GpuSla:
    chosen = [n for n in ("count", "ids", "mig") if m.get(f"gpu.{n}")]
    source = _field(m, "gpu.from", str) or "plugin"
    if complete:
        fields = [f"gpu.{n}" for n in chosen]
        if len(chosen) > 1:
            fail(
                f"sets {' and '.join(chosen)}; these are alternatives: set exactly one of "
                "gpu.count, gpu.ids or gpu.mig",
                fields[-1],
                *fields[:-1],
            )
        # gpu.from (plugin | runtime) stays accepted for old manifests: either way the
        # section is a requirement on the device plugin's grant, a request or none (none:
        # align to whatever was granted, which must be at least one GPU).
    return GpuSla(
        count=_field(m, "gpu.count", int),
        ids=_field(m, "gpu.ids", tuple) or (),
        mig=_field(m, "gpu.mig", str),
        topology=_field(m, "gpu.topology", str) or "any",
        align=_field(m, "gpu.align", bool) is not False,
        source=source,
    )


def clear_caches() -> None:
    """Forget cached documents (benchmarks use it to measure cold parsing)."""
    _document.clear()
    _resolve.clear()
