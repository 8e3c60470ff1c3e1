"""Package names resolved on first use (PEP 562), for packages the OCI hook passes through.

The hook passes through `core`, `topology` and `config` (a cold run: its decision, the
CPU-list parser, the node config) and must not pay for the node facts, YAML or
dataclasses that importing every re-exported name up front would cost. Lean on purpose
(no imports until a name is first looked up).
"""

TYPE_CHECKING = False  # `typing` costs the OCI hook start-up time; only checkers need it
if TYPE_CHECKING:
    from collections.abc import Callable


def lazy_exports(namespace: dict[str, object], exports: dict[str, tuple[str, ...]]
                 ) -> "tuple[Callable[[str], object], Callable[[], list[str]], list[str]]":
    """A package's ``__getattr__``, ``__dir__`` and ``__all__`` for `exports` (module ->
    the names it gives the package); `namespace` is the package's ``globals()``, where a
    name lands once looked up so that later lookups skip ``__getattr__``."""
    package = namespace["__name__"]
    where = {name: module for module, names in exports.items() for name in names}

    def __getattr__(name: str) -> object:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        from importlib import import_module  # only here: the hook's runs never need it

        value = getattr(import_module(f"{package}.{module}"), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted([*namespace, *where])

    return __getattr__, __dir__, sorted(where)
