"""Typed errors for the SLA annotation contract.

Every problem names three things a workload owner needs to fix it: the annotation key it
came from, the field path inside the YAML document, and what is allowed.
"""

from __future__ import annotations

from nri_plugin.errors import InvalidInput, ProgrammingError

# Problems listed in one message; the rest are only counted. One hostile annotation can
# hold thousands of unknown keys, and every problem would otherwise echo a line into the
# CRI error kubelet shows, the decision log and the caches (16 KiB in, 200 KB out).
MAX_REPORTED_ERRORS = 10


class SlaError(InvalidInput, ValueError):
    """One problem in an SLA annotation.

    ``str(err)`` reads ``<annotation key>: <field> <message>``, e.g.
    ``sla.nri.io/container.web: memory.high (12Gi) must be below memory.max (10Gi)``.
    ``field`` is a dotted path (``io.max[0].read-bps``) or "" for the whole document.
    ``errors`` lists every problem found (just this one for a plain SlaError).
    """

    def __init__(self, key: str, field: str, message: str) -> None:
        self.key = key
        self.field = field
        self.message = message
        super().__init__(self._text())

    def _text(self) -> str:
        where = f"{self.field} " if self.field else ""
        return f"{self.key}: {where}{self.message}"

    @property
    def errors(self) -> tuple[SlaError, ...]:
        return (self,)

    def __reduce__(self):  # keep pickling (multiprocessing, logging) working
        return (SlaError, (self.key, self.field, self.message))


class SlaErrors(SlaError):
    """Several problems at once (all of one pod's SLA annotations are checked together).

    It *is* an SlaError: ``key``, ``field`` and ``message`` are those of the first problem,
    and ``str()`` joins the listed problems with "; " so that a single log line or CRI
    error carries them, followed by "... and N more problems" when ``omitted`` (problems
    found but not listed, beyond MAX_REPORTED_ERRORS) is not zero.
    """

    def __init__(self, errors: list[SlaError] | tuple[SlaError, ...], omitted: int = 0) -> None:
        if not errors:
            raise ProgrammingError("SlaErrors needs at least one error")
        self._errors = tuple(errors)
        self.omitted = omitted
        first = self._errors[0]
        super().__init__(first.key, first.field, first.message)
        text = "; ".join(str(e) for e in self._errors)
        if omitted:
            text += f"; ... and {omitted} more problem{'' if omitted == 1 else 's'}"
        ValueError.__init__(self, text)

    @property
    def errors(self) -> tuple[SlaError, ...]:
        """The listed problems (at most MAX_REPORTED_ERRORS when raised by raise_all)."""
        return self._errors

    def __reduce__(self):
        return (SlaErrors, (self._errors, self.omitted))


def raise_all(errors: list[SlaError] | tuple[SlaError, ...], omitted: int = 0) -> None:
    """Raise nothing, the single error, or an SlaErrors aggregate listing at most
    MAX_REPORTED_ERRORS problems (`omitted`: problems the caller already left out).

    Errors may come from a cache, so fresh instances are raised: re-raising a cached
    exception object would grow its traceback and pin frames in memory.
    """
    fresh = [SlaError(e.key, e.field, e.message) for e in errors[:MAX_REPORTED_ERRORS]]
    omitted += len(errors) - len(fresh)
    if len(fresh) == 1 and not omitted:
        raise fresh[0]
    if fresh:
        raise SlaErrors(fresh, omitted)
