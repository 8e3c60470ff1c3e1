"""The readers' failures: a value or a YAML text an input cannot be read as."""

from nri_plugin.errors import InvalidInput


class FieldProblem(InvalidInput, ValueError):
    """A value is wrong; `message` says what is expected. ``sub`` extends the field path
    (``[0].device``) when the problem is inside the value."""

    def __init__(self, message: str, sub: str = "") -> None:
        self.message = message
        self.sub = sub
        super().__init__(message)


class YamlProblem(InvalidInput, ValueError):
    """Unsafe or malformed YAML. ``path`` is the dotted field path ("" = document)."""

    def __init__(self, path: str, message: str) -> None:
        self.path = path
        self.message = message
        super().__init__(f"{path} {message}" if path else message)
