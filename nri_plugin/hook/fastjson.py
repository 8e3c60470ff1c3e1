"""JSON decoding without importing `json` (and with it `re` and `enum`).

The hook parses a small state and config.json for every container; `import json` costs
about as much as the rest of the no-SLA path together (json.decoder compiles regexes at
import). The C scanner in `_json`, which `json` itself uses, needs only a context object,
so we drive it directly and fall back to `json` where `_json` is missing.
"""


from nri_plugin.errors import InvalidInput

_WHITESPACE = " \t\n\r"


class JsonError(InvalidInput, ValueError):
    """Text that is not one valid JSON document; the message names the position."""


def _no_constants(name: str) -> object:
    raise JsonError(f"{name} is not valid JSON")


class _Context:
    """The attributes `_json.make_scanner` reads (those of json.JSONDecoder)."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = staticmethod(_no_constants)


_scanner = None


def loads(text: str) -> object:
    """Parse one JSON document; raises JsonError (a ValueError) naming the position."""
    global _scanner
    if _scanner is None:
        try:
            from _json import make_scanner
        except ImportError:  # pragma: no cover - interpreters without the C accelerator
            return _slow(text)
        _scanner = make_scanner(_Context)
    start = len(text) - len(text.lstrip(_WHITESPACE))
    try:
        value, end = _scanner(text, start)
    except JsonError:
        raise
    except Exception:
        # Malformed input: the C scanner's own errors need json.decoder imported (and are
        # not all proper exceptions without it), so let `json` say what is wrong.
        return _slow(text)
    if end < len(text.rstrip(_WHITESPACE)):
        return _slow(text)  # extra data after the document
    return value


def _slow(text: str) -> object:
    import json

    try:
        return json.loads(text, parse_constant=_no_constants)
    except JsonError:
        raise
    except ValueError as exc:
        raise JsonError(str(exc)) from None
