"""A tiny base for value classes on the OCI hook's start-up path.

Not dataclasses on purpose: `import dataclasses` pulls in inspect, ast and dis, which
costs more CPU than everything else the hook does for a container without an SLA (and
the hook is exec'd for every container). Subclasses list their fields in __slots__ and
set them in __init__; this base gives them equality and a readable repr.
"""



class Value:
    __slots__: "tuple[str, ...]" = ()

    def _fields(self) -> tuple:
        return tuple(getattr(self, name) for name in self.__slots__)

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self._fields() == other._fields()

    __hash__ = None  # type: ignore[assignment]  # mutable-by-convention values

    def __repr__(self) -> str:
        inner = ", ".join(f"{n}={getattr(self, n)!r}" for n in self.__slots__)
        return f"{type(self).__name__}({inner})"
