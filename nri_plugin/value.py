"""Value classes for the OCI hook's start-up path, without dataclasses.

`import dataclasses` pulls in inspect, ast and dis, and every dataclass `exec`s its
generated methods one by one: on the hook's cold run (exec'd for a container's first
replica) that cost more than all its own work. Two bases:

* `Frozen`: fields declared as class annotations (defaults, or `field(...)` for a
  factory, metadata or `compare=False`), like a frozen slotted dataclass: keyword or
  positional construction, immutable after __init__ (FrozenValueError), equality and
  hashing by type and the compared fields' values, the dataclass repr, `replace`,
  `fields`, `asdict`; a `__post_init__` runs after __init__ as a dataclass's does, and a
  class's own `__slots__` are extra attributes for what it derives there (no field: not
  compared, not shown). One generic __init__ reads the declared fields: nothing is
  generated per class.
* `Value`: a class that lists its __slots__ and sets them in its own __init__; this gives
  it equality and a readable repr (mutable by convention, so not hashable).

Not `from __future__ import annotations` (a module import the warm path avoids):
annotations naming typing's names are quoted.
"""

TYPE_CHECKING = False  # typing costs the hook's start-up; only checkers need it
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, ClassVar, TypeVar, dataclass_transform

    T = TypeVar("T")
else:

    def dataclass_transform(**_: object) -> "Callable[[T], T]":
        return lambda cls: cls


class FrozenValueError(AttributeError):
    """A frozen value's field was assigned or deleted."""


class _Missing:
    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"


MISSING: "Any" = _Missing()  # a field without a default (or without a factory)
_set = object.__setattr__


class Field:
    """One declared field: its name, default or factory, metadata for generators (the
    node config's key declarations: config/schema.py reads them), and whether equality
    and hashing count it (`compare`, as a dataclass field's)."""

    __slots__ = ("compare", "default", "default_factory", "metadata", "name")

    def __init__(
        self,
        default: "Any" = MISSING,
        default_factory: "Any" = MISSING,
        metadata: "dict[str, Any] | None" = None,
        compare: bool = True,
    ) -> None:
        self.name = ""
        self.default = default
        self.default_factory = default_factory
        self.metadata: dict[str, Any] = metadata or {}
        self.compare = compare

    def __repr__(self) -> str:
        return f"Field({self.name!r})"


def field(
    *,
    default: "Any" = MISSING,
    default_factory: "Any" = MISSING,
    metadata: "dict[str, Any] | None" = None,
    compare: bool = True,
) -> "Any":
    """A field's declaration where a plain default will not do (a factory, metadata, a
    field that equality and hashing leave out)."""
    if default is not MISSING and default_factory is not MISSING:
        raise ValueError("a field has a default or a default_factory, not both")
    return Field(default, default_factory, metadata, compare)


class _Declared(type):
    """Makes a Frozen subclass's annotations its fields: slots, in declaration order,
    after its bases' fields (and the class's own `__slots__`, if any, after them)."""

    def __new__(mcls, name: str, bases: tuple[type, ...], ns: "dict[str, Any]") -> type:
        inherited: tuple[Field, ...] = ()
        for base in bases:
            inherited += getattr(base, "__fields__", ())
        own = []
        for attr in ns.get("__annotations__", {}):
            if attr.startswith("__"):  # the class's own bookkeeping, not a field
                continue
            if attr in ns and isinstance(ns[attr], Field):
                declared = ns.pop(attr)
            else:
                declared = Field(ns.pop(attr, MISSING))
            declared.name = attr
            own.append(declared)
        ns["__slots__"] = tuple(f.name for f in own) + tuple(ns.get("__slots__", ()))
        ns["__fields__"] = all_fields = inherited + tuple(own)
        ns["__compared__"] = tuple(f.name for f in all_fields if f.compare)
        ns["__match_args__"] = tuple(f.name for f in all_fields)
        if "__post_init__" in ns and "__init__" not in ns:
            ns["__init__"] = _init_then_post_init
        cls = super().__new__(mcls, name, bases, ns)
        required_after_default = False
        for f in all_fields:
            has_default = f.default is not MISSING or f.default_factory is not MISSING
            if required_after_default and not has_default:
                raise TypeError(
                    f"{name}: field {f.name!r} without a default follows one with a default"
                )
            required_after_default = required_after_default or has_default
        return cls


@dataclass_transform(frozen_default=True, field_specifiers=(field, Field))
class Frozen(metaclass=_Declared):
    """An immutable value with declared fields (module doc)."""

    __slots__ = ()
    __fields__: "tuple[Field, ...]" = ()
    __compared__: "tuple[str, ...]" = ()  # the names of the fields with compare=True

    def __init__(self, *args: "Any", **kwargs: "Any") -> None:
        declared = self.__fields__
        if len(args) > len(declared):
            raise TypeError(
                f"{type(self).__name__}() takes {len(declared)} positional "
                f"arguments but {len(args)} were given"
            )
        for f, value in zip(declared, args, strict=False):
            _set(self, f.name, value)
        for f in declared[len(args) :]:
            name = f.name
            if name in kwargs:
                value = kwargs.pop(name)
            elif f.default is not MISSING:
                value = f.default
            elif f.default_factory is not MISSING:
                value = f.default_factory()
            else:
                raise TypeError(f"{type(self).__name__}() missing required argument {name!r}")
            _set(self, name, value)
        if kwargs:
            raise TypeError(
                f"{type(self).__name__}() got an unexpected or repeated "
                f"argument {next(iter(kwargs))!r}"
            )

    def _values(self) -> "tuple[Any, ...]":
        return tuple(getattr(self, f.name) for f in self.__fields__)

    def _compared(self) -> "tuple[Any, ...]":
        return tuple(getattr(self, name) for name in self.__compared__)

    def __setattr__(self, name: str, value: object) -> None:
        raise FrozenValueError(f"cannot assign to field {name!r} of a frozen {type(self).__name__}")

    def __delattr__(self, name: str) -> None:
        raise FrozenValueError(f"cannot delete field {name!r} of a frozen {type(self).__name__}")

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self._compared() == other._compared()

    def __hash__(self) -> int:
        return hash(self._compared())

    def __repr__(self) -> str:
        inner = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in self.__fields__)
        return f"{type(self).__qualname__}({inner})"

    def __reduce__(self) -> "tuple[type, tuple[Any, ...]]":
        return type(self), self._values()


def _init_then_post_init(self: Frozen, *args: "Any", **kwargs: "Any") -> None:
    """__init__ of a Frozen class with a __post_init__ (checks, derived values): only
    those pay for the call."""
    Frozen.__init__(self, *args, **kwargs)
    self.__post_init__()  # type: ignore[attr-defined]


def fields(value_or_class: "Frozen | type[Frozen]") -> "tuple[Field, ...]":
    """The declared fields, in order (the bases' first)."""
    return value_or_class.__fields__


def replace(value: "T", /, **changes: "Any") -> "T":
    """A copy of a frozen value with `changes`. A dataclass is copied the way
    dataclasses.replace copies it (its `init` fields), so one function serves call sites
    that handle both, and this module never imports dataclasses (the hook's path)."""
    if isinstance(value, Frozen):
        names = [f.name for f in value.__fields__]
    else:
        declared = getattr(value, "__dataclass_fields__", None)
        if declared is None:
            raise TypeError(
                f"replace() takes a frozen value or a dataclass, not {type(value).__name__}"
            )
        names = [name for name, spec in declared.items() if spec.init]
    current = {name: getattr(value, name) for name in names}
    return type(value)(**{**current, **changes})


def asdict(value: Frozen) -> "dict[str, Any]":
    """The fields as a dict, frozen values in them (also in lists and tuples) as dicts."""
    return {f.name: _plain(getattr(value, f.name)) for f in value.__fields__}


def _plain(item: "Any") -> "Any":
    if isinstance(item, Frozen):
        return asdict(item)
    if isinstance(item, (list, tuple)):
        return type(item)(_plain(i) for i in item)
    if isinstance(item, dict):
        return {k: _plain(v) for k, v in item.items()}
    return item


class Value:
    """A hand-written slotted class's equality and repr (module doc)."""

    __slots__: "tuple[str, ...]" = ()

    def _fields(self) -> tuple:
        return tuple(getattr(self, name) for name in self.__slots__)

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self._fields() == other._fields()

    # Mutable by convention, so not hashable; a frozen subclass may define __hash__ again
    # (checkers: a method or None). The ignore: object's stub says every class has one.
    __hash__: "ClassVar[Callable[[object], int] | None]" = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        inner = ", ".join(f"{n}={getattr(self, n)!r}" for n in self.__slots__)
        return f"{type(self).__name__}({inner})"
