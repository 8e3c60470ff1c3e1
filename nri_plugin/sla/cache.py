"""A memo of what was read from annotation texts, bounded in entries and in bytes.

Pod annotations are hostile: a cache keyed by their texts must not let pods pin memory
without bound, and it must keep what was refused too (a refused pod is created again and
again by its controller, and an uncached refusal is parsed again every time). Both
bounds are checked on every insertion; the least recently used entries go first.
"""

from __future__ import annotations

from nri_plugin.errors import ProgrammingError

TYPE_CHECKING = False  # `typing` costs the OCI hook start-up time; only checkers need it
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Generic, TypeVar, TypeVarTuple

    Args = TypeVarTuple("Args")  # the function's (positional) arguments
    Result = TypeVar("Result")
else:  # run time, without typing: `Generic[...]` below is plain `object`
    Args = Result = ()

    class Generic:  # checkers see typing's
        def __class_getitem__(cls, _params: object) -> type:
            return object


def text_bytes(value: object) -> int:
    """An upper bound of the bytes the texts in `value` (a str, None or a tuple of them)
    keep alive: a str stores 1 byte per character when ASCII, at most 4 otherwise."""
    if isinstance(value, str):
        return len(value) if value.isascii() else 4 * len(value)
    if isinstance(value, tuple):
        return sum(text_bytes(item) for item in value)
    return 0


class TextCache(Generic[*Args, Result]):
    """`function(*args)` remembered by its arguments (texts, None, tuples of texts).

    At most `max_entries` entries whose arguments hold at most `max_bytes` together
    (`text_bytes`); an entry bigger than `max_bytes` on its own is computed, not kept.
    What `function` returns is kept as it is: it must be small whatever the texts held
    (the SLA parser keeps at most MAX_REPORTED_ERRORS problems per result). Not for
    threads: the plugin and the CLI call it from one.
    """

    def __init__(
        self, function: Callable[[*Args], Result], *, max_entries: int, max_bytes: int
    ) -> None:
        if max_entries < 1 or max_bytes < 1:
            raise ProgrammingError("a TextCache needs room for at least one entry")
        self.function = function
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.bytes_held = 0
        self.misses = 0
        self._entries: dict[tuple[*Args], tuple[Result, int]] = {}  # in order of last use

    def __call__(self, *args: *Args) -> Result:
        entries = self._entries
        found = entries.pop(args, None)
        if found is not None:
            entries[args] = found  # now the most recently used
            return found[0]
        self.misses += 1
        result = self.function(*args)
        size = text_bytes(args)
        if size <= self.max_bytes:
            while entries and (
                len(entries) >= self.max_entries or self.bytes_held + size > self.max_bytes
            ):
                self.bytes_held -= entries.pop(next(iter(entries)))[1]
            entries[args] = (result, size)
            self.bytes_held += size
        return result

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        self._entries.clear()
        self.bytes_held = 0
