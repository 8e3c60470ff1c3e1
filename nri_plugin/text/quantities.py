"""Kubernetes-style quantities: sizes in bytes, counts, CPU amounts and durations.

Pure functions on annotation values (str, or the int/float a YAML scalar became). Each
raises :class:`~nri_plugin.text.errors.FieldProblem` with a sentence that says what was
expected; the reader wraps it into its own error naming where the value came from.

Arithmetic is exact (integer numerator and denominator): ``1.5Gi`` is 1610612736 bytes, never a
rounded float. Decisions (see docs/sla.md):

* sizes follow ``resource.Quantity``: plain numbers, decimal SI (``k M G T P E``, and the
  sub-unit ``m u n``), binary SI (``Ki .. Ei``), exponents (``1e9``), decimal fractions;
  the result must be a whole number of bytes in 0..2**63-1 (``100m`` is 0.1 bytes and is
  refused with a hint, because it nearly always means ``100Mi``);
* CPU amounts are CPUs (``2.5``) or millicores (``2500m``), at most 1m precision;
* durations need a unit (``us``, ``ms``, ``s``; ``µs`` is accepted): a bare ``100`` is
  refused because it is ambiguous between 100us and 100ms.
"""

from __future__ import annotations

import math
import re

from nri_plugin.text.errors import FieldProblem
from nri_plugin.text.fields import show

MAX_INT64 = 2**63 - 1

# Longest number text we look at: far beyond any real value, and it keeps hostile input
# (thousands of digits, exponents like e999999999) away from big-int arithmetic.
_MAX_NUMBER_CHARS = 40
_MAX_EXPONENT = 40
_HUGE = 10**41  # stands for any magnitude beyond every range we accept

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {  # suffix -> power of ten
    "n": -9,
    "u": -6,
    "m": -3,
    "": 0,
    "k": 3,
    "M": 6,
    "G": 9,
    "T": 12,
    "P": 15,
    "E": 18,
}
_QUANTITY = re.compile(
    r"([+-]?)([0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    r"(Ki|Mi|Gi|Ti|Pi|Ei|[eE][+-]?[0-9]+|[numkMGTPE]?)",
    re.ASCII,
)
_CPU = re.compile(r"[+-]?[0-9.]+m?", re.ASCII)
_DURATION = re.compile(r"([+-]?)([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(us|µs|ms|s)", re.ASCII)
_DURATION_UNITS = {"us": 1, "µs": 1, "ms": 1000, "s": 1_000_000}
_SIZE_HINT = "a size like 512Mi, 8Gi, 1G or 1048576"


def _ratio(number: str) -> tuple[int, int]:
    """ "12.5" -> (125, 10): an exact decimal as numerator and power-of-ten denominator."""
    whole, _, frac = number.partition(".")
    return int((whole or "0") + frac), 10 ** len(frac)


def _exact(value: object, expected: str) -> tuple[int, int]:
    """Exact value of an int, a finite float or a Quantity string, as (numerator,
    denominator > 0). Plain ints instead of ``fractions`` keep the import cheap: the OCI
    hook imports this module for every container start."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise FieldProblem(f"must be {expected}, got {show(value)}")
    if isinstance(value, int):
        if value.bit_length() > 64:  # clamp: the callers' range checks report it
            return (_HUGE if value > 0 else -_HUGE), 1
        return value, 1
    if isinstance(value, float):
        # A YAML float keeps the text it came from (see safeyaml): parse that exactly.
        text: str | None = getattr(value, "text", None)
        if text is None:
            if not math.isfinite(value):
                raise FieldProblem(f"must be {expected}, got {show(value)}")
            return value.as_integer_ratio()
        value = text
    if len(value) > _MAX_NUMBER_CHARS:
        raise FieldProblem(f"must be {expected}, got {show(value)} (too long)")
    m = _QUANTITY.fullmatch(value)
    if m is None:
        raise FieldProblem(f"must be {expected}, got {show(value)}")
    sign, number, suffix = m.groups()
    num, den = _ratio(number)
    if sign == "-":
        num = -num
    if suffix in _BINARY:
        return num * _BINARY[suffix], den
    if suffix[:1] in ("e", "E") and len(suffix) > 1:
        exponent = int(suffix[1:])
        if abs(exponent) > _MAX_EXPONENT:  # clamp instead of computing 10**999999999
            if num == 0:
                return 0, 1
            magnitude = (_HUGE, 1) if exponent > 0 else (1, _HUGE)
            return (magnitude[0] if num > 0 else -magnitude[0]), magnitude[1]
        return (num * 10**exponent, den) if exponent >= 0 else (num, den * 10**-exponent)
    power = _DECIMAL[suffix]
    return (num * 10**power, den) if power >= 0 else (num, den * 10**-power)


def parse_size(value: object) -> int:
    """Bytes from a Kubernetes quantity: ``512Mi``, ``1G``, ``1.5Gi``, ``1e9``, ``4096``."""
    num, den = _exact(value, _SIZE_HINT)
    if num < 0:
        raise FieldProblem(f"must not be negative, got {show(value)}")
    if num % den:
        hint = ""
        if isinstance(value, str) and value.endswith("m"):
            hint = f" (the suffix m means 1/1000; did you mean {value[:-1]}Mi?)"
        raise FieldProblem(
            f"({show(value)}) is {num / den:g} bytes; sizes must be whole bytes{hint}"
        )
    if num // den > MAX_INT64:
        raise FieldProblem(f"({show(value)}) is too large (at most {MAX_INT64} bytes)")
    return num // den


def parse_count(value: object) -> int:
    """A whole non-negative count such as IOPS: ``20000``, ``20k``, ``2e4``."""
    num, den = _exact(value, "a whole number like 20000 or 20k")
    if num < 0:
        raise FieldProblem(f"must not be negative, got {show(value)}")
    return _whole(value, num, den, "")


def parse_cpu(value: object) -> float:
    """CPUs from ``2.5``, ``2``, ``"2.5"`` or ``"2500m"`` (1m = 0.001 CPU is the finest)."""
    expected = "CPUs like 2.5 or 2500m"
    if isinstance(value, str) and not _CPU.fullmatch(value):
        raise FieldProblem(f"must be {expected}, got {show(value)}")
    num, den = _exact(value, expected)
    if num < 0:
        raise FieldProblem(f"must not be negative, got {show(value)}")
    if (num * 1000) % den:
        raise FieldProblem(f"({show(value)}) is finer than 1m (0.001 CPU), the smallest step")
    return num / den


def parse_duration(value: object) -> int:
    """Microseconds from ``100ms``, ``1s``, ``1.5ms``, ``500us``: the unit is required."""
    expected = "a duration with a unit: us, ms or s (e.g. 100ms)"
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise FieldProblem(f"must be {expected}, got {show(value)}")
    if not isinstance(value, str):
        raise FieldProblem(
            f"({show(value)}) needs a unit: us, ms or s, e.g. {show(value)}ms "
            "(a bare number is ambiguous)"
        )
    if len(value) > _MAX_NUMBER_CHARS:
        raise FieldProblem(f"must be {expected}, got {show(value)} (too long)")
    m = _DURATION.fullmatch(value)
    if m is None:
        raise FieldProblem(f"must be {expected}, got {show(value)}")
    sign, number, unit = m.groups()
    if sign == "-":
        raise FieldProblem(f"must not be negative, got {show(value)}")
    num, den = _ratio(number)
    return _whole(value, num * _DURATION_UNITS[unit], den, " microseconds")


def _whole(value: object, num: int, den: int, unit: str) -> int:
    """num/den as a whole int64 count of `unit` ("" for a bare count)."""
    if num % den:
        raise FieldProblem(f"({show(value)}) must be a whole number{' of' + unit if unit else ''}")
    if num // den > MAX_INT64:
        raise FieldProblem(f"({show(value)}) is too large (at most {MAX_INT64}{unit})")
    return num // den


def format_size(n: int) -> str:
    """Shortest exact spelling of a byte count: 12Gi, 10G, 1500."""
    best = str(n)
    if n <= 0:
        return best
    for suffix, factor in _BINARY.items():
        if n % factor == 0 and len(f"{n // factor}{suffix}") <= len(best):
            best = f"{n // factor}{suffix}"
    for suffix in ("k", "M", "G", "T", "P", "E"):
        factor = 10 ** _DECIMAL[suffix]
        if n % factor == 0 and len(f"{n // factor}{suffix}") < len(best):
            best = f"{n // factor}{suffix}"
    return best


def format_duration(us: int) -> str:
    """1s, 100ms, 1500us: the largest unit that is exact."""
    if us and us % 1_000_000 == 0:
        return f"{us // 1_000_000}s"
    if us and us % 1000 == 0:
        return f"{us // 1000}ms"
    return f"{us}us"


def format_cpu(cpus: float) -> str:
    """2, 2.5, 0.25: CPUs with at most three decimals."""
    milli = round(cpus * 1000)
    if milli % 1000 == 0:
        return str(milli // 1000)
    return f"{milli / 1000:.3f}".rstrip("0")
